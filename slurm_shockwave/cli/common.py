"""Shared CLI helpers: one-line errors, JSON output, rich tables."""
from __future__ import annotations

import json
import sys

import click


class OneLineError(click.ClickException):
    """Printed as `Error: <one line>` with exit status 2, nothing else."""

    exit_code = 2


def emit_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def console():
    from rich.console import Console
    return Console(file=sys.stdout, width=max(140, Console().width))
