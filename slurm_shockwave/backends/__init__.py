"""Cluster backends behind one small contract: observe, apply, advance."""
from .base import ClusterBackend, JobRecord

__all__ = ["ClusterBackend", "JobRecord"]
