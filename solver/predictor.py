"""Bayesian batch-size-regime predictor (Shockwave's Dirichlet posterior, without oracle support).

The reference (docs/reference.md §3) models the fraction of a job's lifetime epochs spent at each batch size with a
symmetric Dirichlet prior of total mass E (the job's epoch count) over the *profiled* set of batch sizes.  Here
the set of regimes is learned from what the job reports:

* observed regimes: every batch size in ``bs_history`` (completed epochs) plus the current ``batch_size`` (the
  reference counts the current epoch as observed: ``bs_schedule[:e+1]``);
* candidate (unobserved) regimes: ``max_batch_size`` when it is declared and larger than every observed size,
  and the power-of-two steps ``b*2, b*4, ...`` strictly between the current batch size ``b`` and that maximum
  (the way GNS-style jobs grow); nothing when no maximum is declared.  ``min_batch_size`` is only used to drop
  candidates below it (a job never shrinks below its declared minimum).

Prior mass: the total prior concentration is E, as in the reference, split with relative mass 1 for every
observed regime and ``UNOBSERVED_PRIOR_MASS`` (0.5) for every candidate regime.  With all regimes observed (or an
explicit ``support``) every regime gets E/|support|, exactly the reference's prior, and the arithmetic below then
reproduces ``dirichlet_posterior_remaining_runtime`` exactly (incl. the ``N~ = max(R, int(sum n'_b + 1))``
restatement).

Epoch durations per regime come from ``JobView.epoch_duration_by_bs``.  A regime without a duration is
extrapolated from the known regime nearest in log2(batch size), scaled by ``(b_known / b) ** DURATION_BS_EXPONENT``
(0.3).  The exponent is fitted to the reference throughput profiles, where doubling the batch size shortens an epoch
by 0-30% (LM 10->20: x0.70, ResNet-18 32->256: x0.85, Recommendation 2048->8192: x1.27): exponent 1 (constant
iteration time) would be far too optimistic, exponent 0 (constant per-sample time) pessimistic.  If no duration is
known at all, the epoch duration is derived from ``samples_per_epoch / batch_size / throughput``.

Restatement (``restate``): the reference's ``"reference"`` rule counts the current epoch as observed and then
restates to ``N~ = max(R, int(sum n'_b + 1))`` with ``R = E - e``, so its sum n'_b is about R - 1 epochs: the
estimate is one epoch short (a job of 5 epochs is under-estimated by 20% at its start and by all of it in its last
epoch).  ``"remaining"`` scales the posterior's regime mix of the epochs left to exactly R epochs (the current one
included; the current regime alone when the posterior has nothing left).  `shockwave-paper` keeps the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from solver.types import JobView

UNOBSERVED_PRIOR_MASS = 0.5
POWER_OF_TWO_STEPS = True  # add the power-of-two steps between current and max batch size as candidates
DURATION_BS_EXPONENT = 0.3
_MIN_DURATION = 1e-6
RESTATE_RULES = ("reference", "remaining")


@dataclass(frozen=True)
class Prediction:
    """Predicted remaining run time (seconds, exclusive, on the job's own GPUs) and the regime mix behind it."""

    remaining_s: float
    regimes: dict[Any, Any] = field(default_factory=dict)  # bs -> expected remaining epochs (restated to R)
    posterior_alpha: dict[Any, Any] = field(default_factory=dict)  # bs -> Dirichlet posterior concentration
    durations: dict[Any, Any] = field(default_factory=dict)  # bs -> epoch duration used (s)


def observed_batch_sizes(job: JobView) -> list[int]:
    """Batch sizes of the epochs seen so far, including the current one (as ``bs_schedule[:e+1]``)."""
    done = max(0, int(job.epochs_done))
    hist = [int(b) for b in job.bs_history[:done]]
    hist += [int(job.batch_size)] * (done - len(hist))  # history not reported: assume the current size
    if done < job.total_epochs or not hist:
        hist.append(int(job.batch_size))
    return hist


def candidate_regimes(job: JobView, observed: Iterable[int] | None = None) -> tuple[list[int], list[int]]:
    """(observed regimes, unobserved candidate regimes), each sorted."""
    obs = sorted(set(observed if observed is not None else observed_batch_sizes(job)))
    cands: set[int] = set()
    mx = job.max_batch_size
    cur = int(job.batch_size)
    if mx is not None and int(mx) > max(obs):
        mx = int(mx)
        cands.add(mx)
        b = cur * 2
        while POWER_OF_TWO_STEPS and 0 < b < mx:
            cands.add(b)
            b *= 2
    if job.min_batch_size is not None:
        cands = {b for b in cands if b >= int(job.min_batch_size)}
    cands -= set(obs)
    return obs, sorted(cands)


def regime_durations(job: JobView, regimes: Iterable[int]) -> dict[int, float]:
    """Epoch duration per regime: known value, else extrapolated from the nearest known regime."""
    known = {}
    for b, d in job.epoch_duration_by_bs.items():
        try:
            b, d = int(b), float(d)
        except (TypeError, ValueError):
            continue
        if b > 0 and d > 0 and math.isfinite(d):
            known[b] = d
    if not known:
        cur = max(1, int(job.batch_size))
        if job.throughput > 0 and job.samples_per_epoch > 0:
            known[cur] = job.samples_per_epoch / cur / job.throughput
        else:
            known[cur] = 1.0
    out = {}
    for b in regimes:
        if b in known:
            out[b] = known[b]
            continue
        ref = min(known, key=lambda k: (abs(math.log2(k) - math.log2(max(b, 1))), -k))
        out[b] = max(_MIN_DURATION, known[ref] * (ref / max(b, 1)) ** DURATION_BS_EXPONENT)
    return out


def _posterior(
    total_epochs: int,
    epochs_done: int,
    counts: Mapping[int, int],
    prior: Mapping[int, float],
    durations: Mapping[int, float],
    restate: str = "reference",
    current: int | None = None,
) -> Prediction:
    """The reference's posterior arithmetic on per-regime counts of the observed epochs.

    Subtracting 1 from ``rebased[b]`` once per observed epoch while it is >= 1 (the reference's loop) removes
    ``min(count_b, floor(rebased[b]))``: O(regimes), not O(epochs).
    """
    E = int(total_epochs)
    alpha = {b: float(a) for b, a in prior.items()}
    for b, n in counts.items():
        alpha[b] = alpha.get(b, 0.0) + n
    conc = sum(alpha.values())
    if E <= 0 or conc <= 0:
        return Prediction(1.0, {}, alpha, dict(durations))
    rebased = {b: E * a / conc for b, a in alpha.items()}
    for b, n in counts.items():
        v = rebased[b]
        if v >= 1:
            rebased[b] = v - min(n, math.floor(v))
    R = E - int(epochs_done)
    if restate == "remaining":
        return _remaining(R, rebased, alpha, durations, current)
    inflated = int(sum(rebased.values()) + 1)
    if inflated < R:
        inflated = R
    if inflated <= 0 or R <= 0:
        return Prediction(1.0, {b: 0.0 for b in rebased}, alpha, dict(durations))
    scale = R / inflated
    remaining = 0.0
    regimes = {}
    for b, nb in rebased.items():  # nb: rebased epochs of regime b (a float)
        remaining += nb * durations[b]
        regimes[b] = nb * scale
    return Prediction(remaining * scale, regimes, alpha, dict(durations))


def _remaining(
    R: int, rebased: Mapping[int, float], alpha: dict[Any, Any], durations: Mapping[int, float], current: int | None
) -> Prediction:
    """The ``"remaining"`` restatement: the posterior's mix of the epochs left, scaled to exactly R epochs."""
    if R <= 0:
        return Prediction(0.0, {b: 0.0 for b in rebased}, alpha, dict(durations))
    left = sum(rebased.values())
    if left > 0:
        regimes = {b: n * R / left for b, n in rebased.items()}
    else:
        regimes = {b: (float(R) if b == current else 0.0) for b in rebased}
    return Prediction(sum(n * durations[b] for b, n in regimes.items()), regimes, alpha, dict(durations))


class RegimeSummary:
    """Per-job running summary of the completed epochs: count per batch size, updated in O(1) per new epoch.

    ``update(job)`` reads only the epochs of ``bs_history`` it has not seen yet (history padded with the current
    batch size when not reported, as ``observed_batch_sizes``).  If the history shrinks or changes under it (a
    requeued job re-reporting), it rebuilds from scratch.
    """

    __slots__ = ("counts", "done", "last")

    def __init__(self) -> None:
        self.done = 0
        self.counts: dict[int, int] = {}
        self.last: int | None = None  # batch size of the last counted epoch (consistency check)

    def update(self, job: JobView) -> RegimeSummary:
        done = max(0, int(job.epochs_done))
        hist = job.bs_history
        if done < self.done or (self.done and self.done <= len(hist) and int(hist[self.done - 1]) != self.last):
            self.done, self.counts, self.last = 0, {}, None
        cur = int(job.batch_size)
        for e in range(self.done, done):
            b = int(hist[e]) if e < len(hist) else cur
            self.counts[b] = self.counts.get(b, 0) + 1
            self.last = b
        self.done = done
        return self

    def observed_counts(self, job: JobView) -> dict[int, int]:
        """Counts of epochs 0..e, the current epoch included (``observed_batch_sizes`` as counts)."""
        out = dict(self.counts)
        if self.done < job.total_epochs or not out:
            b = int(job.batch_size)
            out[b] = out.get(b, 0) + 1
        return out


def predict_remaining(
    job: JobView, support: Iterable[int] | None = None, summary: RegimeSummary | None = None, restate: str = "reference"
) -> Prediction:
    """Predicted remaining exclusive run time of ``job``.

    ``support``: optional explicit regime set (reference behaviour: symmetric prior E/|support|).  By default the
    support is learned from the job's reports (module docstring).  ``summary``: the job's running
    ``RegimeSummary`` (kept by the caller between rounds); without it the history is read in full.  ``restate``:
    one of ``RESTATE_RULES`` (module docstring).
    """
    if restate not in RESTATE_RULES:
        raise ValueError(f"restate must be one of {RESTATE_RULES}, got {restate!r}")
    if summary is None:
        summary = RegimeSummary()
    counts = summary.update(job).observed_counts(job)
    E = max(int(job.total_epochs), 1)
    obs = sorted(counts)
    if support is not None:
        regs = sorted(set(int(b) for b in support) | set(obs))
        prior = {b: E / len(regs) for b in regs}
    else:
        obs, cands = candidate_regimes(job, obs)
        mass = len(obs) + UNOBSERVED_PRIOR_MASS * len(cands)
        prior = {b: E / mass for b in obs}
        prior.update({b: E * UNOBSERVED_PRIOR_MASS / mass for b in cands})
    durations = regime_durations(job, prior.keys())
    return _posterior(E, job.epochs_done, counts, prior, durations, restate, int(job.batch_size))


def done_duration_from_summary(summary: RegimeSummary, durations: Mapping[int, float]) -> float:
    """Profiled duration of the completed epochs from the running counts: O(regimes)."""
    return float(sum(n * durations[b] for b, n in summary.counts.items()))


def done_epochs_duration(job: JobView, durations: Mapping[int, float] | None = None) -> float:
    """Profiled duration of the completed epochs (the reference's sum(epoch_duration[:e]))."""
    hist = [int(b) for b in job.bs_history[: max(0, job.epochs_done)]]
    hist += [int(job.batch_size)] * max(0, job.epochs_done - len(hist))
    if durations is None or any(b not in durations for b in set(hist)):
        durations = regime_durations(job, set(hist) | {int(job.batch_size)})
    return float(sum(durations[b] for b in hist))


def mean_past_epoch_duration(job: JobView, durations: Mapping[int, float] | None = None) -> float:
    """d-bar: mean duration of epochs 0..e (completed + current), the reference's interpolate_epoch_duration."""
    obs = observed_batch_sizes(job)
    if durations is None or any(b not in durations for b in set(obs)):
        durations = regime_durations(job, set(obs))
    return float(sum(durations[b] for b in obs) / len(obs))
