"""Synthetic workloads with the reference's trace-generator semantics (`scripts/utils/generate_trace.py`).

Per job, with independent random streams seeded from `seed` exactly as the reference seeds them:
1. the job type: uniform over the reference's job table (ResNet-18 bs 32-256, ResNet-50 bs 16-64,
   Transformer bs 16-128, LM bs 5-80, Recommendation bs 512-8192; Recommendation is single-GPU only);
2. its GPUs: 1/2/4/8 with probabilities `gpu_mix` (only for distributed models; others get 1);
3. its duration at the initial batch size: a bucket (small/medium/large/xl, probabilities 72/20/5/3%) over
   the first 20%/next 30%/next 40%/last 10% of `num_durations` values evenly spaced over
   [min_hours, max_hours], then a uniform value in the bucket;
4. its mode: static/accordion/gns with probabilities `mode_mix` (accordion jobs under 1000 s become
   static, as in the reference);
5. total_steps = duration x the throughput of (job type, GPUs) in the throughputs file;
6. arrivals: the first at 0, then Poisson with mean inter-arrival `interarrival` seconds.  Ours, off by default:
   with `burst_size` > 0 the jobs come in bursts of that many, a burst every `burst_gap` seconds (the k-th
   burst starts at k x burst_gap; inside it, the same Poisson process): long arrival spans with quiet hours.

The output is the reference `.trace` format (12 tab-separated fields), which `shockwave simulate --trace`
reads; with the reference's parameters and seed it reproduces the reference's own traces byte for byte.

Realistic mode (ours; docs/workloads.md), on when any of its options is set, the old options' traces unchanged:
`arrivals="diurnal"` (a daily cycle of submissions, arrivals.py), `sweeps` x `sweep_size` jobs that one
submission launches within `sweep_span` seconds (same job type, GPUs and mode), `lengths="lognormal"|"pareto"`
(heavy-tailed run times with a given median and p90, clipped to [length_min, length_max]: lengths.py; steps =
length x the job type's throughput, as above), `load` (the mean gap between submissions set so the trace's work
over `max_gpus` x its arrival span is that offered load).  `realistic_options` is the public traces' preset.
Its streams: job type seed+0, submissions seed+1, lengths seed+2, GPUs seed+3, mode seed+4, sweeps seed+6.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from shockwave_lab.workload.arrivals import pick_sweeps, submission_times, sweep_offsets
from shockwave_lab.workload.lengths import LengthModel
from shockwave_lab.workload.models import DATASET_SIZE

# (model, batch sizes, command, working directory, num_steps_arg, distributed), in the reference's table order
_TEMPLATES = (
    (
        "ResNet-18",
        (32, 64, 128, 256),
        "python3 main.py --data_dir=%s/cifar10 --batch_size {bs}",
        "image_classification/cifar10",
        "--num_steps",
        True,
    ),
    (
        "ResNet-50",
        (16, 32, 64),
        "python3 main.py -j 4 -a resnet50 -b {bs} %s/imagenet/",
        "image_classification/imagenet",
        "--num_minibatches",
        True,
    ),
    (
        "Transformer",
        (16, 32, 64, 128),
        "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size {bs} -proj_share_weight",
        "translation",
        "-step",
        True,
    ),
    (
        "LM",
        (5, 10, 20, 40, 80),
        "python3 main.py --cuda --data %s/wikitext2 --batch_size {bs}",
        "language_modeling",
        "--steps",
        True,
    ),
    (
        "Recommendation",
        (512, 1024, 2048, 4096, 8192),
        "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size {bs}",
        "recommendation",
        "-n",
        False,
    ),
)
JOB_TABLE = tuple(
    (model, bs, cmd.format(bs=bs), wd, arg, dist) for model, sizes, cmd, wd, arg, dist in _TEMPLATES for bs in sizes
)

DURATION_PROB = (0.72, 0.2, 0.05, 0.03)
DURATION_BOUNDARY = (0.2, 0.5, 0.9, 1.0)


@dataclass(frozen=True)
class GeneratorOptions:
    jobs: int
    seed: int = 0
    interarrival: float = 40.0  # mean seconds between arrivals (the reference's `lam`)
    min_hours: float = 0.2
    max_hours: float = 5.0
    num_durations: int = 100
    mode_mix: tuple = (0.0, 0.5, 0.5)  # static, accordion, gns
    gpu_mix: tuple = (0.6, 0.3, 0.09, 0.01)  # 1, 2, 4, 8 GPUs
    max_gpus: int | None = None  # redraw a job type/GPU count that does not fit (None: no limit)
    burst_size: int = 0  # jobs per burst (0: one Poisson stream, the reference's)
    burst_gap: float = 0.0  # seconds from the start of one burst to the next
    # realistic mode (all off by default): arrivals.py, lengths.py
    arrivals: str = "poisson"  # or "diurnal"
    diurnal_peak: float = 3.0  # submission rate at peak_hour / rate 12 h later
    peak_hour: float = 15.0  # clock hour of the peak rate
    start_hour: float = 9.0  # clock hour of arrival 0
    sweeps: int = 0  # submissions that each launch sweep_size jobs
    sweep_size: int = 0
    sweep_span: float = 0.0  # a sweep's jobs arrive within this many seconds of its first
    lengths: str = "reference"  # or "lognormal", "pareto"
    length_median: float = 874.0  # seconds
    length_p90: float = 20000.0
    length_min: float = 60.0  # clip range of the drawn lengths, seconds
    length_max: float = 604800.0
    load: float = 0.0  # > 0: mean submission gap set for this offered load on max_gpus

    @property
    def realistic(self) -> bool:
        return self.arrivals != "poisson" or self.sweeps > 0 or self.lengths != "reference" or self.load > 0


@dataclass(frozen=True)
class GeneratedJob:
    job_type: str
    model: str
    batch_size: int
    command: str
    working_directory: str
    num_steps_arg: str
    total_steps: int
    gpus: int
    mode: str
    duration: int
    arrival: float
    sweep: int = -1  # realistic mode: the sweep it belongs to (not written to a .trace)

    def trace_line(self) -> str:
        return "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%f\t%d\t%d" % (
            self.job_type,
            self.command,
            self.working_directory,
            self.num_steps_arg,
            1,
            self.total_steps,
            self.gpus,
            self.mode,
            1,
            -1.0,
            self.duration,
            self.arrival,
        )


def _mode(rng, mix):
    r = rng.uniform(0, 1)
    if r < mix[0]:
        return "static"
    if r < mix[0] + mix[1]:
        return "accordion"
    return "gns"


def _gpus(rng, mix):
    r = rng.uniform(0, 1)
    if r <= mix[0]:
        return 1
    if r <= sum(mix[:2]):
        return 2
    if r <= sum(mix[:3]):
        return 4
    return 8


def _duration(rng, nprng, durations):
    n = len(durations)
    small, medium, large = (round(n * b) for b in DURATION_BOUNDARY[:3])
    r = rng.uniform(0, 1)
    if r < DURATION_PROB[0]:
        pool = durations[:small]
    elif r < sum(DURATION_PROB[:2]):
        pool = durations[small:medium]
    elif r < sum(DURATION_PROB[:3]):
        pool = durations[medium:large]
    else:
        pool = durations[large:]
    return round(3600 * nprng.choice(pool))


def generate(opts: GeneratorOptions, throughputs) -> list[GeneratedJob]:
    """The jobs of one trace; deterministic for `opts` (and the throughputs file)."""
    if opts.realistic:
        return _generate_realistic(opts, throughputs)
    nprng = np.random.RandomState(opts.seed)
    job_rng, arrival_rng, duration_rng, gpu_rng, mode_rng = (random.Random(opts.seed + i) for i in range(5))
    durations = np.linspace(opts.min_hours, opts.max_hours, opts.num_durations)
    out: list[GeneratedJob] = []
    arrival = None
    for k in range(opts.jobs):
        while True:
            model, bs, cmd, wd, arg, dist = job_rng.choice(JOB_TABLE)
            gpus = _gpus(gpu_rng, opts.gpu_mix) if dist else 1
            run_time = _duration(duration_rng, nprng, durations)
            mode = _mode(mode_rng, opts.mode_mix)
            if run_time < 1000 and mode == "accordion":
                mode = "static"
            thr = throughputs.get(model, bs, gpus)
            if thr is not None and (opts.max_gpus is None or gpus <= opts.max_gpus):
                break
        if arrival is None or (opts.burst_size > 0 and k % opts.burst_size == 0):
            arrival = (k // opts.burst_size) * opts.burst_gap if opts.burst_size > 0 else 0.0
        else:
            arrival += -math.log(1.0 - arrival_rng.random()) * opts.interarrival
        out.append(
            GeneratedJob(
                job_type=f"{model} (batch size {bs})",
                model=model,
                batch_size=bs,
                command=cmd,
                working_directory=wd,
                num_steps_arg=arg,
                total_steps=int(run_time * thr),
                gpus=gpus,
                mode=mode,
                duration=int(run_time),
                arrival=arrival,
            )
        )
    return out


def _job_type(opts, throughputs, job_rng, gpu_rng):
    while True:
        model, bs, cmd, wd, arg, dist = job_rng.choice(JOB_TABLE)
        gpus = _gpus(gpu_rng, opts.gpu_mix) if dist else 1
        thr = throughputs.get(model, bs, gpus)
        if thr is not None and (opts.max_gpus is None or gpus <= opts.max_gpus):
            return model, bs, cmd, wd, arg, gpus, thr


def _generate_realistic(opts: GeneratorOptions, throughputs) -> list[GeneratedJob]:
    """Submissions (one job, or a sweep of sweep_size jobs of one job type) drawn first, then their times."""
    if opts.burst_size > 0:
        raise ValueError("burst_size (the old bursts) does not combine with realistic mode: use sweeps")
    if opts.sweeps and (opts.sweep_size < 2 or opts.sweeps * opts.sweep_size > opts.jobs or opts.sweep_span < 0):
        raise ValueError(
            f"{opts.sweeps} sweeps of {opts.sweep_size} jobs within {opts.sweep_span} s: need size >= 2, "
            f"span >= 0 and at most {opts.jobs} jobs in sweeps"
        )
    if opts.load > 0 and not opts.max_gpus:
        raise ValueError("load needs max_gpus (the cluster the offered load is for)")
    nprng = np.random.RandomState(opts.seed)
    job_rng, arrival_rng, duration_rng, gpu_rng, mode_rng = (random.Random(opts.seed + i) for i in range(5))
    sweep_rng = random.Random(opts.seed + 6)
    durations = np.linspace(opts.min_hours, opts.max_hours, opts.num_durations)
    lengths = (
        None
        if opts.lengths == "reference"
        else LengthModel(opts.lengths, opts.length_median, opts.length_p90, opts.length_min, opts.length_max)
    )
    submissions = opts.jobs - opts.sweeps * (opts.sweep_size - 1)
    is_sweep = pick_sweeps(sweep_rng, submissions, opts.sweeps)
    groups = []
    for e in range(submissions):
        kind = _job_type(opts, throughputs, job_rng, gpu_rng)
        mode = _mode(mode_rng, opts.mode_mix)
        size = opts.sweep_size if e in is_sweep else 1
        runs = [
            lengths.draw(duration_rng) if lengths else _duration(duration_rng, nprng, durations) for _ in range(size)
        ]
        groups.append((kind, mode, runs))
    gap = opts.interarrival
    if opts.load > 0:  # the trace's work over load x GPUs x the expected span of its submissions
        work = sum(r * kind[5] for kind, _m, runs in groups for r in runs)
        gap = work / (opts.load * opts.max_gpus * max(1, submissions - 1))
    times = submission_times(
        arrival_rng, submissions, gap, opts.arrivals, opts.diurnal_peak, opts.peak_hour, opts.start_hour
    )
    out: list[GeneratedJob] = []
    sweep_id = 0
    for t0, ((model, bs, cmd, wd, arg, gpus, thr), mode0, runs) in zip(times, groups, strict=True):
        offsets = sweep_offsets(sweep_rng, len(runs), opts.sweep_span) if len(runs) > 1 else [0.0]
        for off, run_time in zip(offsets, runs, strict=True):
            mode = "static" if run_time < 1000 and mode0 == "accordion" else mode0
            out.append(
                GeneratedJob(
                    job_type=f"{model} (batch size {bs})",
                    model=model,
                    batch_size=bs,
                    command=cmd,
                    working_directory=wd,
                    num_steps_arg=arg,
                    total_steps=max(1, int(run_time * thr)),
                    gpus=gpus,
                    mode=mode,
                    duration=int(run_time),
                    arrival=t0 + off,
                    sweep=sweep_id if len(runs) > 1 else -1,
                )
            )
        sweep_id += len(runs) > 1
    out.sort(key=lambda j: j.arrival)  # stable: a sweep's jobs keep their order
    return out


# The public traces' preset (`--realistic`); docs/workloads.md gives each number's source (figure or table) and
# says which are our estimates.
REALISTIC = dict(
    arrivals="diurnal",
    diurnal_peak=3.0,
    peak_hour=15.0,
    start_hour=9.0,
    lengths="lognormal",
    length_median=874.0,
    length_p90=20000.0,
    length_min=60.0,
    length_max=7 * 86400.0,
    gpu_mix=(0.61, 0.13, 0.13, 0.13),
    sweep_size=25,
    sweep_span=1200.0,
)
REALISTIC_SWEEP_SHARE = 0.25  # of the jobs, in sweeps
REALISTIC_LOAD = 0.8  # offered load when the cluster's GPUs are known


def realistic_options(jobs: int, seed: int = 0, max_gpus: int | None = None, **overrides) -> GeneratorOptions:
    """The preset: REALISTIC, round(share x jobs / size) sweeps, load REALISTIC_LOAD on max_gpus (without max_gpus,
    the given interarrival); `overrides` win over every preset value."""
    kw = dict(REALISTIC)
    kw["sweeps"] = round(REALISTIC_SWEEP_SHARE * jobs / kw["sweep_size"])
    if max_gpus:
        kw["load"] = REALISTIC_LOAD
    kw.update(overrides)
    return GeneratorOptions(jobs=jobs, seed=seed, max_gpus=max_gpus, **kw)


def trace_text(jobs: list[GeneratedJob]) -> str:
    return "".join(j.trace_line() + "\n" for j in jobs)


def trace_name(opts: GeneratorOptions) -> str:
    """The reference's file-name convention: jobs_minh_maxh_ndur_lam_seed_modemix_gpumix_multigpu_dynamic."""

    def fmt(x):
        return f"{x:g}"

    return (
        f"{opts.jobs}_{fmt(opts.min_hours)}_{fmt(opts.max_hours)}_{opts.num_durations}_{fmt(opts.interarrival)}_"
        f"{opts.seed}_{','.join(fmt(x) for x in opts.mode_mix)}_{','.join(fmt(x) for x in opts.gpu_mix)}"
        f"_multigpu_dynamic{_realistic_suffix(opts)}.trace"
    )


def _realistic_suffix(opts: GeneratorOptions) -> str:
    """Empty for the reference's options (their names unchanged); else the realistic options that are on."""
    if not opts.realistic:
        return ""
    parts = []
    if opts.arrivals != "poisson":
        parts.append(f"{opts.arrivals}{opts.diurnal_peak:g}h{opts.peak_hour:g}s{opts.start_hour:g}")
    if opts.sweeps:
        parts.append(f"sweeps{opts.sweeps}x{opts.sweep_size}w{opts.sweep_span:g}")
    if opts.lengths != "reference":
        parts.append(
            LengthModel(opts.lengths, opts.length_median, opts.length_p90, opts.length_min, opts.length_max).describe()
        )
    if opts.load > 0:
        parts.append(f"load{opts.load:g}")
    return "_" + "_".join(parts)


__all__ = [
    "DATASET_SIZE",
    "JOB_TABLE",
    "REALISTIC",
    "GeneratedJob",
    "GeneratorOptions",
    "generate",
    "realistic_options",
    "trace_name",
    "trace_text",
]
