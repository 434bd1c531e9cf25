"""`shockwave demo`: the main job, end to end, on a local Slurm cluster."""
from __future__ import annotations

import json

import click

from .common import console


@click.command()
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 16))
@click.option("--gpus-per-node", default=4, show_default=True, type=click.IntRange(1, 16))
@click.option("--round-seconds", default=20.0, show_default=True, type=click.FloatRange(1, 600))
@click.option("--mode", default="authoritative", show_default=True, type=click.Choice(["advisory", "authoritative"]))
@click.option("--short", is_flag=True, help="A small, quick workload (what the CI test runs).")
@click.option("--timeout", default=900.0, show_default=True, help="Give up waiting for the jobs after this long.")
@click.option("--keep", is_flag=True, help="Keep the demo's directory (logs, state, events).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def demo(nodes, gpus_per_node, round_seconds, mode, short, timeout, keep, as_json):
    """Local Slurm cluster + mixed GNS/Accordion/static workload from several users + the controller;
    prints the status as it goes and a summary with the simulated result of the same workload."""
    from ..demo.run import Demo
    from ..demo.workload import default_workload, short_workload
    out = (lambda *_: None) if as_json else click.echo
    d = Demo(short_workload() if short else default_workload(), nodes=nodes, gpus_per_node=gpus_per_node,
             round_seconds=round_seconds, mode=mode, timeout=timeout, out=out, keep=keep,
             status_every=10 if short else 30)
    result = d.run()
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
        return
    _print(result)


def _print(res):
    from rich.table import Table
    c = console()
    c.width = max(c.width, 150)
    if res["jobs"]:
        t = Table(title="Jobs on the local Slurm cluster")
        for col in ("job", "name", "user", "mode", "GPUs", "state", "epochs", "batch sizes", "JCT s", "sim JCT s",
                    "rho", "restarts"):
            t.add_column(col)
        sim_jct = res["simulated"].get("per_job", {})
        for r in res["jobs"]:
            t.add_row(str(r["job_id"]), r["name"], r["user"], r["mode"], str(r["gpus"]), r["state"], r["epochs"],
                      ",".join(map(str, r["batch_sizes"])), _f(r["jct_s"]), _f(sim_jct.get(r["name"])),
                      _f(r["rho"], 2), str(r["restarts"]))
        c.print(t)
    t = Table(title="Summary (real vs simulated, same workload and policy)")
    for col in ("", "makespan s", "avg JCT s", "worst rho", "unfair %"):
        t.add_column(col)
    for name, m in (("real (Slurm)", res["real"]), ("simulated", res["simulated"])):
        if m:
            t.add_row(name, _f(m.get("makespan_s")), _f(m.get("avg_jct_s")), _f(m.get("worst_rho"), 2),
                      _f(m.get("unfair_fraction"), 1))
    if res["deviation"]:
        t.add_row("deviation", *(f"{res['deviation'].get(k, 0):+.1%}" for k in ("makespan_s", "avg_jct_s")), "", "")
    c.print(t)
    if res["where"] == "slurm":
        c.print(f"all daemons stopped; {res['real'].get('completed', 0)}/{res['real'].get('jobs', 0)} jobs completed")


def _f(x, nd=0):
    return "-" if x is None else f"{x:,.{nd}f}"
