"""`shockwave cluster up|down|status`: a local Slurm cluster for tests, CI and the demo."""
from __future__ import annotations

import click

from .common import OneLineError, emit_json

DEFAULT_ROOT = "/tmp/shockwave-cluster"


@click.group()
def cluster():
    """Start/stop a local Slurm cluster (fake GPUs, loopback only) owned by the project."""


@cluster.command()
@click.option("--root", default=DEFAULT_ROOT, show_default=True, type=click.Path(file_okay=False))
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--gpus-per-node", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--json", "as_json", is_flag=True)
def up(root, nodes, gpus_per_node, as_json):
    """Install Slurm if missing, write a config under ROOT, start munged/slurmctld/slurmd, wait for idle nodes."""
    from ..localcluster import LocalCluster, SlurmUnavailable
    c = LocalCluster(root, nodes=nodes, gpus_per_node=gpus_per_node)
    try:
        c.ensure_installed()
        c.up()
    except SlurmUnavailable as e:
        raise OneLineError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - any start failure is reported in one line
        raise OneLineError(f"cluster did not start: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    st = c.status()
    if as_json:
        emit_json({"root": root, "env": c.env, "status": st})
    else:
        click.echo(f"cluster up under {root}: {nodes} node(s) x {gpus_per_node} GPU(s)")
        for k, v in c.env.items():
            click.echo(f"export {k}={v}")


@cluster.command()
@click.option("--root", default=DEFAULT_ROOT, show_default=True, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True)
def down(root, as_json):
    """Stop exactly the daemons `up` started (by their pid files)."""
    from ..localcluster import LocalCluster
    alive = LocalCluster(root).down()          # the pids still alive afterwards (normally none)
    if as_json:
        emit_json({"root": root, "still_alive": alive})
    elif alive:
        raise OneLineError(f"daemons still alive after stopping: {alive}")
    else:
        click.echo(f"cluster under {root} stopped; no daemon it started is left")


@cluster.command()
@click.option("--root", default=DEFAULT_ROOT, show_default=True, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True)
def status(root, as_json):
    """Daemons (pid, alive) and nodes of the local cluster."""
    from ..localcluster import LocalCluster
    st = LocalCluster(root).status()
    if as_json:
        emit_json(st)
    else:
        for k, v in st.items():
            click.echo(f"{k}: {v}")
