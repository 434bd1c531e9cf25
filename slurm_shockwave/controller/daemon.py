"""`shockwave controller run`: the round loop on the Slurm backend, as a service.

Single instance (an flock'ed lock file in the state directory); SIGTERM/SIGINT finish the current round
and exit cleanly; slurmctld down or slow: log, back off (doubling up to a round), retry, never act on a
partial read; every round and every action is journalled in SQLite first, so kill -9 at any point and a
restart resume without losing or repeating an action.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import time
from pathlib import Path

from solver.policies import make_policy

from ..backends.slurm import SlurmBackend
from ..slurmcli import SlurmCLI, SlurmError
from .loop import RoundLoop
from .state import StateStore

log = logging.getLogger("slurm_shockwave.controller")


class AlreadyRunning(RuntimeError):
    pass


class JsonFormatter(logging.Formatter):
    def format(self, record):
        d = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
             "msg": record.getMessage()}
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(d)


class Controller:
    def __init__(self, cfg, cli=None, reader=None, metrics=None, clock=time.time):
        self.cfg = cfg
        Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._lock(Path(cfg.state_dir) / "controller.lock")
        self.state = StateStore(cfg.state_path)
        self.cli = cli or SlurmCLI(env=cfg.slurm_env, timeout=cfg.slurm_timeout)
        if reader is None:
            from ..events.reader import EventReader
            reader = EventReader(cfg.event_store)
        self.reader = reader
        self.metrics = metrics
        self.policy = make_policy(cfg.policy, cfg.policy_config or None)
        saved = self.state.get("policy_state")
        if saved and hasattr(self.policy, "load_state_dict"):
            try:
                self.policy.load_state_dict(saved)
            except Exception:  # noqa: BLE001 - a stale state must not stop the controller
                log.warning("could not restore the policy state; starting it fresh")
        self.backend = SlurmBackend(self.cli, cfg, self.state, reader, metrics, clock)
        self.loop = RoundLoop(self.backend, self.policy, on_decision=self._journal_decision, on_round=self._after)
        self.state.put("config", {"mode": cfg.mode, "round_seconds": cfg.round_seconds, "partition": cfg.partition,
                                  "policy": cfg.policy, "dry_run": cfg.dry_run, "pid": os.getpid(),
                                  "started": time.time()})

    # ------------------------------------------------------------------ lifecycle
    @staticmethod
    def _lock(path: Path) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(f"another controller holds {path} (pid {other})") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        return fd

    def install_signal_handlers(self) -> None:
        def stop(signum, _frame):
            log.info("signal %s: finishing the round, then exiting", signal.Signals(signum).name)
            self.backend.stop_event.set()
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def close(self) -> None:
        self.state.close()
        os.close(self._lock_fd)

    def run(self, max_rounds: int | None = None) -> int:
        """Run rounds until stopped (or max_rounds).  Returns the number of rounds completed."""
        backoff, done = 1.0, 0
        while not self.backend.done() and (max_rounds is None or done < max_rounds):
            r = self.backend.round_index
            self.state.begin_round(r, time.time())
            try:
                self.loop.run_round()
            except SlurmError as e:
                self.state.finish_round(r, "slurm_error")      # the round is retried under the same number
                outage = self.state.get("slurm_outage", {"count": 0})
                self.state.put("slurm_outage", {"count": outage["count"] + 1, "last_error": str(e).splitlines()[0],
                                                "ts": time.time()})
                if self.metrics:
                    self.metrics.slurm_failures.inc()
                    self.metrics.rounds.labels("slurm_error").inc()
                log.warning("round %d: Slurm unavailable (%s); retrying in %.1f s", r, str(e).splitlines()[0], backoff)
                self.backend.stop_event.wait(backoff)
                backoff = min(backoff * 2, self.cfg.round_seconds)
                continue
            backoff = 1.0
            done += 1
        return done

    # ------------------------------------------------------------------ hooks
    def _journal_decision(self, view, decision, elapsed, fallback) -> None:
        gpus = {j.job_id: j.num_gpus for j in view.jobs}
        planned = sum(gpus.get(j, 0) for j in decision.run)
        busy = sum(j.num_gpus for j in view.jobs if j.ran_last_round)
        info = {"run": list(decision.run), "now": view.now, "round_length": view.round_length,
                "capacity": view.num_gpus, "mode": self.cfg.mode, "dry_run": self.cfg.dry_run,
                "policy": getattr(self.policy, "name", "?"), "fallback": fallback,
                "decision": decision.info}
        self.state.record_decision(view.round_index, len(view.jobs), decision.run, elapsed, self.cfg.mode, fallback,
                                   info, view.num_gpus, busy)
        if hasattr(self.policy, "state_dict"):
            try:
                self.state.put("policy_state", self.policy.state_dict())
            except Exception:  # noqa: BLE001
                log.warning("policy state not saved", exc_info=True)
        if self.metrics:
            m = self.metrics
            m.solve_seconds.observe(elapsed)
            if fallback:
                m.fallbacks.labels("loop").inc()
            path = (decision.info or {}).get("path")
            if path == "fallback":
                m.fallbacks.labels("solver").inc()
            m.gpus_capacity.set(view.num_gpus)
            m.gpus_planned.set(planned)
            m.gpus_used.set(busy)
            states = {"running": 0, "pending": 0}
            for j in view.jobs:
                states["running" if j.ran_last_round else "pending"] += 1
            for k, v in states.items():
                m.jobs.labels(k).set(v)
            for j in (decision.info or {}).get("jobs", {}).values():
                if isinstance(j, dict) and j.get("rho_hat") is not None:
                    m.rho_hat.observe(float(j["rho_hat"]))
            if self.reader is not None:
                m.events_accepted.set(getattr(self.reader, "accepted", 0) or 0)
                for reason, n in self.reader.rejected.items():
                    m.events_rejected.labels(reason).set(n)

    def _after(self, record, view) -> None:
        self.state.finish_round(record.round_index, "done")
        if self.metrics:
            self.metrics.rounds.labels("done").inc()
        log.info("round %d: %d active, %d planned, %.3f s to decide%s", record.round_index, record.active,
                 len(record.run), record.decide_seconds, " (fallback)" if record.fallback else "")


def uninstall(cfg, cli=None) -> dict:
    """Remove what the controller did to Slurm: release the jobs it holds, reset their SiteFactor to 0."""
    state = StateStore(cfg.state_path)
    cli = cli or SlurmCLI(env=cfg.slurm_env, timeout=cfg.slurm_timeout)
    held = sorted(state.held_by_us(), key=int)
    touched = sorted({a["job_id"] for a in state.actions(verb="site_factor", status="done")}, key=int)
    live = {str(j.job_id): j for j in cli.squeue_jobs()}
    to_release = [j for j in held if j in live and live[j].held]
    to_reset = [j for j in touched if j in live and live[j].pending]
    if to_reset:
        cli.scontrol_update(to_reset, SiteFactor=0)
    if to_release:
        cli.release(to_release)
    state.close()
    return {"released": to_release, "site_factor_reset": to_reset}
