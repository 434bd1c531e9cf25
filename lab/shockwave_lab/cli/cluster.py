"""`shockwave cluster up|down|status`: a local Slurm cluster for tests, CI and the demo."""
from __future__ import annotations

import click

from slurm_shockwave.cli.common import OneLineError, emit_json

DEFAULT_ROOT = "/tmp/shockwave-cluster"


@click.group()
def cluster():
    """Start/stop a local Slurm cluster (fake GPUs, loopback only) owned by the project."""


@cluster.command()
@click.option("--root", default=DEFAULT_ROOT, show_default=True, type=click.Path(file_okay=False))
@click.option("--nodes", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--gpus-per-node", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--slurm", "slurm_version", type=click.Choice(["22.05", "24.11", "26.05"]), default=None,
              help="Slurm version (default: the host's). Another one runs from a Debian root built once "
                   "with debootstrap (~1 min) under --roots-dir.")
@click.option("--roots-dir", default="/var/cache/shockwave/roots", show_default=True,
              type=click.Path(file_okay=False), help="Where Debian roots of other Slurm versions are cached.")
@click.option("--gpu-types", default="", help="One GPU type per node, e.g. v100,v100,k80 (then --nodes is their "
              "number): typed gres (gres.conf Type=) and the type as each node's Feature.")
@click.option("--json", "as_json", is_flag=True)
def up(root, nodes, gpus_per_node, slurm_version, roots_dir, gpu_types, as_json):
    """Install Slurm if missing (or build the root of --slurm VERSION), write a config under ROOT,
    start munged/slurmctld/slurmd, wait for idle nodes. The cluster keeps running after this returns (`cluster
    down` stops it by the pids recorded under ROOT); SIGTERM, SIGHUP or SIGINT before then stop whatever this
    command started, by pid, and leave nothing running."""
    from shockwave_lab.localcluster import LocalCluster, SlurmUnavailable, signals
    types = [t.strip() for t in gpu_types.split(",") if t.strip()]
    try:
        c = LocalCluster(root, nodes=nodes, gpus_per_node=gpus_per_node, slurm=slurm_version, roots_dir=roots_dir,
                         gpu_types=types)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--gpu-types") from None
    with signals.orderly_teardown():
        already = c.status()["running"]
        try:
            try:
                c.ensure_installed()
                c.up()                # stops what it started itself if interrupted
            except SlurmUnavailable as e:
                raise OneLineError(str(e)) from None
            except Exception as e:  # noqa: BLE001 - any start failure is reported in one line
                raise OneLineError("cluster did not start: "
                                   f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
            _report_up(c, root, nodes, gpus_per_node, as_json)
        except (KeyboardInterrupt, SystemExit):   # a signal once it is up, before this returns: leave nothing of ours
            if not already:
                c.down()
            raise


def _report_up(c, root, nodes, gpus_per_node, as_json) -> None:
    st = c.status()
    bin_dir = str(c.bin_dir) if c.bin_dir else None
    if as_json:
        emit_json({"root": root, "env": c.env, "status": st, "slurm_version": c.slurm_version,
                   "bin_dir": bin_dir})
    else:
        click.echo(f"cluster up under {root}: {nodes} node(s) x {gpus_per_node} GPU(s), Slurm {c.slurm_version}")
        for k, v in c.env.items():
            if k == "PATH":
                click.echo(f"export PATH={bin_dir}:$PATH")
            else:
                click.echo(f"export {k}={v}")
        if bin_dir:
            click.echo(f"# controller config: [slurm] bin_dir = \"{bin_dir}\"  and  "
                       f"env = {{ SLURM_CONF = \"{c.env['SLURM_CONF']}\" }}")


@cluster.command()
@click.option("--root", default=DEFAULT_ROOT, show_default=True, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True)
def down(root, as_json):
    """Stop exactly the daemons `up` started (by their pid files) and unmount what it mounted."""
    from shockwave_lab.localcluster import LocalCluster
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
    from shockwave_lab.localcluster import LocalCluster
    st = LocalCluster(root).status()
    if as_json:
        emit_json(st)
    else:
        for k, v in st.items():
            click.echo(f"{k}: {v}")


@cluster.command("build-root")
@click.option("--slurm", "versions", multiple=True, required=True, type=click.Choice(["22.05", "24.11", "26.05"]),
              help="Version(s) whose Debian root to build (repeatable).")
@click.option("--roots-dir", default="/var/cache/shockwave/roots", show_default=True,
              type=click.Path(file_okay=False))
def build_root(versions, roots_dir):
    """Build (once; cached) the Debian root of each --slurm VERSION, for `cluster up --slurm`."""
    from shockwave_lab.localcluster.chroot import ChrootRoot, RootError
    for version in versions:
        root = ChrootRoot(version, roots_dir)
        try:
            spent = root.ensure_built()
        except (RootError, OSError) as e:
            raise OneLineError(f"Slurm {version}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        note = f"built in {spent:.0f} s" if spent else "already built"
        click.echo(f"Slurm {version} ({root.suite}): {root.path}: {note}, {root.slurm_version()}")
