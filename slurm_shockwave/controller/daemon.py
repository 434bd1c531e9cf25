"""`shockwave controller run`: the round loop on a cluster backend (Slurm by default), as a service.

Single instance (an flock'ed lock file in the state directory); SIGTERM/SIGINT finish the current round
and exit cleanly; SIGHUP reloads the config file at the next round boundary if it is valid (else the
running config is kept and the problems are logged); the cluster's controller down or slow: log, back off (doubling up
to a round), retry, never act on a partial read; every round and every action is journalled in SQLite
first, so kill -9 at any point and a restart resume without losing or repeating an action.  When the
state cannot be written (disk full, read-only remount) nothing is enacted: the round is retried with
back-off until writes succeed again, and the controller resumes by itself.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from slurm_shockwave.backends.base import BackendUnavailable, backend_class
from slurm_shockwave.controller.config import RESTART_ONLY, ConfigError, ControllerConfig, load_config
from slurm_shockwave.controller.faults import state_dir_error
from slurm_shockwave.controller.loop import RoundLoop
from slurm_shockwave.errors import StartupError
from slurm_shockwave.journal import StateStore, check_state_db, lock, state_db_error, storage_problem
from slurm_shockwave.journal.lock import AlreadyRunning
from slurm_shockwave.journal.record import RoundRecord
from slurm_shockwave.strict_json import dumps
from solver.policies import make_policy
from solver.types import RULES

if TYPE_CHECKING:
    from slurm_shockwave.controller.metrics_server import ControllerMetrics
    from slurm_shockwave.events.reader import EventReader

_T = TypeVar("_T")
log = logging.getLogger("slurm_shockwave.controller")
#: a partition with no nodes / no GPUs / no usable node is warned about at the first round and every N rounds
PARTITION_WARN_EVERY = 10


class _EarlyStop(Protocol):  # cli/controller.py `EarlyStop`
    signum: int | None
    ignored: frozenset[int]


def _gate_cost(cfg: ControllerConfig) -> float | None:
    """The preemption gate's default cost, on where the controller preempts (authoritative mode)."""
    return float(cfg.preemption_cost_s) if cfg.mode == "authoritative" else None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        d = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info).splitlines()[-1]
        return dumps(d)


