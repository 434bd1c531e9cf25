"""Prometheus metrics of the controller (prometheus-client, own registry, served on metrics_address:metrics_port).

Cumulative values are counters (exposed with `_total`, prometheus_client's naming); values of the current
round are gauges.  Alerting on a stuck or degraded controller:

    shockwave_up == 0                                               # Slurm unreachable or state not writable
    time() - shockwave_last_round_completed_timestamp_seconds
        > 3 * shockwave_round_length_seconds                        # no round completed for 3 rounds
    up{job="shockwave"} == 0                                        # the process is gone (Prometheus' own)
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric


class _EventLines:
    """Event-line counts as counters, read from the latest snapshot (set once per round by the daemon)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._accepted = 0
        self._rejected: dict[str, int] = {}

    def set(self, accepted: int, rejected: Mapping[str, int]) -> None:
        with self._lock:
            self._accepted = max(self._accepted, int(accepted))
            for reason, n in rejected.items():
                self._rejected[str(reason)] = max(self._rejected.get(str(reason), 0), int(n))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            accepted, rejected = self._accepted, dict(self._rejected)
        a = CounterMetricFamily("shockwave_event_lines_accepted", "Event lines accepted since the controller started")
        a.add_metric([], accepted)
        yield a
        r = CounterMetricFamily(
            "shockwave_event_lines_rejected", "Event lines rejected since the controller started", labels=["reason"]
        )
        for reason, n in sorted(rejected.items()):
            r.add_metric([reason], n)
        yield r

    def describe(self) -> list[Metric]:
        return []


