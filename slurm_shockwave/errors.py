"""Errors shared by every part that runs: each `str()` is one line, the cause and what to do."""

from __future__ import annotations


class StartupError(RuntimeError):
    """The controller cannot start; `str()` is one line: the cause and what to do."""
