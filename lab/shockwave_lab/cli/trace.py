"""`shockwave trace generate`: synthetic workloads with the reference generator's semantics."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from shockwave_lab.imports import FORMATS

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


def _numbers(text: str | None, name: str, form: str, kinds: tuple) -> tuple | None:
    if text is None:
        return None
    parts = text.split(",")
    try:
        if len(parts) != len(kinds):
            raise ValueError
        vals = tuple(k(x) for k, x in zip(kinds, parts, strict=True))
    except ValueError:
        raise OneLineError(f"{name} must be {form}, got {text!r}") from None
    if any(not math.isfinite(v) for v in vals):
        raise OneLineError(f"{name} must be {form} (finite numbers), got {text!r}")
    return vals


def _realistic_kwargs(ctx, jobs, gpus, interarrival, realistic, arrivals, diurnal_peak, peak_hour, start_hour,
                      bursts, lengths, length_median, length_p90, length_range, load, burst) -> dict:
    """GeneratorOptions fields of the realistic options (docs/workloads.md): the preset, then the given options."""
    from click.core import ParameterSource

    from shockwave_lab.workload.generate import REALISTIC, REALISTIC_LOAD, REALISTIC_SWEEP_SHARE

    kw: dict = {}
    if realistic:
        kw = dict(REALISTIC)
        kw["sweeps"] = round(REALISTIC_SWEEP_SHARE * jobs / kw["sweep_size"])
        if ctx.get_parameter_source("gpu_mix") != ParameterSource.DEFAULT:
            del kw["gpu_mix"]
        if interarrival is None and load is None:
            if gpus is None:
                raise OneLineError("--realistic needs --gpus (its offered load is for a cluster) or --interarrival")
            kw["load"] = REALISTIC_LOAD
    if arrivals is not None:
        if arrivals not in ("poisson", "diurnal"):
            raise OneLineError(f"--arrivals must be poisson or diurnal, got {arrivals!r}")
        kw["arrivals"] = arrivals
    for name, val, lo, hi in (("--diurnal-peak", diurnal_peak, 1.0, 1000.0), ("--peak-hour", peak_hour, 0.0, 24.0),
                              ("--start-hour", start_hour, 0.0, 24.0)):
        if val is None:
            continue
        if kw.get("arrivals") != "diurnal":
            raise OneLineError(f"{name} needs --arrivals diurnal (or --realistic)")
        if not (lo <= val < hi or (name == "--diurnal-peak" and val == hi)):
            raise OneLineError(f"{name} must be in [{lo:g}, {hi:g}{']' if name == '--diurnal-peak' else ')'}, "
                               f"got {val}")
        kw[name[2:].replace("-", "_")] = val
    if bursts is not None:
        n, size, span = _numbers(bursts, "--bursts", "N,SIZE,SPAN (sweeps, jobs per sweep, seconds)",
                                 (int, int, float))
        if not (n >= 0 and size >= 2 and span >= 0):
            raise OneLineError(f"--bursts: need N >= 0 sweeps of SIZE >= 2 jobs within SPAN >= 0 s, got {bursts!r}")
        if n * size > jobs:
            raise OneLineError(f"--bursts {bursts}: {n * size} jobs in sweeps, more than --jobs {jobs}")
        kw.update(sweeps=n, sweep_size=size, sweep_span=span)
    elif kw.get("sweeps", 0) * kw.get("sweep_size", 0) > jobs:
        kw["sweeps"] = 0
    if lengths is not None:
        if lengths not in ("reference", "lognormal", "pareto"):
            raise OneLineError(f"--lengths must be reference, lognormal or pareto, got {lengths!r}")
        kw["lengths"] = lengths
    if any(v is not None for v in (length_median, length_p90, length_range)):
        if kw.get("lengths", "reference") == "reference":
            raise OneLineError("--length-median, --length-p90 and --length-range need --lengths lognormal|pareto")
        if length_median is not None:
            kw["length_median"] = length_median
        if length_p90 is not None:
            kw["length_p90"] = length_p90
        if length_range is not None:
            kw["length_min"], kw["length_max"] = _numbers(length_range, "--length-range", "MIN,MAX (seconds)",
                                                          (float, float))
    if kw.get("lengths", "reference") != "reference":
        med, p90 = kw.get("length_median", 874.0), kw.get("length_p90", 20000.0)
        low, high = kw.get("length_min", 60.0), kw.get("length_max", 604800.0)
        if not (0 < med < p90 < float("inf")):
            raise OneLineError(f"--length-median/--length-p90: need 0 < median < p90, got {med:g}, {p90:g}")
        if not (0 < low <= high <= 1e9):
            raise OneLineError(f"--length-range: need 0 < MIN <= MAX <= 1e9 seconds, got {low:g},{high:g}")
    if load is not None:
        if not (0 < load <= 100):
            raise OneLineError(f"--load must be in (0, 100], got {load}")
        if gpus is None:
            raise OneLineError("--load needs --gpus (the cluster the offered load is for)")
        if interarrival is not None:
            raise OneLineError("--load sets the mean gap between submissions: give it or --interarrival, not both")
        kw["load"] = load
    if kw and burst is not None:
        raise OneLineError("--burst (bursts every GAP seconds) does not combine with --realistic or its options: "
                           "use --bursts N,SIZE,SPAN")
    return kw


@click.group()
def trace():
    """Workload traces (the reference `.trace` format)."""


@trace.command()
@click.option("--jobs", type=int, required=True, help="Number of jobs.")
@click.option("--gpus", type=int, default=None,
              help="GPUs of the cluster it is for: no job asks for more (job types that do are redrawn).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (same seed, same trace).")
@click.option("--interarrival", type=float, default=None,
              help="Mean seconds between Poisson arrivals (the reference's `lam`).  [default: 40]")
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
@click.option("--realistic", is_flag=True,
              help="The public traces' statistics at once (docs/workloads.md): diurnal arrivals, sweeps, log-normal "
                   "lengths, their GPU mix, offered load 0.8 on --gpus; the options below override its values.")
@click.option("--arrivals", default=None, metavar="poisson|diurnal",
              help="Submissions: Poisson (the reference's), or diurnal (a daily cycle of rates, mean --interarrival).")
@click.option("--diurnal-peak", type=float, default=None, metavar="R",
              help="Diurnal: the rate at --peak-hour is R times the rate 12 hours later. [default: 3]")
@click.option("--peak-hour", type=float, default=None, help="Diurnal: clock hour of the peak rate. [default: 15]")
@click.option("--start-hour", type=float, default=None, help="Diurnal: clock hour of arrival 0. [default: 9]")
@click.option("--bursts", default=None, metavar="N,SIZE,SPAN",
              help="N sweeps: one user's SIZE jobs of one job type, GPU count and mode, arriving within SPAN seconds.")
@click.option("--lengths", default=None, metavar="reference|lognormal|pareto",
              help="Run times: the reference's grid (--min-hours ...), or heavy-tailed with --length-median/-p90.")
@click.option("--length-median", type=float, default=None, help="Median run time, seconds. [default: 874]")
@click.option("--length-p90", type=float, default=None, help="90th-percentile run time, seconds. [default: 20000]")
@click.option("--length-range", default=None, metavar="MIN,MAX",
              help="Run times clipped to [MIN, MAX] seconds. [default: 60,604800]")
@click.option("--load", type=float, default=None,
              help="Mean gap between submissions set so the trace's work over --gpus x its arrival span is this "
                   "offered load (instead of --interarrival).")
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
@click.pass_context
def generate(ctx, jobs, gpus, seed, interarrival, min_hours, max_hours, num_durations, mode_mix, gpu_mix, burst,
             realistic, arrivals, diurnal_peak, peak_hour, start_hour, bursts, lengths, length_median, length_p90,
             length_range, load, throughputs, users, splitter, accounts, assign, out):
    """Generate a trace: job types from the throughputs file, a GNS/Accordion/static mix, 1/2/4/8-GPU jobs and
    Poisson arrivals, as the reference's scripts/utils/generate_trace.py; with --users, a job spec with users
    (docs/job-spec.md); with --realistic or its options, the public traces' bursts, diurnal load and heavy-tailed
    run times (docs/workloads.md)."""
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
    extra = _realistic_kwargs(ctx, jobs, gpus, interarrival, realistic, arrivals, diurnal_peak, peak_hour, start_hour,
                              bursts, lengths, length_median, length_p90, length_range, load, burst)
    if "gpu_mix" in extra:
        gpu_mix = ",".join(f"{x:g}" for x in extra.pop("gpu_mix"))
    interarrival = 40.0 if interarrival is None else interarrival
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
                            max_gpus=gpus, burst_size=burst_size, burst_gap=burst_gap, **extra)
    if gpus is not None and gpus < 8 and sum(opts.gpu_mix[i] for i, g in enumerate((1, 2, 4, 8)) if g <= gpus) == 0:
        raise OneLineError(f"--gpu-mix gives no job sizes that fit in {gpus} GPUs")
    try:
        table = ThroughputTable.load(throughputs or THROUGHPUTS / "tacc_throughputs.json")
        made = gen(opts, table)
    except (InputFileError, ValueError) as e:      # the throughputs file (a WorkloadError in it), or the options
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
              type=click.Choice(list(FORMATS)),
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
              help="A job asking for a fraction of a GPU in all (Alibaba PAI's plan_gpu < 100, openb's gpu_milli < 1000): round up, or drop it.")
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
