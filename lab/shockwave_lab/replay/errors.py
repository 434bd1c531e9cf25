"""The replay's one error."""


class ReplayError(RuntimeError):
    """The replay cannot be trusted (a job failed, an epoch was lost or repeated, a daemon was left...)."""
