"""Optional batch-size adaptation helpers (torch is imported lazily, inside functions).

* :class:`GNSEstimator` - gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al.
  2018, "An Empirical Model of Large-Batch Training", App. A.1), estimated from gradient
  norms at two batch sizes with exponential moving averages of the two unbiased estimates.  Suggests
  doubling the batch size when B_simple > batch size.  The two sizes come from :func:`measure_step` (one
  process: micro-batches vs. the full batch) or :func:`measure_step_distributed` (DDP, the standard estimator:
  each rank's local gradient before the all-reduce, B_small = the local batch, vs. the all-reduced one,
  B_big = the global batch); the batch size it compares with and reports is then the GLOBAL one.
* :class:`AccordionDetector` - critical-regime detection (Agarwal et al., "Accordion", MLSys
  2021): every ``interval`` epochs, compare the mean gradient norm with the previous window;
  a relative change >= ``threshold`` (0.5) means "critical" -> small batch, else large batch.

Both can record ``batch_size_change`` events through a :class:`~.api.Reporter` (``decide``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def grad_sq_norm(params: Iterable[Any]) -> float:
    """Squared L2 norm of the ``.grad`` of ``params`` (those with a gradient)."""
    import torch

    total = torch.zeros((), dtype=torch.float64)
    for p in params:
        if getattr(p, "grad", None) is not None:
            total += p.grad.detach().double().pow(2).sum().cpu()
    return float(total)


def measure_step(
    model: Any, loss_fn: Any, inputs: Any, targets: Any, micro_batches: int = 2
) -> tuple[float, float, int, float, int]:
    """Forward/backward one batch as ``micro_batches`` equal chunks.

    Leaves the full-batch mean gradient in ``p.grad`` (ready for ``optimizer.step()``) and
    returns ``(loss, small_sq_norm, small_bs, big_sq_norm, big_bs)`` where *small* is the
    mean squared norm of the micro-batch gradients and *big* that of the full-batch one.
    """
    import torch

    n = int(inputs.shape[0])
    k = max(1, min(int(micro_batches), n))
    b = n // k
    params = [p for p in model.parameters() if p.requires_grad]
    acc = [torch.zeros_like(p) for p in params]
    small_sq, loss_sum = 0.0, 0.0
    for i in range(k):
        sl = slice(i * b, (i + 1) * b)
        for p in params:
            p.grad = None
        loss = loss_fn(model(inputs[sl]), targets[sl])
        loss.backward()
        small_sq += grad_sq_norm(params)
        loss_sum += float(loss.detach())
        for a, p in zip(acc, params, strict=True):
            if p.grad is not None:
                a += p.grad
    big_sq = 0.0
    for a, p in zip(acc, params, strict=True):
        a /= k
        p.grad = a
        big_sq += float(a.double().pow(2).sum())
    return loss_sum / k, small_sq / k, b, big_sq, b * k


def measure_step_distributed(
    model: Any, loss_fn: Any, inputs: Any, targets: Any
) -> tuple[float, float, int, float, int]:
    """Forward/backward of this rank's batch under ``DistributedDataParallel``, measured for the GNS across ranks.

    The backward runs under ``model.no_sync()`` (the gradient stays local), then the gradients are averaged over
    the ranks in one all-reduce of a flat buffer, as DDP would, and left in ``p.grad`` (ready for
    ``optimizer.step()``; call ``optimizer.zero_grad()`` before, as usual).  Returns ``(loss, small_sq, small_bs,
    big_sq, big_bs)``: ``small_sq`` the mean over ranks of the squared norm of the local gradients (before the
    all-reduce) at ``small_bs`` = the local batch, ``big_sq`` the squared norm of the averaged gradient at ``big_bs``
    = the global batch (local batch x ranks); every rank gets the same numbers, so every rank's
    :class:`GNSEstimator` decides alike.  Without an initialized group of several processes it is
    :func:`measure_step` with two micro-batches.
    """
    import contextlib

    import torch

    from slurm_shockwave.wrapper import ranks

    dist = ranks.distributed()
    if dist is None:
        return measure_step(model, loss_fn, inputs, targets, 2)
    world = int(dist.get_world_size())
    sync_off = model.no_sync() if hasattr(model, "no_sync") else contextlib.nullcontext()
    with sync_off:
        loss = loss_fn(model(inputs), targets)
        loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    sq = flat.double().pow(2).sum().reshape(1)
    dist.all_reduce(flat)
    dist.all_reduce(sq)
    flat /= world
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n
    small_bs = int(inputs.shape[0])
    return float(loss.detach()), float(sq.item()) / world, small_bs, float(flat.double().pow(2).sum()), small_bs * world


class GNSEstimator:
    """Running estimate of the simple gradient noise scale B_simple."""

    def __init__(self, ema: float = 0.95, min_updates: int = 10):
        if not 0.0 <= ema < 1.0:
            raise ValueError("ema must be in [0, 1)")
        self.ema = float(ema)
        self.min_updates = int(min_updates)
        self.updates = 0
        self._g2 = 0.0  # EMA of the |G|^2 estimate
        self._s = 0.0  # EMA of the tr(Sigma) estimate
        self._w = 0.0  # EMA bias-correction weight

    def update(self, small_sq: float, small_bs: int, big_sq: float, big_bs: int) -> None:
        """Feed one pair of squared gradient norms measured at two batch sizes."""
        if not (big_bs > small_bs > 0) or not (math.isfinite(small_sq) and math.isfinite(big_sq)):
            return
        g2 = (big_bs * big_sq - small_bs * small_sq) / (big_bs - small_bs)
        s = (small_sq - big_sq) / (1.0 / small_bs - 1.0 / big_bs)
        a = self.ema
        self._g2 = a * self._g2 + (1 - a) * g2
        self._s = a * self._s + (1 - a) * s
        self._w = a * self._w + (1 - a)
        self.updates += 1

    @property
    def gns(self) -> float | None:
        """B_simple, or ``None`` while the estimate is not yet meaningful (too few updates,
        non-positive |G|^2 or tr(Sigma) estimates - i.e. too noisy)."""
        if self.updates < self.min_updates or self._w <= 0:
            return None
        g2, s = self._g2 / self._w, self._s / self._w
        if g2 <= 0 or s <= 0:
            return None
        return s / g2

    def suggest(self, current_bs: int, max_bs: int | None = None) -> int:
        """``2 * current_bs`` if GNS > current_bs (capped at ``max_bs``), else ``current_bs``."""
        g = self.gns
        if g is None or g <= current_bs:
            return current_bs
        new = current_bs * 2
        return current_bs if max_bs is not None and new > max_bs else new

    def decide(self, current_bs: int, reporter: Any = None, epoch: int | None = None, max_bs: int | None = None) -> int:
        """Like :meth:`suggest`; records a ``batch_size_change`` event when it changes."""
        new = self.suggest(current_bs, max_bs)
        if new != current_bs and reporter is not None:
            reporter.report_batch_size_change(current_bs, new, f"gns={self.gns:.1f}", epoch)
        return new

    def state_dict(self) -> dict[str, float]:
        return {"g2": self._g2, "s": self._s, "w": self._w, "updates": self.updates}

    def load_state_dict(self, st: dict[str, float]) -> None:
        self._g2, self._s, self._w = float(st["g2"]), float(st["s"]), float(st["w"])
        self.updates = int(st["updates"])


class AccordionDetector:
    """Critical-regime detector; suggests ``small_bs`` in critical regimes, else ``large_bs``.

    Call :meth:`observe` with each step's gradient norm and :meth:`end_epoch` after each
    epoch.  The first window is critical (training starts in a critical regime).
    """

    def __init__(self, small_bs: int, large_bs: int, threshold: float = 0.5, interval: int = 2):
        if not (0 < small_bs <= large_bs):
            raise ValueError("need 0 < small_bs <= large_bs")
        if threshold <= 0 or interval < 1:
            raise ValueError("threshold must be > 0 and interval >= 1")
        self.small_bs, self.large_bs = int(small_bs), int(large_bs)
        self.threshold, self.interval = float(threshold), int(interval)
        self.critical = True
        self.last_ratio: float | None = None
        self._sum, self._n = 0.0, 0
        self._prev: float | None = None

    def observe(self, grad_norm: float) -> None:
        if math.isfinite(grad_norm) and grad_norm >= 0:
            self._sum += grad_norm
            self._n += 1

    def end_epoch(self, epoch: int) -> bool:
        """Close epoch ``epoch`` (0-based); re-evaluates every ``interval`` epochs."""
        if (epoch + 1) % self.interval == 0 and self._n:
            cur = self._sum / self._n
            if self._prev is not None and self._prev > 0:
                self.last_ratio = abs(self._prev - cur) / self._prev
                self.critical = self.last_ratio >= self.threshold
            self._prev = cur
            self._sum, self._n = 0.0, 0
        return self.critical

    def suggest(self) -> int:
        return self.small_bs if self.critical else self.large_bs

    def decide(self, current_bs: int, reporter: Any = None, epoch: int | None = None) -> int:
        """The suggested batch size; records a ``batch_size_change`` event when it changes."""
        new = self.suggest()
        if new != current_bs and reporter is not None:
            ratio = "n/a" if self.last_ratio is None else f"{self.last_ratio:.2f}"
            why = "critical" if self.critical else "non-critical"
            reporter.report_batch_size_change(current_bs, new, f"accordion {why} ratio={ratio}", epoch)
        return new

    def state_dict(self) -> dict[str, Any]:
        return {
            "critical": self.critical,
            "last_ratio": self.last_ratio,
            "sum": self._sum,
            "n": self._n,
            "prev": self._prev,
        }

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.critical, self.last_ratio = bool(st["critical"]), st["last_ratio"]
        self._sum, self._n, self._prev = float(st["sum"]), int(st["n"]), st["prev"]
