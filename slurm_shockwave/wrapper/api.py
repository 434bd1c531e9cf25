"""Training-loop API: report progress, learn when to checkpoint.

Usage inside a program started by ``shockwave-run``::

    from slurm_shockwave.wrapper import api
    api.configure(total_epochs=30, samples_per_epoch=50000, min_batch_size=32, max_batch_size=512)
    for epoch in range(start, 30):
        ...                                      # train; poll api.should_checkpoint() per step
        api.report_epoch(epoch, batch_size=bs, samples=n, duration_s=dt)

Writing events never raises: failures are reported on stderr (a few times) and ignored.
The API installs handlers for the checkpoint signal (``$SHOCKWAVE_CHECKPOINT_SIGNAL``,
default SIGUSR1) and SIGTERM that only set a flag: the program must poll
``should_checkpoint()``, save, call ``checkpointed(path)`` and exit.  The flag is also set by the wrapper's
request file (``$SHOCKWAVE_CHECKPOINT_REQUEST_FILE``, a stat at most every 0.5 s), the path by which a request
reaches the ranks behind a launcher.  In a multi-process job only global rank 0 (``ranks.py``) writes events.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_shockwave.events.schema import is_valid_job_id
from slurm_shockwave.events.store import ensure_job_dir
from slurm_shockwave.events.writer import EventWriter
from slurm_shockwave.wrapper import ranks
from slurm_shockwave.wrapper.context import (
    DEFAULT_SIGNAL,
    ENV_CKPT_SIGNAL,
    ENV_EVENT_FILE,
    ENV_JOB_ID,
    ENV_REQUEST_FILE,
    ENV_RESTART,
    ENV_STORE,
    count_gpus,
    parse_signal,
    warn,
)

BAD_BATCH = "elastic: the global batch does not divide"  # the start of the exit reason (per_rank_batch)


class BatchSizeError(ValueError):
    """This run's world size does not divide the global batch size (:meth:`Reporter.per_rank_batch`)."""


_flag = threading.Event()  # process-wide "checkpoint requested"
_stop = threading.Event()  # SIGTERM/SIGINT seen: checkpoint and exit
_installed: set[int] = set()
_MAX_WARNINGS = 5


def _handler_for(sig: int, prev: Any):
    def handler(signum, frame):
        _flag.set()
        if signum in (signal.SIGTERM, signal.SIGINT):
            _stop.set()
        if callable(prev):
            prev(signum, frame)

    return handler


def install_signal_handlers(checkpoint_signal: str | int | None = None, handle_sigterm: bool = True) -> bool:
    """Install the flag-setting handlers (main thread only).  Returns True if installed."""
    sigs = []
    try:
        sigs.append(parse_signal(checkpoint_signal or os.environ.get(ENV_CKPT_SIGNAL) or DEFAULT_SIGNAL))
    except ValueError as exc:
        warn(f"{exc}; using SIGUSR1")
        sigs.append(signal.SIGUSR1)
    if handle_sigterm:
        sigs.append(signal.SIGTERM)
    ok = True
    for sig in sigs:
        if sig in _installed:
            continue
        try:
            prev = signal.getsignal(sig)
            signal.signal(sig, _handler_for(sig, prev))
            _installed.add(sig)
        except (ValueError, OSError):  # not the main thread / not allowed
            ok = False
    return ok


