"""Cluster backends behind one small contract: observe, apply, advance (and, as a service, the rest of
`ServiceBackend`); found by name through the ``slurm_shockwave.backends`` entry points."""

from slurm_shockwave.backends.base import (
    BackendUnavailable,
    ClusterBackend,
    JobRecord,
    ServiceBackend,
    backend_class,
    backend_names,
)

__all__ = ["BackendUnavailable", "ClusterBackend", "JobRecord", "ServiceBackend", "backend_class", "backend_names"]
