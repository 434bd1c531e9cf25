"""How ``shockwave-run`` ends a run: finished, requeued, or ended early (never COMPLETED with work left).

"Finished" is decided from the declared epochs (the job's own report of its total, else the ``epochs=`` hint
of its ``--comment``), not from the presence of a checkpoint event:

* the program exited 0 and all declared epochs are done                  -> exit 0 (Slurm: COMPLETED);
* it exited 0 with epochs left after the checkpoint signal (USR1)        -> ``scontrol requeue``, retried
  with back-off until the job's own time runs out; if it never succeeds -> exit 1 with a clear line;
* it exited 0 with epochs left after SIGTERM (Slurm itself is requeueing or ending the job) -> exit 0;
* it exited 0 with epochs left and no signal at all                      -> exit 1 ("ended early");
* it exited non-zero with epochs left, after the checkpoint signal and a checkpoint reported after it -> requeue
  as above: the work is saved, and the failure came after (torch's gloo sometimes aborts a rank at exit,
  "terminate called without an active exception", and torchrun then exits 1); failing the job would lose it.
With no total known (not reported, and no epochs reported for the ``epochs=`` hint to apply to: a program
that does not use the API) the old rule applies: requeue only if a checkpoint was reported after the
signal, else the program's own exit status.  When the job's events cannot be written or read, the
program's exit status is used as it is.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from slurm_shockwave.wrapper.context import warn

#: retry ``scontrol requeue`` at most this long when the job's end time is unknown (no time limit)
DEFAULT_RETRY_S = 3600.0
#: stop retrying this many seconds before the job's end time (Slurm kills the job then)
END_MARGIN_S = 5.0
BACKOFF_S = (1, 2, 4, 8, 15, 30, 60)
#: scontrol errors that no retry can fix (anything else, e.g. slurmctld unreachable, is retried)
PERMANENT = (
    "invalid job id",
    "disabled",
    "access/permission denied",
    "not batch job",
    "only batch jobs",
    "already completing or completed",
)
#: scontrol errors that mean the job is back in the queue already (e.g. the controller's requeuehold won)
ALREADY = ("pending execution",)


@dataclass
class JobInfo:
    end_time: float | None = None  # Unix time Slurm ends the job (None: unknown / no limit)
    comment: str = ""


def job_info(job_id: str, env: Mapping[str, str] = os.environ, run=subprocess.run) -> JobInfo:
    """End time (``SLURM_JOB_END_TIME`` if Slurm sets it, else ``squeue %e``) and comment of the job."""
    info = JobInfo()
    val = env.get("SLURM_JOB_END_TIME", "").strip()
    if val.isdigit():
        info.end_time = float(val)
    try:
        r = run(["squeue", "-h", "-j", str(job_id), "-o", "%e|%k"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return info
    line = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
    end, _, info.comment = line.partition("|")
    if info.end_time is None and end[:1].isdigit():
        with contextlib.suppress(ValueError):  # no end time: the job's limit is not known
            info.end_time = datetime.fromisoformat(end.strip()).timestamp()  # local time, as squeue prints
    return info


def hinted_epochs(comment: str, marker: str = "shockwave") -> int | None:
    """The ``epochs=`` hint of the job's comment (None if absent or invalid)."""
    try:
        from slurm_shockwave.slurm.hints import parse_hints

        hints = parse_hints(comment, marker)
    except Exception as exc:  # noqa: BLE001 - an invalid hint is the controller's business (it quarantines the job)
        warn(f"ignoring the job comment's hints ({type(exc).__name__}: {exc})")
        return None
    return getattr(hints, "epochs", None) if hints is not None else None


@dataclass(frozen=True)
class Outcome:
    action: str  # "finished" | "requeue" | "slurm_requeues" | "ended_early" | "failed"
    done: int | None = None
    total: int | None = None


def decide(
    rc: int, progress, signals: list[int], ckpt_sig: int, checkpointed_after_signal: bool, hinted_total: int | None
) -> Outcome:
    """What to do once the program exited with ``rc`` (see the module docstring)."""
    import signal as _signal

    done = progress.epochs_done if progress is not None else 0
    total = progress.total_epochs if progress is not None and progress.total_epochs else None
    if total is None and done > 0:
        total = hinted_total  # the comment's epochs=, for a job that reports epochs but not its total
    if rc != 0:  # failed, unless it saved its work on the checkpoint request first (module docstring)
        saved = ckpt_sig in signals and checkpointed_after_signal and (total is None or done < total)
        return Outcome("requeue" if saved else "failed", done, total)
    if total is None:
        return Outcome("requeue" if ckpt_sig in signals and checkpointed_after_signal else "finished", done, None)
    if done >= total:
        return Outcome("finished", done, total)
    if ckpt_sig in signals:
        return Outcome("requeue", done, total)
    if int(_signal.SIGTERM) in signals:
        return Outcome("slurm_requeues", done, total)
    return Outcome("ended_early", done, total)


def requeue_with_retry(
    job_id: str,
    end_time: float | None,
    *,
    run=subprocess.run,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    log: Callable[[str], None] = lambda m: None,
    default_retry_s: float = DEFAULT_RETRY_S,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[bool, str]:
    """``scontrol requeue JOB`` until it succeeds, fails for good, Slurm ends the job (``stop()``: SIGTERM seen),
    or the job's time runs out (without an end time: ``default_retry_s``, env ``SHOCKWAVE_REQUEUE_RETRY_S``).
    Returns (ok, last error)."""
    deadline = (end_time - END_MARGIN_S) if end_time else clock() + default_retry_s
    attempt, err = 0, ""
    while True:
        left = deadline - clock()
        try:
            r = run(
                ["scontrol", "requeue", str(job_id)], capture_output=True, text=True, timeout=max(1.0, min(30.0, left))
            )
            if r.returncode in (0, -15):  # -15: Slurm's SIGTERM reached scontrol too, i.e. the requeue is under way
                return True, ""
            last = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            err = last[0][:200]
        except subprocess.TimeoutExpired:
            err = "timed out"
        except OSError as exc:
            err = str(exc)[:200]
        if any(p in err.lower() for p in ALREADY):
            return True, ""
        if any(p in err.lower() for p in PERMANENT):
            return False, err
        if stop():  # SIGTERM: Slurm itself is ending or requeueing the job now
            return False, f"{err}; then SIGTERM from Slurm"
        wait = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
        attempt += 1
        if clock() + wait >= deadline:
            return False, err
        log(f"scontrol requeue failed ({err}); retry {attempt} in {wait} s")
        sleep(wait)