class Reporter:
    """Writes this job's events.  Every method is safe to call when events are disabled."""

    def __init__(
        self,
        event_file: str | os.PathLike | None = None,
        job_id: str | None = None,
        restart: int | None = None,
        *,
        gpus: int | None = None,
        install_handlers: bool = True,
        checkpoint_signal: str | None = None,
        handle_sigterm: bool = True,
        env: Mapping[str, str] | None = None,
    ):
        env = os.environ if env is None else env
        self._warnings = 0
        self.job_id = job_id or env.get(ENV_JOB_ID) or env.get("SLURM_JOB_ID") or ""
        self.restart = restart if restart is not None else _int(env.get(ENV_RESTART) or env.get("SLURM_RESTART_COUNT"))
        self.gpus = gpus if gpus is not None else count_gpus(env)
        self.defaults: dict[str, Any] = {}
        self._request_file = env.get(ENV_REQUEST_FILE)
        self._next_file_check = 0.0
        self.writer: EventWriter | None = None
        path = event_file or env.get(ENV_EVENT_FILE)
        self.rank = ranks.detect(env)
        try:
            if not self.rank.leader:
                pass  # one rank reports: the others' events would repeat its own
            elif not is_valid_job_id(self.job_id):
                if path or env.get(ENV_STORE):
                    warn(f"events disabled: bad or missing job id {self.job_id[:40]!r}")
            elif path:
                self.writer = EventWriter(path, self.job_id, self.restart, source="api")
            elif env.get(ENV_STORE):
                d = ensure_job_dir(env[ENV_STORE], self.job_id)
                self.writer = EventWriter(d / "events.jsonl", self.job_id, self.restart, "api")
        except Exception as exc:  # noqa: BLE001 - the job runs on unreported: said on stderr (the job's log)
            warn(f"events disabled: {exc}")
        if install_handlers:
            install_signal_handlers(checkpoint_signal, handle_sigterm)

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def configure(self, **defaults: Any) -> None:
        """Fields added to every ``epoch_end`` (total_epochs, samples_per_epoch,
        min_batch_size, max_batch_size, ...).  ``gpus=`` overrides the detected count."""
        if "gpus" in defaults:
            self.gpus = defaults.pop("gpus")
        self.defaults.update({k: v for k, v in defaults.items() if v is not None})

    def emit(self, kind: str, **fields: Any) -> bool:
        """Append one event; returns False (and warns on stderr) instead of raising."""
        if self.writer is None:
            return False
        try:
            self.writer.emit(kind, **fields)
            return True
        except Exception as exc:  # noqa: BLE001 - a lost event never stops training: said on stderr (bounded)
            self._warnings += 1
            if self._warnings <= _MAX_WARNINGS:
                warn(f"could not record {kind} event: {exc}")
            return False

    def report_epoch(
        self, epoch: int, batch_size: int, samples: int, duration_s: float, gpus: int | None = None, **extra: Any
    ) -> bool:
        """Epoch ``epoch`` (0-based) just ended: ``samples`` samples at ``batch_size`` took
        ``duration_s`` seconds on ``gpus`` GPUs.  Throughput is derived and tagged."""
        gpus = self.gpus if gpus is None else gpus
        fields = {**self.defaults, **extra}
        if (
            samples
            and duration_s
            and duration_s > 0
            and "throughput" not in extra
            and 1e-9 <= samples / duration_s <= 1e10
        ):  # the schema's range (tiny test epochs)
            fields.update(throughput=samples / duration_s, throughput_bs=batch_size, throughput_gpus=gpus)
        return self.emit(
            "epoch_end", epoch=epoch, batch_size=batch_size, samples=samples, duration_s=duration_s, gpus=gpus, **fields
        )

    def report_batch_size_change(self, old: int, new: int, reason: str = "", epoch: int | None = None) -> bool:
        """The program switched its global batch size from ``old`` to ``new``."""
        return self.emit(
            "batch_size_change",
            old_batch_size=old,
            batch_size=new,
            reason=str(reason)[:256],
            epoch=epoch,
            min_batch_size=self.defaults.get("min_batch_size"),
            max_batch_size=self.defaults.get("max_batch_size"),
        )

    def checkpointed(self, path: str | os.PathLike, epoch: int | None = None, step: int | None = None) -> bool:
        """A checkpoint was written to ``path`` (``epoch``: last completed epoch in it; ``step``: optimizer steps
        done in it, counted from the job's first run)."""
        return self.emit("checkpoint", path=str(path)[:1024], epoch=epoch, step=step)

    def resumed(self, step: int, epoch: int | None = None, path: str | os.PathLike | None = None) -> bool:
        """This run starts training after ``step`` optimizer steps (0 on a fresh start; the restored checkpoint's
        on a resume), in ``epoch``; ``path``: the checkpoint restored.  Once per run, before the first step: with
        the checkpoints' ``step`` it shows which steps each run did (a step run twice is work lost)."""
        return self.emit("resume", step=step, epoch=epoch, path=str(path)[:1024] if path else None)

    def per_rank_batch(self, global_bs: int, world_size: int | None = None, accumulate: int = 1) -> int:
        """The per-rank (per-device) batch size that keeps the global batch ``global_bs`` on this run's ranks:
        ``global_bs // (world_size x accumulate)`` (default world size: this run's, ``ranks.detect``).  When it does
        not divide, records why as this run's ``exit`` reason (``shockwave-run`` keeps it: the controller shows it)
        and raises :class:`BatchSizeError`: the job fails once, with that line, instead of training at another
        global batch size."""
        world = self.rank.world_size if world_size is None else int(world_size)
        n = world * max(1, int(accumulate))
        if global_bs >= n and global_bs % n == 0:
            return global_bs // n
        why = f"{BAD_BATCH}: global batch size {global_bs} over {world} ranks x {accumulate} accumulation steps"
        self.emit("exit", exit_code=1, reason=why)
        raise BatchSizeError(f"{why}; give the job a GPU count that divides it (e.g. gpus=MIN-MAX in powers of 2)")

    def should_checkpoint(self) -> bool:
        """True once the checkpoint signal (or SIGTERM) arrived, or the wrapper asked."""
        if _flag.is_set():
            return True
        if self._request_file:
            now = time.monotonic()
            if now >= self._next_file_check:
                self._next_file_check = now + 0.5
                if os.path.exists(self._request_file):
                    _flag.set()
        return _flag.is_set()

    def should_exit(self) -> bool:
        """True if SIGTERM/SIGINT arrived (Slurm is ending or requeueing the job)."""
        return _stop.is_set()

    @staticmethod
    def request_checkpoint() -> None:
        _flag.set()

    @staticmethod
    def clear_checkpoint_request() -> None:
        _flag.clear()


