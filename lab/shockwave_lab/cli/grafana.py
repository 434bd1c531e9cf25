"""`shockwave grafana`: write (or check) the Grafana dashboard of the controller's metrics (docs/grafana/)."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_shockwave.cli.common import OneLineError


@click.command()
@click.option("-o", "--output", metavar="FILE", default=None,
              help="Write the dashboard JSON here (docs/grafana/shockwave-dashboard.json in the repository). "
                   "Default: print it.")  # fmt: skip
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when FILE differs from what would be written.")
def grafana(output, check):
    """The Grafana dashboard (JSON model, import it in Grafana) of the controller's Prometheus metrics: rounds,
    round time, GPUs, finish-time fairness, rule shares, preemptions.  Its per-account and per-user row is built
    when the controller exports those metrics; the others are always there."""
    from shockwave_lab.grafana import dashboard_json, missing_owner_metrics

    text = dashboard_json()
    missing = missing_owner_metrics()
    if check:
        if not output:
            raise OneLineError("--check needs -o FILE")
        if not Path(output).is_file() or Path(output).read_text() != text:
            click.echo(f"{output} is not what the generator builds now: run shockwave grafana -o {output}", err=True)
            raise SystemExit(1)
        click.echo(f"{output} is up to date")
        return
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(text)
        click.echo(f"Wrote {output}")
    else:
        click.echo(text, nl=False)
    if missing:
        click.echo("Note: no per-account/user row: the controller does not export " + ", ".join(missing), err=True)