class ControllerMetrics:
    def __init__(self) -> None:
        # fmt: off
        r = self.registry = CollectorRegistry()
        self.rounds = Counter("shockwave_rounds", "Round attempts by outcome (done, slurm_error, state_error)",
                              ["status"], registry=r)
        self.solve_seconds = Histogram("shockwave_solve_seconds", "Policy decision time per round",
                                       buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        self.fallbacks = Counter("shockwave_solver_fallbacks", "Rounds decided by a fallback", ["kind"], registry=r)
        self.jobs = Gauge("shockwave_jobs", "Managed jobs by state", ["state"], registry=r)
        self.gpus_capacity = Gauge("shockwave_gpus_capacity", "GPUs in the managed partition", registry=r)
        self.gpus_planned = Gauge("shockwave_gpus_planned", "GPUs the plan gives jobs this round", registry=r)
        self.gpus_used = Gauge("shockwave_gpus_used", "GPUs held by running managed jobs", registry=r)
        self.rho_hat = Histogram("shockwave_rho_hat", "Predicted finish-time fairness of active jobs",
                                 buckets=(0.25, 0.5, 0.75, 0.9, 1.0, 1.05, 1.1, 1.25, 1.5, 2, 3, 5), registry=r)
        self.enact_actions = Counter("shockwave_enact_actions", "Enactment actions issued", ["verb"], registry=r)
        self.enact_errors = Counter("shockwave_enact_errors", "Enactment actions that failed", ["verb"], registry=r)
        self.preemptions = Counter("shockwave_preemptions", "Preemptions by outcome: preempted (checkpoint signal "
                                   "sent), kept (the gate kept a job running: preempting it would not pay), wasted "
                                   "(and why: wasted_last_round, wasted_restarted_early); target: wasted 0",
                                   ["outcome"], registry=r)
        self.resizes = Counter("shockwave_resizes", "GPU count changes of elastic jobs by outcome: started (its first "
                               "step enacted), done (running at its new count), wasted (changed again before it ran "
                               "a round at its count); target: wasted 0", ["outcome"], registry=r)
        self.type_moves = Counter("shockwave_type_moves", "Running jobs a round moved to a faster GPU type (the "
                                  "time saved pays for two restarts; enacted in authoritative mode)",
                                  ["from_type", "to_type"], registry=r)
        # what decides, measured (solver/types.py RULES): GPUs of this round placed by each rule, and the total
        self.rule_share = Gauge("shockwave_round_rule_share", "Share of this round's planned GPUs placed by each "
                                "rule (market, critical_path, deadline, finishing, backfill, guard, fallback, ...)",
                                ["rule"], registry=r)
        self.gpu_rounds = Counter("shockwave_gpu_rounds", "GPU-rounds placed, by the rule that placed them",
                                  ["rule"], registry=r)
        self.early_rounds = Counter("shockwave_early_rounds", "Rounds started before their boundary: a job ended and "
                                    "freed GPUs while another waited (poll_seconds, min_round_seconds)", registry=r)
        self.event_lines = _EventLines()
        r.register(self.event_lines)
        self.slurm_latency = Histogram("shockwave_slurm_read_seconds", "Latency of reading the Slurm queue",
                                       buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        self.slurm_failures = Counter("shockwave_slurm_failures", "Failed Slurm reads", registry=r)
        self.state_write_failures = Counter("shockwave_state_write_failures",
                                            "Rounds abandoned because the state could not be written (disk full...)",
                                            registry=r)
        self.config_reloads = Counter("shockwave_config_reloads", "SIGHUP reloads by result (ok, rejected)",
                                      ["result"], registry=r)
        self.up = Gauge("shockwave_up", "1 while rounds complete; 0 while Slurm is unreachable or the state is "
                        "not writable", registry=r)
        self.enacting = Gauge("shockwave_enacting", "1 when decisions are enacted; 0 in dry run or while the "
                              "state is not writable", registry=r)
        self.last_round = Gauge("shockwave_last_round_completed_timestamp_seconds",
                                "Unix time at which the last round completed", registry=r)
        self.round_length = Gauge("shockwave_round_length_seconds", "Configured round length", registry=r)
        self.round_index = Gauge("shockwave_round", "Index of the last completed round", registry=r)
        # per account and user of the active jobs (`set_users`): what the round gives them and how fair it is
        who = ["account", "user"]
        self.user_gpus_planned = Gauge("shockwave_user_gpus_planned", "GPUs the plan gives the user's jobs this "
                                       "round", who, registry=r)
        self.user_gpu_rounds = Counter("shockwave_user_gpu_rounds", "GPU-rounds placed for the user's jobs", who,
                                       registry=r)
        self.user_rho_hat_max = Gauge("shockwave_user_rho_hat_max", "Worst predicted finish-time fairness of the "
                                      "user's active jobs this round", who, registry=r)
        # fmt: on
        self._users: dict[str, set[tuple[str, str]]] = {}
        self.server: WSGIServer | None = None

    def set_users(
        self, owners: Mapping[Hashable, tuple[str, str]], planned: Mapping[Hashable, int], rho: Mapping[Hashable, float]
    ) -> None:
        """Per (account, user) of this round's active jobs (`owners`: job -> (account, user)): the GPUs the plan
        gives their jobs (`planned`: job -> GPUs), also added to their GPU-rounds, and the worst rho-hat of their
        jobs (`rho`: job -> finite rho-hat).  A user with no active job left drops out of the gauges."""
        gpus: dict[tuple[str, str], int] = {}
        worst: dict[tuple[str, str], float] = {}
        for job, (account, user) in owners.items():
            who = (account or "unknown", user or "unknown")
            gpus[who] = gpus.get(who, 0) + int(planned.get(job, 0))
            if job in rho:
                worst[who] = max(worst.get(who, rho[job]), rho[job])
        now: Mapping[tuple[str, str], float]
        for key, gauge, now in (("planned", self.user_gpus_planned, gpus), ("rho", self.user_rho_hat_max, worst)):
            for who in self._users.get(key, set()) - now.keys():
                gauge.remove(*who)
            self._users[key] = set(now)
            for who, v in now.items():
                gauge.labels(*who).set(v)
        for who, n in gpus.items():
            self.user_gpu_rounds.labels(*who).inc(n)

    def set_event_counts(self, accepted: int, rejected: Mapping[str, int]) -> None:
        self.event_lines.set(accepted, rejected)

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Listen on addr:port (raises OSError, e.g. EADDRINUSE); returns the bound port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self.server = server
        return server.server_port

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
