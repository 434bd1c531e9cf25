"""`shockwave report`: figures and a self-contained HTML page from one or more `shockwave simulate -o` files."""
from __future__ import annotations

import click

from slurm_shockwave.cli.common import OneLineError, emit_json


@click.command()
@click.argument("results", nargs=-1, required=True, metavar="RESULTS...")
@click.option("-o", "--output", required=True, metavar="FILE",
              help="The HTML page to write (self-contained: figures embedded, no internet needed).")
@click.option("--png-dir", metavar="DIR", default=None,
              help="Also write each figure as <stem>_<figure>.png here. Default: next to the HTML.")
@click.option("--title", default=None, help="Page title. Default: 'Shockwave simulation report'.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a machine-readable summary (files written, policies, metrics table).")
def report(results, output, png_dir, title, as_json):
    """Plot and tabulate the results files written by `shockwave simulate -o` (policies are merged;
    a policy in several files is taken from the last)."""
    from shockwave_lab.report import ReportError, make_report

    try:
        summary = make_report(results, output, png_dir=png_dir, title=title)
    except ReportError as e:
        raise OneLineError(str(e)) from None
    for w in summary["warnings"]:
        click.echo(f"Warning: {w}", err=True)
    if as_json:
        emit_json(summary)
        return
    click.echo(f"Wrote {summary['html']} ({len(summary['policies'])} policies: {', '.join(summary['policies'])})")
    for path in summary["pngs"].values():
        click.echo(f"Wrote {path}")