class Controller:
    def __init__(
        self,
        cfg: ControllerConfig,
        reader: EventReader | None = None,
        metrics: ControllerMetrics | None = None,
        clock: Callable[[], float] = time.time,
        force_dry_run: bool = False,
        **backend_options: Any,
    ) -> None:
        """`backend_options` go to the backend's `from_config` (e.g. a Slurm backend's `cli`)."""
        self.cfg = cfg
        self.force_dry_run = force_dry_run or False
        if self.force_dry_run:
            cfg.dry_run = True
        state_dir = Path(cfg.state_dir)
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = lock.acquire(state_dir)
        except AlreadyRunning:
            raise
        except OSError as e:
            raise state_dir_error(state_dir, e) from None
        bad = check_state_db(cfg.state_path) if Path(cfg.state_path).exists() else None
        if bad:  # corrupt pages anywhere, not only in the header: refuse at start
            os.close(self._lock_fd)
            raise StartupError(bad)
        try:
            self.state = StateStore(cfg.state_path)
            self.state.next_round()
        except sqlite3.Error as e:
            os.close(self._lock_fd)
            raise state_db_error(cfg.state_path, e) from None
        except OSError as e:
            os.close(self._lock_fd)
            raise state_dir_error(state_dir, e) from None
        if reader is None:
            from slurm_shockwave.events.reader import EventReader

            reader = EventReader(cfg.event_store)
        self.reader = reader
        self.metrics = metrics
        self.policy = make_policy(cfg.policy.name, cfg.policy.settings)
        saved = self.state.get("policy_state")
        if saved and hasattr(self.policy, "load_state_dict"):
            try:
                self.policy.load_state_dict(saved)
            except Exception as e:  # noqa: BLE001 - a stale state must not stop the controller
                log.warning("could not restore the policy state (%s: %s); starting it fresh", type(e).__name__, e)
        self.backend = backend_class(cfg.backend).from_config(
            cfg, self.state, reader, metrics, clock, **backend_options
        )
        self.loop = RoundLoop(
            self.backend,
            self.policy,
            on_decision=self._journal,
            on_round=self._after,
            explain=True,
            mode=cfg.mode,
            preemption_cost_s=_gate_cost(cfg),
            rounds_per_restart=cfg.rounds_per_restart,
        )
        self._reload_requested = False
        self._storage_down_since: float | None = None
        self._rounds_done = 0
        self._try_write(
            lambda: self.state.put(
                "config",
                {
                    "mode": cfg.mode,
                    "round_seconds": cfg.round_seconds,
                    "partition": cfg.partition,
                    "policy": cfg.policy.name,
                    "dry_run": cfg.dry_run,
                    "pid": os.getpid(),
                    "started": time.time(),
                },
            )
        )
        if metrics:
            metrics.round_length.set(cfg.round_seconds)
            metrics.enacting.set(0 if cfg.dry_run else 1)

    # ------------------------------------------------------------------ lifecycle
    def install_signal_handlers(self, early: _EarlyStop) -> None:
        """SIGTERM/SIGINT: finish the round and exit; SIGHUP: reload; but a signal ignored when the process started
        stays ignored.  `early` (cli/controller.py `EarlyStop`): a signal that came while starting stops the
        controller before its first round; its `ignored`, the signals left alone."""

        def stop(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %s: finishing the round, then exiting", signal.Signals(signum).name)
            self.backend.stop()

        def hup(_signum: int, _frame: FrameType | None) -> None:
            log.info("SIGHUP: reloading %s at the next round boundary", self.cfg.source)
            self._reload_requested = True

        for signum, handler in ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, hup)):
            if signum in early.ignored:
                log.info("%s was ignored when the controller started: left ignored", signal.Signals(signum).name)
            else:
                signal.signal(signum, handler)
        if early.signum is not None:
            stop(early.signum, None)

    def close(self) -> None:
        try:
            self.state.close()
        finally:
            os.close(self._lock_fd)

    def run(self, max_rounds: int | None = None) -> int:
        """Run rounds until stopped (or max_rounds).  Returns the number of rounds completed."""
        backoff, done = 1.0, 0
        while not self.backend.done() and (max_rounds is None or done < max_rounds):
            if self._reload_requested:
                self._reload_requested = False
                self.reload()
            r = self.backend.round_index
            try:
                self.state.begin_round(r, time.time())
                self.loop.run_round()
            except BackendUnavailable as e:
                self._backend_down(r, e, backoff)
            except (sqlite3.Error, OSError) as e:
                why = storage_problem(e)
                if why is None:
                    raise
                self._storage_down(r, why, backoff)
            else:
                backoff = 1.0
                done += 1
                continue
            self.backend.wait(backoff)
            backoff = min(backoff * 2, self.cfg.round_seconds)
        return done

    # ------------------------------------------------------------------ faults
    def _backend_down(self, r: int, e: BackendUnavailable, backoff: float) -> None:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        self._try_write(lambda: self.state.finish_round(r, "slurm_error"))  # retried under the same number
        outage = self._try_read(lambda: self.state.get("slurm_outage", {"count": 0})) or {"count": 0}
        self._try_write(
            lambda: self.state.put(
                "slurm_outage", {"count": outage["count"] + 1, "last_error": first, "ts": time.time()}
            )
        )
        if self.metrics:
            self.metrics.slurm_failures.inc()
            self.metrics.rounds.labels("slurm_error").inc()
            self.metrics.up.set(0)
        log.warning("round %d: %s unavailable (%s); retrying in %.1f s", r, self.backend.label, first, backoff)

    def _storage_down(self, r: int, why: str, backoff: float) -> None:
        try:
            if self.state.db.in_transaction:
                self.state.db.rollback()
        except sqlite3.Error:
            pass
        if self.metrics:
            self.metrics.state_write_failures.inc()
            self.metrics.rounds.labels("state_error").inc()
            self.metrics.up.set(0)
            self.metrics.enacting.set(0)
        if self._storage_down_since is None:
            self._storage_down_since = time.time()
            log.error(
                "round %d: the state cannot be written (%s) in %s: enacting nothing until writes succeed "
                "again; free space on (or remount read-write) that filesystem, the controller resumes by "
                "itself",
                r,
                why,
                self.cfg.state_dir,
            )
        else:
            log.warning("round %d: state still not writable (%s); retrying in %.1f s", r, why, backoff)

    def _try_write(self, fn: Callable[[], object]) -> bool:
        try:
            fn()
            return True
        except (sqlite3.Error, OSError) as e:
            why = storage_problem(e)
            if why is None:
                raise
            log.warning("state write skipped: %s", why)
            return False

    def _try_read(self, fn: Callable[[], _T]) -> _T | None:
        try:
            return fn()
        except sqlite3.Error:
            return None

    # ------------------------------------------------------------------ SIGHUP
    def reload(self) -> bool:
        """Re-read the config file; apply it if valid (restart-only keys keep their running value)."""
        path = self.cfg.source
        try:
            new = load_config(path)
        except ConfigError as e:
            log.error(
                "SIGHUP: %s has %d problem(s); keeping the running config: %s",
                path,
                len(e.problems),
                "; ".join(e.problems),
            )
            if self.metrics:
                self.metrics.config_reloads.labels("rejected").inc()
            return False
        new.dry_run = new.dry_run or self.force_dry_run
        kept = [k for k in RESTART_ONLY if getattr(new, k) != getattr(self.cfg, k)]
        old_policy = (self.cfg.policy.name, self.cfg.policy.settings)
        changed = self.cfg.update_from(new, keep=RESTART_ONLY)
        self.backend.reconfigure(self.cfg)
        self.loop.mode = self.cfg.mode
        self.loop.preemption_cost_s = _gate_cost(self.cfg)
        self.loop.rounds_per_restart = self.cfg.rounds_per_restart
        if (self.cfg.policy.name, self.cfg.policy.settings) != old_policy:
            self.policy = make_policy(self.cfg.policy.name, self.cfg.policy.settings)
            self.loop.policy = self.policy
            log.info("SIGHUP: policy is now %s (its learned state starts fresh)", self.cfg.policy.name)
        if self.metrics:
            self.metrics.config_reloads.labels("ok").inc()
            self.metrics.round_length.set(self.cfg.round_seconds)
            self.metrics.enacting.set(0 if self.cfg.dry_run else 1)
        log.info(
            "SIGHUP: reloaded %s; changed: %s%s",
            path,
            ", ".join(changed) or "nothing",
            f"; needs a restart, running value kept: {', '.join(kept)}" if kept else "",
        )
        return True

    # ------------------------------------------------------------------ hooks
    def _journal(self, record: RoundRecord) -> None:
        """The round's one record, journalled before anything is enacted, with the policy's own state."""
        view = record.view
        busy = sum(j.num_gpus for j in view.jobs if j.ran_last_round)
        self.state.record_round(record, busy)
        if hasattr(self.policy, "state_dict"):
            try:
                self.state.put("policy_state", self.policy.state_dict())
            except (sqlite3.Error, OSError):
                raise  # state not writable: the round stops here, nothing enacted
            except Exception:  # the policy's state only speeds up a restart
                log.warning("policy state not saved", exc_info=True)
        if self.metrics:
            self._round_metrics(record, busy)

    def _round_metrics(self, record: RoundRecord, busy: int) -> None:
        m, view, decision = self.metrics, record.view, record.decision
        assert m is not None  # called only with metrics
        gpus = {j.job_id: j.num_gpus for j in view.jobs}
        m.solve_seconds.observe(record.decide_seconds)
        if record.fallback:
            m.fallbacks.labels("loop").inc()
        if decision.path == "fallback":
            m.fallbacks.labels("solver").inc()
        m.gpus_capacity.set(view.num_gpus)
        # the placed counts (an elastic job may run on other than it asked), else the asked ones
        m.gpus_planned.set(
            sum(
                sum(decision.placement[j].values()) if j in decision.placement else gpus.get(j, 0) for j in decision.run
            )
        )
        m.gpus_used.set(busy)
        states = {"running": 0, "pending": 0}
        for j in view.jobs:
            states["running" if j.ran_last_round else "pending"] += 1
        for k, v in states.items():
            m.jobs.labels(k).set(v)
        rho: dict[Any, float] = {}
        for jid, plan in decision.plans.items():
            if plan.rho_hat is not None and math.isfinite(plan.rho_hat):
                rho[jid] = float(plan.rho_hat)
                m.rho_hat.observe(rho[jid])
        placed: dict[str, int] = {}
        for jid in decision.run:
            rule = decision.plans[jid].rule if jid in decision.plans else ""
            placed[rule or "policy"] = placed.get(rule or "policy", 0) + gpus.get(jid, 0)
        total = sum(placed.values())
        for rule in RULES:
            m.rule_share.labels(rule).set(placed.get(rule, 0) / total if total else 0.0)
        for rule, n in placed.items():
            m.gpu_rounds.labels(rule).inc(n)
        m.set_users({j.job_id: (j.account, j.user) for j in view.jobs}, {j: gpus.get(j, 0) for j in decision.run}, rho)
        for a, b in self.loop.last_type_moves.values():  # solver/type_moves.py
            m.type_moves.labels(a, b).inc()
        if self.reader is not None:
            m.set_event_counts(self.reader.accepted, dict(self.reader.rejected))

    def _after(self, record: RoundRecord) -> None:
        self.state.finish_round(record.round_index, "done")
        now = time.time()
        if self._storage_down_since is not None:
            log.info("state writable again after %.0f s; enacting again", now - self._storage_down_since)
            self._storage_down_since = None
        if self.metrics:
            m = self.metrics
            m.rounds.labels("done").inc()
            m.up.set(1)
            m.enacting.set(0 if self.cfg.dry_run else 1)
            m.last_round.set(now)
            m.round_index.set(record.round_index)
        log.info(
            "round %d: %d active, %d planned, %.3f s to decide%s",
            record.round_index,
            len(record.view.jobs),
            len(record.run),
            record.decide_seconds,
            " (fallback)" if record.fallback else "",
        )
        if self._rounds_done % PARTITION_WARN_EVERY == 0:
            self._check_partition()
        self._rounds_done += 1

    def warn_at_start(self) -> list[str]:
        """At start: log (not fail on) cluster settings the controller needs (`controller check` lists them)."""
        problems = self.backend.startup_warnings()
        for p in problems:
            log.warning("%s", p)
        return problems

    def _check_partition(self) -> None:
        """Warn (not silence) when the backend has no usable capacity (no nodes, no GPUs, all down)."""
        for w in self.backend.health_warnings():
            log.warning("%s", w)
