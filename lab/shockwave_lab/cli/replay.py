"""`shockwave replay`: a trace on a real local Slurm cluster (emulated jobs, the real wrapper, event store,
controller and requeue), real and simulated figures side by side (slurm_shockwave/replay/, docs/replay.md)."""
from __future__ import annotations

import sys

import click

from shockwave_lab.data_files import DEFAULT_EXPERIMENT, experiment_paths
from slurm_shockwave.cli.common import console, emit_json, esc


@click.command()
@click.option("--trace", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A reference .trace or a job spec. Default: the bundled 120-job trace.")
@click.option("--throughputs", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Gavel-format throughputs JSON. Default: the bundled trace's.")
@click.option("--gpus", default=32, show_default=True, type=click.IntRange(1, 1024))
@click.option("--nodes", default=8, show_default=True, type=click.IntRange(1, 64),
              help="slurmd daemons (each with GPUS / NODES fake GPUs).")
@click.option("--time-scale", default=30.0, show_default=True, type=click.FloatRange(1.0, 1000.0),
              help="Trace seconds per wall second (rounds last 120 s / S).")
@click.option("--policy", default=None,
              help="A policy of the registry (the controller runs it; default: the default policy), or 'slurm': no "
                   "controller, Slurm's own "
                   "multifactor priority and backfill.")
@click.option("--users", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Jobs are submitted as these many users, round robin.")
@click.option("--first", type=click.IntRange(1, 100000), default=None, help="Only the first N jobs of the trace.")
@click.option("--elastic", type=click.IntRange(1, 64), default=None,
              help="Every job elastic from 1 GPU up to N (its own count when larger), as `simulate --elastic N`: "
                   "its comment declares gpus=1-N, its --gres stays its own count. N at most a node's GPUs.")
@click.option("--no-requeue-every", type=click.IntRange(1, 100000), default=None,
              help="Every N-th job in arrival order submitted with --no-requeue (the controller never preempts it "
                   "once it runs) and simulated as `preemptible: false`.")
@click.option("--slurm", "slurm_version", type=click.Choice(["22.05", "24.11", "26.05"]), default=None,
              help="Slurm version (default: the host's).")
@click.option("--timeout", type=float, default=None, help="Fail after this many wall seconds (default: 3x the "
                                                          "expected run, at least 10 minutes).")
@click.option("--keep", is_flag=True, help="Keep the replay's directory (logs, events, controller state).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (objects real, simulated, deviation).")
def replay(trace, throughputs, gpus, nodes, time_scale, policy, users, first, elastic, no_requeue_every, slurm_version,
           timeout, keep, as_json):
    """Replay a trace on a real local Slurm cluster with emulated jobs and compare it with its simulation.

    Every job of the trace is submitted at its arrival / S as one of the users; each runs under
    shockwave-run, reports every epoch through the Training API, checkpoints after each epoch and on Slurm's
    signal and resumes after a requeue; an epoch sleeps its profiled duration / S.  Fails (exit 1) when a job
    does not complete, an epoch is lost or repeated, or a daemon is left running."""
    from shockwave_lab.localcluster import SlurmUnavailable, signals
    from shockwave_lab.replay.api import replay as run_replay
    from shockwave_lab.replay.compare import render_text
    from shockwave_lab.replay.errors import ReplayError
    if policy is None:
        from slurm_shockwave.policy_settings import default_name
        policy = default_name()
    paths = experiment_paths(DEFAULT_EXPERIMENT)
    trace = trace or str(paths["trace"])
    throughputs = throughputs or (str(paths["throughputs"]) if trace == str(paths["trace"]) else None)
    if throughputs is None:
        raise click.UsageError("--throughputs is required with --trace")
    out = (lambda msg: click.echo(msg, err=True)) if as_json else click.echo
    try:     # SIGTERM/SIGHUP/SIGINT: every process the replay started is stopped by pid, then exit 128 + signal
        with signals.orderly_teardown():
            result = run_replay(trace, throughputs, gpus=gpus, nodes=nodes, time_scale=time_scale, policy=policy,
                                users=users, first=first, out=out, keep=keep, slurm=slurm_version, timeout_s=timeout,
                                elastic=elastic, no_requeue_every=no_requeue_every,
                                argv=sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "replay" else None)
    except SlurmUnavailable as e:
        click.echo(f"Error: Slurm cannot be started here: {e}", err=True)
        sys.exit(2)
    except (ReplayError, ValueError) as e:
        click.echo(f"Error: replay failed: {e}", err=True)
        sys.exit(1)
    if as_json:
        emit_json(result)
        return
    c = console()
    c.print(esc(f"replay of {result['jobs']} jobs, policy {policy}, Slurm {result['slurm_version']}, time scale "
                f"{time_scale:g}, {result['wall_s']:.0f} s wall; restart cost measured "
                f"{(result['restart_cost_s'] or 0):.0f} trace s (times in trace seconds, unscaled)"))
    c.print(esc(render_text(result)))
