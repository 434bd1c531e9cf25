"""`shockwave whatif`: what would the default policy have done on my cluster?  A site's history (sacct), cluster
(nodes JSON) and priority settings (scontrol show config, sshare), simulated under the site's Slurm and under the
default; per account and per user: wait, JCT, finish-time fairness, GPU share, and the jobs that gain or lose
most (docs/whatif.md)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from slurm_shockwave.cli.common import OneLineError


def _summary_site(site) -> str:
    fs = "Fair Tree" if site.fair_tree else "classic fair-share"
    return (
        f"{site.priority_type}, weights age {site.weight_age} / fair-share {site.weight_fairshare} / job size "
        f"{site.weight_job_size}, {fs}, decay half-life {site.decay_half_life_s / 86400:g} d, max age "
        f"{site.max_age_s / 86400:g} d, backfill, " + ("requeue preemption" if site.preempt else "no preemption")
    )


def _summary_cluster(cluster) -> str:
    types = ", ".join(f"{n} {t}" for t, n in cluster.capacity.items())
    nodes = f"{cluster.nodes} nodes" + (f" of {cluster.gpus_per_node} GPUs" if cluster.gpus_per_node else "")
    return f"{nodes}; {types}"


@click.command("whatif")
@click.argument("history", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["sacct-json", "sacct"]),
    default="sacct-json",
    show_default=True,
    help="HISTORY's format: `sacct --json -a -D ...` or `sacct -a -X -D -P ...` (docs/trace-import.md).",
)
@click.option(
    "--nodes",
    type=click.Path(dir_okay=False),
    default=None,
    help="`scontrol show nodes --json` (22.05: `sinfo --json`): the GPUs per node and type.",
)
@click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False),
    default=None,
    help="`scontrol show config`: PriorityWeight*, PriorityDecayHalfLife, PriorityMaxAge, PriorityFlags, "
    "PreemptMode. Default: Slurm's defaults (every weight 0: first come, first served + backfill).",
)
@click.option(
    "--shares",
    type=click.Path(dir_okay=False),
    default=None,
    help="`sshare -a --json` or `sshare -a -P -o Account,User,RawShares,...`: the association tree.",
)
@click.option(
    "--from-slurm",
    is_flag=True,
    help="Read all four from this machine's Slurm (sacct --json -a -D -S START -E END, the nodes, "
    "scontrol show config, sshare) instead of files.",
)
@click.option("--start", default=None, help="With --from-slurm: sacct -S (e.g. 2026-01-01).")
@click.option("--end", default="now", show_default=True, help="With --from-slurm: sacct -E.")
@click.option(
    "--slurm-round",
    type=click.FloatRange(0.5, 3600),
    default=60.0,
    show_default=True,
    help="Seconds between the Slurm model's scheduler passes (sched_interval), besides the early passes "
    "when a job ends or arrives.",
)
@click.option(
    "--round-length",
    type=click.FloatRange(1, 86400),
    default=120.0,
    show_default=True,
    help="The default policy's round (the controller's round_seconds).",
)
@click.option(
    "--top",
    type=click.IntRange(0, 10_000),
    default=10,
    show_default=True,
    help="How many jobs that gain / lose most to list.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of the tables.")
@click.option("--json-out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON document here.")
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the HTML page with its figures here.",
)
def whatif(
    history,
    fmt,
    nodes,
    config,
    shares,
    from_slurm,
    start,
    end,
    slurm_round,
    round_length,
    top,
    as_json,
    json_out,
    html_out,
):
    """What would the default policy have done on my cluster?  Simulates the site's history under its own Slurm
    (multifactor priority with its weights and shares, backfill) and under the default, and compares them per
    account and per user."""
    from shockwave_lab.whatif import inputs
    from slurm_shockwave.loader import InputFileError
    from slurm_shockwave.slurm.errors import SlurmError

    if from_slurm:
        if history or nodes or config or shares:
            raise OneLineError("--from-slurm reads the history, nodes, config and shares itself: give no files")
        if not start:
            raise OneLineError("--from-slurm needs --start DATE (sacct -S)")
    elif not history or not nodes:
        raise OneLineError("give HISTORY (sacct --json) and --nodes (scontrol show nodes --json), or --from-slurm")
    timings: dict = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="whatif-") as tmp:
        try:
            if from_slurm:
                from slurm_shockwave.slurm.commands import SlurmCLI

                path, cluster, site, share_rows = inputs.from_slurm(SlurmCLI(timeout=600), start, end, Path(tmp))
                history = f"sacct --json -a -D -S {start} -E {end}"
            else:
                cluster = inputs.read_nodes(nodes)
                site = inputs.read_config(config) if config else inputs.Site()
                share_rows = inputs.read_shares(shares) if shares else []
                path = Path(history)
            rows, tally = inputs.load_history(path, fmt, max_gpus=cluster.total)
        except (InputFileError, SlurmError, ValueError, OSError) as e:
            raise OneLineError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    imported = tally.summary(len(rows), Path(str(history)).name)
    timings["import_s"] = time.perf_counter() - t0
    _run(
        rows,
        cluster,
        site,
        share_rows,
        history,
        imported,
        config,
        slurm_round,
        round_length,
        top,
        as_json,
        json_out,
        html_out,
        timings,
    )


def _run(
    rows,
    cluster,
    site,
    share_rows,
    history,
    imported,
    config,
    slurm_round,
    round_length,
    top,
    as_json,
    json_out,
    html_out,
    timings,
):
    from shockwave_lab.whatif import render
    from shockwave_lab.whatif.compare import compare
    from shockwave_lab.whatif.run import run_both
    from slurm_shockwave.cli.common import console, emit_json
    from solver.policies import default_policy

    t = time.perf_counter()
    try:
        slurm, default, notes = run_both(rows, cluster, site, share_rows, slurm_round, round_length)
    except ValueError as e:
        raise OneLineError(str(e).splitlines()[0]) from None
    timings["simulations_s"] = time.perf_counter() - t  # both, side by side where there are two CPUs
    timings["slurm_s"], timings["default_s"] = slurm.wall_s, default.wall_s
    timings["slurm_decide_s"], timings["default_decide_s"] = slurm.decide_s, default.decide_s
    t = time.perf_counter()
    data = compare(slurm, default, top)
    timings["compare_s"] = time.perf_counter() - t
    if not config:
        notes.append("no --config: Slurm's defaults (every priority weight 0: first come, first served + backfill)")
    if site.unread:
        notes.append("read but not modelled (equal for every job in the model): " + ", ".join(site.unread))
    meta = {
        "history": str(history),
        "imported": imported,
        "cluster": {
            "gpus": cluster.total,
            "capacity": cluster.capacity,
            "gpus_per_node": cluster.gpus_per_node,
            "nodes": cluster.nodes,
            "summary": _summary_cluster(cluster),
        },
        "site": {**{k: v for k, v in vars(site).items() if k != "unread"}, "summary": _summary_site(site)},
        "associations": len(share_rows),
        "default_policy": default_policy().name,
        "slurm_round_s": slurm_round,
        "round_length_s": round_length,
        "notes": notes,
    }
    t = time.perf_counter()
    doc = render.document(data, meta)
    page = render.html(data, meta, render.figures(data)) if html_out else None
    timings["render_s"] = time.perf_counter() - t
    doc["timings"] = {k: round(v, 3) for k, v in timings.items()}
    try:
        if json_out:
            from slurm_shockwave.strict_json import dumps

            Path(json_out).write_text(dumps(doc, indent=2) + "\n")
        if page is not None:
            Path(html_out).write_text(page, encoding="utf-8")
    except OSError as e:
        raise OneLineError(f"{e.filename or json_out or html_out}: {e.strerror or e}") from None
    if as_json:
        emit_json(doc)
    else:
        render.text(data, meta, console())
