"""Workload inputs: reference traces, throughput profiles, our own job-spec format."""
from .errors import WorkloadError
from .jobs import JobSpec
from .throughputs import ThroughputTable

__all__ = ["WorkloadError", "JobSpec", "ThroughputTable"]
