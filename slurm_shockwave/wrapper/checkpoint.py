"""Atomic checkpoint/resume helper for requeued Slurm jobs.

``save()`` writes ``<dir>/checkpoint.pkl`` atomically: temp file in the same directory,
fsync, ``os.replace``, fsync of the directory.  The previous checkpoint is kept as
``checkpoint.prev.pkl`` and used if the newest one cannot be read.  A crash or SIGKILL
mid-save leaves the old checkpoint intact (and at worst a stale ``.tmp`` file, removed
by a later save once it is 10 minutes old).  Every save has its own temp name, so two
processes saving into one directory never remove each other's file (the last rename wins);
``Training`` has only global rank 0 save, or each rank its own file (``per_rank=True``).

The payload is pickled (torch tensors pickle fine); only load checkpoints you wrote.

Stale checkpoints: Slurm job ids are reused (e.g. after a controller reinstall), so on the
*first* run of a job (restart count 0) a checkpoint written by the same job id before this
run started (``$SHOCKWAVE_RUN_START``, exported by shockwave-run) belongs to an older job
and is ignored with a warning.  Checkpoints of *other* job ids in the same directory are
loaded (deliberate resume of a resubmitted job).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import secrets
import time
from pathlib import Path
from typing import Any

from slurm_shockwave.wrapper.context import warn

FORMAT = 1
STALE_TMP_S = 600  # a temp file not written to for this long belongs to a save that died


class CheckpointManager:
    """Save/load one job's training state; knows which epoch to resume from.

    ``epochs_done`` passed to :meth:`save` is the number of fully completed epochs
    contained in the state (so :meth:`resume_epoch` is the 0-based index to run next).  ``step`` (optimizer
    steps done since the job's first run) and ``epoch_step`` (steps done inside the epoch ``epochs_done``) are
    kept beside it when given, so a run can resume at the exact next step (:meth:`position`); other keywords of
    :meth:`save` too (``Training``'s sample position, global batch size and world size: :meth:`meta`).
    """

    def __init__(self, directory: str | os.PathLike | None = None, *, reporter: Any = None, name: str = "checkpoint"):
        if directory is None:
            directory = os.environ.get("SHOCKWAVE_CHECKPOINT_DIR") or "checkpoints"
        self.dir = Path(directory)
        self.path = self.dir / f"{name}.pkl"
        self.prev_path = self.dir / f"{name}.prev.pkl"
        self.reporter = reporter
        self.restart = _int_env("SHOCKWAVE_RESTART_COUNT", _int_env("SLURM_RESTART_COUNT", 0))
        self.job_id = os.environ.get("SHOCKWAVE_JOB_ID") or os.environ.get("SLURM_JOB_ID")
        self.run_start = _float_env("SHOCKWAVE_RUN_START")
        self._meta: dict[str, Any] | None = None

    def save(
        self,
        state: dict[str, Any],
        epochs_done: int | None = None,
        *,
        step: int | None = None,
        epoch_step: int | None = None,
        **meta: Any,
    ) -> Path:
        """Atomically persist ``state``; records a ``checkpoint`` event (with ``step`` when given) if a reporter
        is set."""
        if not isinstance(state, dict):
            raise TypeError("checkpoint state must be a dict")
        self.dir.mkdir(parents=True, exist_ok=True)
        payload = {
            **meta,
            "format": FORMAT,
            "epochs_done": epochs_done,
            "step": step,
            "epoch_step": epoch_step,
            "restart": self.restart,
            "job_id": self.job_id,
            "time": time.time(),
            "state": state,
        }
        tmp = self.dir / f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        for stale in self.dir.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                if stale.stat().st_mtime < time.time() - STALE_TMP_S:
                    stale.unlink()
        try:
            with open(tmp, "wb") as fh:
                pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            _unlink(tmp)
            raise
        if self.path.exists():
            _unlink(self.prev_path)
            with contextlib.suppress(OSError):
                os.link(self.path, self.prev_path)
        os.replace(tmp, self.path)
        _fsync_dir(self.dir)
        self._meta = payload
        if self.reporter is not None:
            last = None if not epochs_done else epochs_done - 1
            if step is None:
                self.reporter.checkpointed(self.path, epoch=last)
            else:
                self.reporter.checkpointed(self.path, epoch=last, step=step)
        return self.path

    def load(self) -> dict[str, Any] | None:
        """The saved state dict, or ``None`` if there is no readable checkpoint."""
        for path in (self.path, self.prev_path):
            if not path.exists():
                continue
            try:
                with open(path, "rb") as fh:
                    payload = pickle.load(fh)
                if not (
                    isinstance(payload, dict)
                    and payload.get("format") == FORMAT
                    and isinstance(payload.get("state"), dict)
                ):
                    raise ValueError("not a shockwave checkpoint")
            except Exception as exc:  # noqa: BLE001 - an unreadable checkpoint: said on stderr, the previous one tried
                warn(f"cannot read checkpoint {path}: {exc}")
                continue
            if self._stale(payload):
                warn(
                    f"ignoring checkpoint {path}: written by an earlier job with the same id "
                    f"{self.job_id} (this is its first run)"
                )
                continue
            self._meta = payload
            return payload["state"]
        self._meta = None
        return None

    def _stale(self, payload: dict[str, Any]) -> bool:
        return earlier_job(payload.get("job_id"), payload.get("time"))

    def resume_epoch(self) -> int:
        """0-based index of the first epoch to run (0 without a checkpoint)."""
        if self._meta is None:
            self.load()
        if not self._meta:
            return 0
        n = self._meta.get("epochs_done")
        return n if isinstance(n, int) and n >= 0 else 0

    def position(self) -> tuple[int, int] | None:
        """(steps done since the job's first run, steps done inside the resume epoch) of the loaded checkpoint,
        or ``None`` when it holds no step position (none loaded, or saved without ``step``)."""
        if self._meta is None:
            self.load()
        meta = self._meta or {}
        step, inner = meta.get("step"), meta.get("epoch_step")
        if isinstance(step, int) and step >= 0:
            return step, inner if isinstance(inner, int) and inner >= 0 else 0
        return None

    def meta(self) -> dict[str, Any]:
        """What the loaded checkpoint keeps beside the state (the keywords of :meth:`save`); {} when none loaded."""
        return {k: v for k, v in (self._meta or {}).items() if k != "state"}

    def exists(self) -> bool:
        return self.path.exists() or self.prev_path.exists()


def earlier_job(job_id: object, written: object) -> bool:
    """Whether a checkpoint that records ``job_id`` and the time it was ``written`` belongs to an earlier job with this
    job's id (module docstring: only on this job's first run, written before the run started).  The integrations'
    checkpoints apply the same rule to their marks."""
    env = os.environ
    restart = _int_env("SHOCKWAVE_RESTART_COUNT", _int_env("SLURM_RESTART_COUNT", 0))
    start = _float_env("SHOCKWAVE_RUN_START")
    job = env.get("SHOCKWAVE_JOB_ID") or env.get("SLURM_JOB_ID")
    if restart != 0 or start is None or not job:
        return False
    return job_id == job and isinstance(written, (int, float)) and written < start


def _unlink(p: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        p.unlink()


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _int_env(name: str, default: int) -> int:
    try:
        return max(0, int(os.environ[name]))
    except (KeyError, ValueError):
        return default


def _float_env(name: str) -> float | None:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return None
