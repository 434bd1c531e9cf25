"""Shared CLI helpers: one-line errors, JSON output, rich tables."""

from __future__ import annotations

import sys

import click

from slurm_shockwave.strict_json import dumps


class OneLineError(click.ClickException):
    """Printed as `Error: <one line>` with exit status 2, nothing else."""

    exit_code = 2


def emit_json(data) -> None:
    """Strict JSON on stdout (non-finite numbers as null: jq and JSON.parse read it)."""
    click.echo(dumps(data, indent=2))


#: the width of plain output (not a terminal): wider than any table, so none is cut to fit (`swdemo-a…`)
PLAIN_WIDTH = 10_000


def console():
    """The console of tables and messages: on a terminal, its width (at least 140 columns); anywhere else (a
    log, a pipe) plain text, no colours, each table as wide as its content and no line wrapped."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(file=sys.stdout, width=max(140, Console().width))
    return Console(file=sys.stdout, width=PLAIN_WIDTH, color_system=None, highlight=False, soft_wrap=True, emoji=False)


def esc(text) -> str:
    """User or path text made safe for rich markup (`[solved]` would be eaten as a style tag)."""
    from rich.markup import escape

    return escape(str(text))