def _int(val: str | None) -> int:
    try:
        return max(0, int(val)) if val else 0
    except ValueError:
        return 0


# ---------------------------------------------------------------- module-level facade
_default: Reporter | None = None
_lock = threading.Lock()


def get_reporter() -> Reporter:
    """The process-wide reporter, built from the environment on first use."""
    global _default
    with _lock:
        if _default is None:
            _default = Reporter()
        return _default


def configure(**defaults: Any) -> None:
    get_reporter().configure(**defaults)


def report_epoch(
    epoch: int, batch_size: int, samples: int, duration_s: float, gpus: int | None = None, **extra: Any
) -> bool:
    return get_reporter().report_epoch(epoch, batch_size, samples, duration_s, gpus, **extra)


def report_batch_size_change(old: int, new: int, reason: str = "", epoch: int | None = None) -> bool:
    return get_reporter().report_batch_size_change(old, new, reason, epoch)


def checkpointed(path: str | os.PathLike, epoch: int | None = None, step: int | None = None) -> bool:
    return get_reporter().checkpointed(path, epoch, step)


def resumed(step: int, epoch: int | None = None, path: str | os.PathLike | None = None) -> bool:
    return get_reporter().resumed(step, epoch, path)


def per_rank_batch(global_bs: int, world_size: int | None = None, accumulate: int = 1) -> int:
    return get_reporter().per_rank_batch(global_bs, world_size, accumulate)


def should_checkpoint() -> bool:
    return get_reporter().should_checkpoint()


def should_exit() -> bool:
    return get_reporter().should_exit()


def restart_count() -> int:
    return get_reporter().restart


def checkpoint_dir() -> Path | None:
    d = os.environ.get("SHOCKWAVE_CHECKPOINT_DIR")
    return Path(d) if d else None
