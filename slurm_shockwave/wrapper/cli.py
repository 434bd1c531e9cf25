"""``shockwave-run [options] -- CMD ...``: run a training program as a Shockwave-managed job.

* sets up ``<store>/users/<uid>/<jobid>/events.jsonl`` (the store found by ``context.find_store``: the site's
  unless told otherwise) and exports SHOCKWAVE_* variables; says in one line of the job's output where the job
  reports, or that it cannot (then the program is not told about the store);
* records ``start`` and ``exit`` (with the exit code) events;
* forwards SIGTERM, SIGINT, SIGHUP to the child, and SIGUSR1/SIGUSR2 only to a child that catches them (else
  they would kill it, or be lost in it: torchrun ignores them);
* turns the preemption signal (``--signal``, default USR1, as in ``sbatch --signal=B:USR1@<grace>``) into a
  checkpoint request: a request file is created that every rank polls (``$SHOCKWAVE_CHECKPOINT_REQUEST_FILE``:
  ``checkpoint.request`` in the job's own directory of the event store, which all nodes and the controller
  share; else in the checkpoint directory, which every rank reads on resume), so ``should_checkpoint()``
  becomes true in every process, behind any launcher, and a request that arrives before the program is ready
  is not lost.  The signal itself goes only to a child that catches it and is not a launcher (``LAUNCHERS``:
  torchrun ends its workers on a signal it handles; srun and mpirun pass it to tasks that may not have their
  handler yet).  The child starts with that signal ignored until it installs its own handler.

How a run ends is decided from the declared epochs (``outcome.py``): all done -> the child's status; stopped
early on the preemption signal -> ``scontrol requeue``, retried with back-off until the job's time runs out,
else exit 1 with one clear line; exit 0 with epochs left and no signal -> exit 1 ("ended early").
Otherwise the exit status is the child's; 128+N if the child was killed by signal N.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from slurm_shockwave.events.store import ensure_job_dir
from slurm_shockwave.events.writer import EventWriter
from slurm_shockwave.wrapper import outcome
from slurm_shockwave.wrapper.context import (
    ENV_EVENT_FILE,
    ENV_PREVIOUS_GPUS,
    ENV_STORE,
    JobContext,
    count_gpus,
    parse_signal,
    warn,
)

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
LAUNCHERS = ("torchrun", "srun", "mpirun", "mpiexec", "accelerate", "deepspeed")
REQUEST_NAME = "checkpoint.request"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shockwave-run",
        description="Run a training command as a Shockwave-managed job (events + signals).",
        usage="shockwave-run [--store DIR] [--checkpoint-dir DIR] [--signal SIG] -- CMD [ARG ...]",
    )
    p.add_argument(
        "--store",
        help="event store root (default: $SHOCKWAVE_STORE, else the site's controller "
        "config's event_store ($SHOCKWAVE_CONFIG or /etc/shockwave/config.toml), else "
        "~/.local/state/shockwave/events)",
    )
    p.add_argument(
        "--checkpoint-dir",
        help="exported as SHOCKWAVE_CHECKPOINT_DIR (default: $SHOCKWAVE_CHECKPOINT_DIR, else ./checkpoints/<jobid>)",
    )
    p.add_argument(
        "--signal",
        default=os.environ.get("SHOCKWAVE_CHECKPOINT_SIGNAL", "USR1"),
        help="preemption signal that requests a checkpoint (default USR1)",
    )
    p.add_argument(
        "--requeue-on-signal",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("SHOCKWAVE_REQUEUE_ON_SIGNAL", "1") != "0",
        help="after the child exits 0 following the preemption signal without having finished its epochs, run "
        "'scontrol requeue $SLURM_JOB_ID' (default on; SHOCKWAVE_REQUEUE_ON_SIGNAL=0 turns it off)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("shockwave-run: error: no command given (usage: shockwave-run [opts] -- CMD ...)", file=sys.stderr)
        return 2
    try:
        ckpt_sig = parse_signal(args.signal)
    except ValueError as exc:
        print(f"shockwave-run: error: --signal: {exc}", file=sys.stderr)
        return 2
    try:
        ctx = JobContext.from_env(store=args.store, checkpoint_dir=args.checkpoint_dir)
    except ValueError as exc:
        print(f"shockwave-run: error: {exc}", file=sys.stderr)
        return 2
    return Runner(ctx, cmd, ckpt_sig, args.requeue_on_signal).run()


class Runner:
    def __init__(self, ctx: JobContext, cmd: list[str], ckpt_sig: signal.Signals, requeue_on_signal: bool = False):
        self.ctx, self.cmd, self.ckpt_sig = ctx, cmd, ckpt_sig
        self.requeue_on_signal = requeue_on_signal
        self.child: subprocess.Popen | None = None
        self.pending: list[int] = []
        self.received: list[int] = []
        self.writer: EventWriter | None = None
        self.request_file: Path | None = None

    # ------------------------------------------------------------------ events
    def _emit(self, kind: str, **fields) -> None:
        if self.writer is None:
            return
        try:
            self.writer.emit(kind, **fields)
        except Exception as exc:  # noqa: BLE001 - a lost event never stops the job: said on stderr
            warn(f"could not record {kind} event: {exc}")

    def _setup_events(self) -> None:
        """One line in the job's output: where this job reports, or why it cannot (then its program is not
        told about the store either, so it does not warn about every event it cannot write)."""
        try:
            ensure_job_dir(self.ctx.store, self.ctx.job_id)
            self.writer = EventWriter(self.ctx.event_file, self.ctx.job_id, self.ctx.restart, source="wrapper")
        except Exception as exc:  # noqa: BLE001 - the job runs unreported: said on stderr
            warn(
                f"error: this job runs unreported: cannot write to the event store {self.ctx.store} (from "
                f"{self.ctx.store_source}): {exc}"
            )
            return
        warn(f"reporting to {self.ctx.store} (from {self.ctx.store_source})")

    # ----------------------------------------------------------------- signals
    def _on_signal(self, signum: int, _frame) -> None:
        self.received.append(signum)
        self._emit(
            "signal", signal=int(signum), reason="checkpoint request" if signum == self.ckpt_sig else "forwarded"
        )
        if signum == self.ckpt_sig and self.request_file is not None:
            with contextlib.suppress(OSError):
                self.request_file.touch()
        if self.child is None:
            self.pending.append(signum)
            return
        if signum in (signal.SIGUSR1, signal.SIGUSR2) and not self._child_takes(signum):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child.pid, signum)

    def _child_takes(self, signum: int) -> bool:
        """USR1/USR2 go to a child that catches them; the checkpoint signal never to a launcher."""
        cmd = self.cmd
        if signum == self.ckpt_sig and (
            os.path.basename(cmd[0]) in LAUNCHERS or any(a.startswith("torch.distributed.") for a in cmd[1:3])
        ):
            return False
        return self.child is not None and _catches(self.child.pid, signum)

    def _request_path(self) -> Path | None:
        """Where the checkpoint request is recorded, on a filesystem all the job's nodes share (module docstring)."""
        if self.writer is not None:
            return Path(self.ctx.event_file).parent / REQUEST_NAME
        try:
            self.ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            return self.ctx.checkpoint_dir / f".{REQUEST_NAME}"
        except OSError as exc:
            warn(f"no checkpoint request file ({exc}): only a program that catches the signal sees the request")
            return None

    def _child_setup(self) -> None:  # runs in the child between fork and exec
        signal.signal(self.ckpt_sig, signal.SIG_IGN)

    # --------------------------------------------------------------------- run
    def run(self) -> int:
        self._setup_events()
        self.request_file = self._request_path()
        self._drop_request()  # left by an earlier run of this job that was killed
        env, gpus = dict(os.environ), count_gpus()
        env.pop(ENV_PREVIOUS_GPUS, None)
        env.update(self.ctx.child_env(self.ckpt_sig.name[3:], self.request_file, gpus, self._previous_gpus()))
        if self.writer is None:
            for key in (ENV_STORE, ENV_EVENT_FILE):
                env.pop(key, None)
        previous = {s: signal.signal(s, self._on_signal) for s in FORWARDED}
        self._emit("start", gpus=gpus, host=socket.gethostname()[:255] or None, pid=os.getpid())
        code = self._run_child(env)
        for s, h in previous.items():
            # a late checkpoint signal must not kill us as we exit (SIG_DFL of USR1 terminates): keep it ignored
            signal.signal(s, signal.SIG_IGN if s == self.ckpt_sig and h in (signal.SIG_DFL, None) else h)
        self._drop_request()
        return code

    def _drop_request(self) -> None:
        if self.request_file is not None:
            with contextlib.suppress(OSError):
                self.request_file.unlink()

    def _run_child(self, env: dict[str, str]) -> int:
        try:
            self.child = subprocess.Popen(self.cmd, env=env, preexec_fn=self._child_setup)
        except OSError as exc:
            print(f"shockwave-run: error: cannot run {self.cmd[0]!r}: {exc.strerror}", file=sys.stderr)
            self._emit("exit", exit_code=127, reason=f"exec failed: {exc.strerror}")
            return 127
        for signum in self.pending:
            self._on_signal(signum, None)
        self.pending.clear()
        info = outcome.job_info(self.ctx.job_id) if self.ctx.in_slurm else outcome.JobInfo()
        rc = self.child.wait()
        if rc == -int(self.ckpt_sig) and self._all_epochs_reported():
            rc = 0  # the checkpoint request arrived after the last epoch, while the program was exiting
        sig_seen = [signal.Signals(s).name for s in dict.fromkeys(self.received)]
        reason = (
            "preempted"
            if (self.ckpt_sig in self.received or signal.SIGTERM in self.received)
            else ("completed" if rc == 0 else "failed")
        )
        if sig_seen:
            reason += " (signals: " + ",".join(sig_seen) + ")"
        if rc < 0:
            self._emit("exit", exit_code=rc, signal=-rc, reason=reason)
            return 128 - rc
        got = self._own_events() if self.writer is not None else None
        if got is None:  # events disabled or unreadable: nothing to decide from
            self._emit("exit", exit_code=min(rc, 255), reason=reason)
            return rc
        events, progress = got
        said = [e.reason for e in events if e.kind == "exit" and e.source == "api" and e.restart == self.ctx.restart]
        if rc != 0 and said and said[-1]:  # the program said why it fails (api.BatchSizeError): the job's reason
            reason = f"{said[-1]} (exit {rc})"[:256]
        out = outcome.decide(
            rc,
            progress,
            [int(s) for s in self.received],
            int(self.ckpt_sig),
            self._checkpointed_after_signal(events),
            outcome.hinted_epochs(info.comment, os.environ.get("SHOCKWAVE_MARKER", "shockwave")),
        )
        code = min(rc, 255)
        left = f"{out.done}/{out.total} epochs" if out.total else f"{out.done} epochs"
        if out.action == "requeue" and rc != 0:  # saved on the request, then failed on its way out (outcome.py)
            reason += f"; exit {rc} after its checkpoint"
        if out.action == "requeue" and not (self.requeue_on_signal and self.ctx.in_slurm):
            out = outcome.Outcome("ended_early" if rc == 0 else "failed", out.done, out.total)
        if out.action == "requeue":
            n0 = len(self.received)
            ok, err = outcome.requeue_with_retry(
                self.ctx.job_id,
                info.end_time,
                log=warn,
                default_retry_s=_retry_s(),
                stop=lambda: signal.SIGTERM in self.received[n0:],
            )
            if ok:
                reason += "; requeued"
            else:
                code = 1
                reason = f"ended early: {left}, requeue failed: {err}"[:256]
                print(
                    f"shockwave-run: error: job {self.ctx.job_id} stopped after {left} and could not be "
                    f"requeued before its time ran out (scontrol requeue: {err}); exiting 1 so Slurm does not "
                    "record it as COMPLETED. Resubmit it: it resumes from its last checkpoint.",
                    file=sys.stderr,
                )
        elif out.action == "ended_early":
            code = 1
            why = (
                "after the checkpoint signal, but requeueing is off"
                if self.ckpt_sig in self.received
                else "without a preemption signal"
            )
            reason = f"ended early: {left} {why}"[:256]
            print(
                f"shockwave-run: error: the program exited 0 after {left} {why}; exiting 1 so Slurm does "
                "not record the job as COMPLETED with work left.",
                file=sys.stderr,
            )
        self._emit("exit", exit_code=code, reason=reason)
        return code

    def _own_events(self):
        """(events, summary) of this job from the store, or None when they cannot be read."""
        try:
            from slurm_shockwave.events.reader import EventReader
            from slurm_shockwave.events.summary import summarize

            events = EventReader(self.ctx.store).read_job(self.ctx.job_id, expected_uid=os.geteuid()).events
            return events, summarize(events)
        except Exception as exc:  # noqa: BLE001 - the callers decide what an unreadable store means; said here once
            warn(f"cannot read this job's own events from {self.ctx.store}: {type(exc).__name__}: {exc}")
            return None

    def _previous_gpus(self) -> int | None:
        """The GPU count of this job's previous run (its last ``start`` of an earlier restart), None on its first."""
        got = self._own_events() if self.writer is not None and self.ctx.restart > 0 else None
        counts = [e.gpus for e in got[0] if e.kind == "start" and e.restart < self.ctx.restart] if got else []
        return next((n for n in reversed(counts) if n is not None), None)

    def _all_epochs_reported(self) -> bool:
        got = self._own_events()
        return got is not None and got[1].total_epochs is not None and got[1].epochs_done >= got[1].total_epochs

    def _checkpointed_after_signal(self, events) -> bool:
        signalled = [
            e.ts
            for e in events
            if e.kind == "signal" and e.signal == int(self.ckpt_sig) and e.restart == self.ctx.restart
        ]
        return bool(signalled) and any(
            e.kind == "checkpoint" and e.ts >= signalled[0] and e.restart == self.ctx.restart for e in events
        )


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (SigCgt of /proc/<pid>/status; assumed without it)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return True


def _retry_s() -> float:
    try:
        return max(0.0, float(os.environ.get("SHOCKWAVE_REQUEUE_RETRY_S", outcome.DEFAULT_RETRY_S)))
    except ValueError:
        return outcome.DEFAULT_RETRY_S


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
