"""`shockwave demo`: the main job, end to end, on a local Slurm cluster: the same workload under plain Slurm
and under Shockwave, side by side, with the simulated values of both (a short replay of emulated jobs,
demo/emulated.py)."""
from __future__ import annotations

from pathlib import Path

import click

from slurm_shockwave.cli.common import console, emit_json, esc


@click.command()
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 16))
@click.option("--gpus-per-node", default=4, show_default=True, type=click.IntRange(1, 16))
@click.option("--round-seconds", default=None, type=click.FloatRange(0.5, 600),
              help="Length of a round: 120 trace seconds / the time scale (default 3 s: time scale 40).")
@click.option("--short", is_flag=True, help="A small, quick workload (what the CI test runs).")
@click.option("--slurm", "slurm_version", type=click.Choice(["22.05", "24.11", "26.05"]), default=None,
              help="Slurm version (default: the host's; another one runs from a Debian root, see `cluster up --slurm`).")
@click.option("--shockwave-only", is_flag=True, help="Skip the plain-Slurm run (no comparison).")
@click.option("--timeout", default=900.0, show_default=True, help="Give up waiting for a run's jobs after this long.")
@click.option("--keep", is_flag=True, help="Keep the demo's directory (logs, state, events).")
@click.option("--write-doc", type=click.Path(dir_okay=False), default=None,
              help="Also write the result tables into this Markdown file (e.g. docs/demo.md), and the result it is "
                   "made from beside it as JSON (docs/demo.json).")
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Run nothing: show (and with --write-doc, write) the stored result of an earlier demo.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def demo(nodes, gpus_per_node, round_seconds, short, slurm_version, shockwave_only, timeout, keep, write_doc,
         from_json, as_json):
    """A contended trace (24 jobs on 8 GPUs, 3 users; --short: its first 5 jobs) replayed twice on a local Slurm
    cluster with emulated training jobs under the real wrapper: plain Slurm (no controller), then the Shockwave
    controller; prints both side by side with the simulated result of each (docs/demo.md)."""
    import os
    import time

    from shockwave_lab.demo.emulated import load_result, render_markdown, render_text, run_demo
    from slurm_shockwave.strict_json import dumps
    out = (lambda msg: click.echo(msg, err=True)) if as_json else click.echo
    if from_json:
        try:
            result = load_result(Path(from_json))
        except ValueError as e:
            raise click.ClickException(str(e)) from None
    else:
        started = time.monotonic()
        result = run_demo(nodes=nodes, gpus_per_node=gpus_per_node, time_scale=120.0 / (round_seconds or 3.0),
                          short=short, compare=not shockwave_only, slurm=slurm_version, out=out, keep=keep,
                          timeout_s=timeout)
        result["wall_s"] = round(time.monotonic() - started, 1)
        result["cpus"], result["load"] = os.cpu_count(), round(os.getloadavg()[0], 1)
        result["written_at"] = time.strftime("%Y-%m-%d %H:%M %Z")
    if write_doc:
        Path(write_doc).write_text(render_markdown(result))
        if not from_json:
            Path(write_doc).with_suffix(".json").write_text(dumps(result, indent=1) + "\n")
    if as_json:
        emit_json(result)
        return
    c = console()
    c.print(esc(render_text(result)))
    if not from_json:
        c.print(f"all daemons stopped; whole demo {result['wall_s']:.0f} s")
    if write_doc:
        c.print(esc(f"wrote {write_doc}"))
