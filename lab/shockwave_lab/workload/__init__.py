"""Workload inputs: reference traces, throughput profiles, our own job-spec format."""
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.jobs import JobSpec
from shockwave_lab.workload.throughputs import ThroughputTable

__all__ = ["WorkloadError", "JobSpec", "ThroughputTable"]
