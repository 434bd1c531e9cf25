"""`shockwave trace generate`: synthetic workloads with the reference generator's semantics."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from slurm_shockwave.cli.common import OneLineError


def _mix(text: str, n: int, name: str) -> tuple:
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise OneLineError(f"{name}: expected {n} comma-separated numbers, got {text!r}") from None
    if len(vals) != n or any(not (0 <= v <= 1) for v in vals) or abs(sum(vals) - 1) > 1e-3:
        raise OneLineError(f"{name}: expected {n} probabilities in [0, 1] summing to 1, got {text!r}")
    return vals


def _burst(text: str | None) -> tuple[int, float]:
    if text is None:
        return 0, 0.0
    try:
        n, gap = text.split(",")
        n, gap = int(n), float(gap)
    except ValueError:
        raise OneLineError(f"--burst must be N,GAP (jobs per burst, seconds between bursts), got {text!r}") from None
    if not (0 < n <= 1_000_000 and 0 <= gap < float("inf")):
        raise OneLineError(f"--burst: need N >= 1 and a finite GAP >= 0, got {text!r}")
    return n, gap


@click.group()
def trace():
    """Workload traces (the reference `.trace` format)."""


@trace.command()
@click.option("--jobs", type=int, required=True, help="Number of jobs.")
@click.option("--gpus", type=int, default=None,
              help="GPUs of the cluster it is for: no job asks for more (job types that do are redrawn).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (same seed, same trace).")
@click.option("--interarrival", type=float, default=40.0, show_default=True,
              help="Mean seconds between Poisson arrivals (the reference's `lam`).")
@click.option("--min-hours", type=float, default=0.2, show_default=True, help="Shortest job duration grid value.")
@click.option("--max-hours", type=float, default=5.0, show_default=True, help="Longest job duration grid value.")
@click.option("--num-durations", type=int, default=100, show_default=True, help="Points in the duration grid.")
@click.option("--mode-mix", default="0,0.5,0.5", show_default=True,
              help="Probabilities of static, accordion, gns jobs.")
@click.option("--gpu-mix", default="0.6,0.3,0.09,0.01", show_default=True,
              help="Probabilities of 1-, 2-, 4-, 8-GPU jobs (distributed models only).")
@click.option("--burst", default=None, metavar="N,GAP",
              help="Arrivals in bursts of N jobs, one burst every GAP seconds (Poisson inside a burst). Default: "
                   "one Poisson stream (the reference's).")
@click.option("--throughputs", type=click.Path(dir_okay=False), default=None,
              help="Gavel-format throughputs JSON for job types and steps. Default: the bundled TACC one.")
@click.option("--users", type=int, default=None,
              help="Give the jobs N users (round robin): writes our job spec (JSON Lines), as the .trace format has "
                   "no user column. Default: a .trace without users.")
@click.option("--splitter", type=int, default=0, metavar="K",
              help="With --users: the first user, named `splitter`, submits each of its jobs as K jobs of 1/K the "
                   "steps (same total work, K times the jobs).")
@click.option("--accounts", type=int, default=0, metavar="M",
              help="With --users: user k is charged to account a<(k-1) mod M + 1>. Default: each user its own.")
@click.option("--assign", type=click.Choice(["round-robin", "random"]), default="round-robin", show_default=True,
              help="With --users: jobs to users in turn, or each to a user drawn from a stream seeded by --seed.")
@click.option("--out", type=click.Path(), default=None,
              help="Write here (a directory: the reference's file name inside it). Default: stdout.")
def generate(jobs, gpus, seed, interarrival, min_hours, max_hours, num_durations, mode_mix, gpu_mix, burst,
             throughputs, users, splitter, accounts, assign, out):
    """Generate a trace: job types from the throughputs file, a GNS/Accordion/static mix, 1/2/4/8-GPU jobs and
    Poisson arrivals, as the reference's scripts/utils/generate_trace.py; with --users, a job spec with users
    (docs/job-spec.md)."""
    from shockwave_lab.data_files import THROUGHPUTS
    from slurm_shockwave.loader import InputFileError
    from shockwave_lab.workload.generate import GeneratorOptions, generate as gen, trace_name, trace_text
    from shockwave_lab.workload.throughputs import ThroughputTable

    if not 0 < jobs <= 1_000_000:
        raise OneLineError(f"--jobs must be in 1..1000000, got {jobs}")
    if not 0 <= seed < 2**32 - 8:
        raise OneLineError(f"--seed must be in 0..{2**32 - 9}, got {seed}")
    if gpus is not None and gpus <= 0:
        raise OneLineError(f"--gpus must be positive, got {gpus}")
    if not (interarrival >= 0 and interarrival < float("inf")):
        raise OneLineError(f"--interarrival must be a non-negative number, got {interarrival}")
    if not (0 < min_hours <= max_hours < float("inf")):
        raise OneLineError(f"--min-hours/--max-hours: need 0 < min <= max, got {min_hours}, {max_hours}")
    if not 2 <= num_durations <= 1_000_000:
        raise OneLineError(f"--num-durations must be in 2..1000000, got {num_durations}")
    if users is not None and not 1 <= users <= 100_000:
        raise OneLineError(f"--users must be in 1..100000, got {users}")
    if (splitter or accounts or assign != "round-robin") and users is None:
        raise OneLineError("--splitter, --accounts and --assign need --users")
    if splitter and not 2 <= splitter <= 1000:
        raise OneLineError(f"--splitter must be in 2..1000, got {splitter}")
    if not 0 <= accounts <= 100_000:
        raise OneLineError(f"--accounts must be in 0..100000, got {accounts}")
    burst_size, burst_gap = _burst(burst)
    opts = GeneratorOptions(jobs=jobs, seed=seed, interarrival=interarrival, min_hours=min_hours,
                            max_hours=max_hours, num_durations=num_durations,
                            mode_mix=_mix(mode_mix, 3, "--mode-mix"), gpu_mix=_mix(gpu_mix, 4, "--gpu-mix"),
                            max_gpus=gpus, burst_size=burst_size, burst_gap=burst_gap)
    if gpus is not None and gpus < 8 and sum(opts.gpu_mix[i] for i, g in enumerate((1, 2, 4, 8)) if g <= gpus) == 0:
        raise OneLineError(f"--gpu-mix gives no job sizes that fit in {gpus} GPUs")
    try:
        table = ThroughputTable.load(throughputs or THROUGHPUTS / "tacc_throughputs.json")
        made = gen(opts, table)
    except InputFileError as e:          # the throughputs file, or a WorkloadError in it
        raise OneLineError(str(e)) from None
    if users is None:
        text, name = trace_text(made), trace_name(opts)
    else:
        from shockwave_lab.workload.users import spec_text, with_users
        text = spec_text(with_users(made, users, seed, splitter, accounts, assign))
        name = trace_name(opts).removesuffix(".trace") + f"_users{users}" + (f"_split{splitter}" if splitter else "") \
            + (f"_accounts{accounts}" if accounts else "") + ("_random" if assign == "random" else "") + ".jsonl"
    if out is None:
        sys.stdout.write(text)
        return
    path = Path(out)
    if path.is_dir():
        path = path / name
    try:
        path.write_text(text)
    except OSError as e:
        raise OneLineError(f"{path}: {e.strerror or e}") from None
    click.echo(f"wrote {path} ({jobs} jobs)", err=True)


@trace.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", required=True,
              type=click.Choice(["sacct-json", "sacct", "philly", "helios", "acme", "pai", "alibaba-spot"]),
              help="The file's format (docs/trace-import.md).")
@click.option("--tasks", type=click.Path(dir_okay=False), default=None,
              help="With --format pai: the task table (pai_task_table.csv) beside the job table FILE.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Write the job spec here (JSON Lines, .jsonl). Default: stdout.")
@click.option("--max-gpus", type=click.IntRange(1, 100_000), default=None,
              help="The cluster's GPUs: a larger job is dropped, or clipped to this many with --over clip.")
@click.option("--over", type=click.Choice(["drop", "clip"]), default="drop", show_default=True,
              help="What --max-gpus does to a larger job (clip: it keeps its run time on --max-gpus GPUs).")
@click.option("--fractional", type=click.Choice(["round-up", "drop"]), default="round-up", show_default=True,
              help="A job asking for a fraction of a GPU in all (Alibaba's plan_gpu < 100): round up, or drop it.")
@click.option("--adaptation-mix", default=None, metavar="MODE=SHARE,...",
              help="Which share of the jobs adapts, e.g. static=0.5,gns=0.3,accordion=0.2 (a seeded draw per job). "
                   "Default: every job static (its measured run time).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Seed of the --adaptation-mix draw.")
@click.option("--gpu-types/--no-gpu-types", default=True, show_default=True,
              help="Keep the trace's GPU type per job (simulate then needs a cluster of those types).")
@click.option("--throughputs", type=click.Path(dir_okay=False), default=None,
              help="Gavel-format throughputs the jobs' lengths are set on. Default: the bundled TACC one.")
@click.option("--throughputs-out", type=click.Path(dir_okay=False), default=None,
              help="Also write the throughputs that run these jobs in simulate (every GPU count and type of the "
                   "trace): `shockwave simulate --trace OUT --throughputs THIS`.")
def import_(file, fmt, tasks, out, max_gpus, over, fractional, adaptation_mix, seed, gpu_types, throughputs,
            throughputs_out):
    """Import a real workload (a site's sacct, or a public trace) as a job spec: each job's arrival, GPUs (and
    type), run time at those GPUs, user and account; one line says what was dropped or clipped and why."""
    import json

    from shockwave_lab.data_files import THROUGHPUTS
    from shockwave_lab.imports import Rules, load
    from shockwave_lab.imports.entries import missing_counts, parse_mix, throughputs_json, to_entries
    from shockwave_lab.workload.throughputs import ThroughputTable
    from shockwave_lab.workload.users import spec_text
    from slurm_shockwave.loader import InputFileError

    if out is not None and not out.endswith(".jsonl"):
        raise OneLineError(f"--out must end in .jsonl (the job spec's JSON Lines), got {out!r}")
    try:
        mix = parse_mix(adaptation_mix) if adaptation_mix is not None else None
        table = ThroughputTable.load(throughputs or THROUGHPUTS / "tacc_throughputs.json")
        rows, tally = load(fmt, file, Rules(max_gpus=max_gpus, over=over, fractional=fractional), tasks)
        entries = to_entries(rows, table, mix, seed, gpu_types)
    except (InputFileError, ValueError) as e:
        raise OneLineError(str(e)) from None
    summary = tally.summary(len(entries), file)
    if not entries:
        raise OneLineError(f"{summary}: no jobs left to write")
    text = spec_text(entries)
    try:
        if out is None:
            sys.stdout.write(text)
        else:
            Path(out).write_text(text)
        if throughputs_out is not None:
            Path(throughputs_out).write_text(json.dumps(throughputs_json(entries, table), indent=1) + "\n")
    except OSError as e:
        raise OneLineError(f"{e.filename or out}: {e.strerror or e}") from None
    click.echo(summary, err=True)
    lacking = missing_counts(entries, table)
    if lacking and throughputs_out is None:
        click.echo(f"note: {table.source} has no throughput at {', '.join(map(str, lacking))} GPUs: write one with "
                   "--throughputs-out and give it to simulate --throughputs", err=True)
