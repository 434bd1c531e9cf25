"""Prometheus metrics of the controller (prometheus-client, own registry, served on config.metrics_port)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class ControllerMetrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.rounds = Counter("shockwave_rounds", "Rounds completed", ["status"], registry=r)
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
        self.events_accepted = Gauge("shockwave_event_lines_accepted", "Event lines accepted (cumulative)",
                                     registry=r)
        self.events_rejected = Gauge("shockwave_event_lines_rejected", "Event lines rejected (cumulative)",
                                     ["reason"], registry=r)
        self.slurm_latency = Histogram("shockwave_slurm_read_seconds", "Latency of reading the Slurm queue",
                                       buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        self.slurm_failures = Counter("shockwave_slurm_failures", "Failed Slurm reads", registry=r)

    def serve(self, port: int, addr: str = "127.0.0.1"):
        return start_http_server(port, addr=addr, registry=self.registry)
