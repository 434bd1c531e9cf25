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
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from shockwave_lab.workload.models import DATASET_SIZE

# (model, batch sizes, command, working directory, num_steps_arg, distributed), in the reference's table order
_TEMPLATES = (
    ("ResNet-18", (32, 64, 128, 256), "python3 main.py --data_dir=%s/cifar10 --batch_size {bs}",
     "image_classification/cifar10", "--num_steps", True),
    ("ResNet-50", (16, 32, 64), "python3 main.py -j 4 -a resnet50 -b {bs} %s/imagenet/",
     "image_classification/imagenet", "--num_minibatches", True),
    ("Transformer", (16, 32, 64, 128),
     "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size {bs} -proj_share_weight",
     "translation", "-step", True),
    ("LM", (5, 10, 20, 40, 80), "python3 main.py --cuda --data %s/wikitext2 --batch_size {bs}",
     "language_modeling", "--steps", True),
    ("Recommendation", (512, 1024, 2048, 4096, 8192), "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size {bs}",
     "recommendation", "-n", False),
)
JOB_TABLE = tuple((model, bs, cmd.format(bs=bs), wd, arg, dist)
                  for model, sizes, cmd, wd, arg, dist in _TEMPLATES for bs in sizes)

DURATION_PROB = (0.72, 0.2, 0.05, 0.03)
DURATION_BOUNDARY = (0.2, 0.5, 0.9, 1.0)


@dataclass(frozen=True)
class GeneratorOptions:
    jobs: int
    seed: int = 0
    interarrival: float = 40.0             # mean seconds between arrivals (the reference's `lam`)
    min_hours: float = 0.2
    max_hours: float = 5.0
    num_durations: int = 100
    mode_mix: tuple = (0.0, 0.5, 0.5)      # static, accordion, gns
    gpu_mix: tuple = (0.6, 0.3, 0.09, 0.01)  # 1, 2, 4, 8 GPUs
    max_gpus: int | None = None            # redraw a job type/GPU count that does not fit (None: no limit)
    burst_size: int = 0                    # jobs per burst (0: one Poisson stream, the reference's)
    burst_gap: float = 0.0                 # seconds from the start of one burst to the next


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

    def trace_line(self) -> str:
        return "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%f\t%d\t%d" % (
            self.job_type, self.command, self.working_directory, self.num_steps_arg, 1, self.total_steps,
            self.gpus, self.mode, 1, -1.0, self.duration, self.arrival)


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
        out.append(GeneratedJob(job_type=f"{model} (batch size {bs})", model=model, batch_size=bs, command=cmd,
                                working_directory=wd, num_steps_arg=arg, total_steps=int(run_time * thr),
                                gpus=gpus, mode=mode, duration=int(run_time), arrival=arrival))
    return out


def trace_text(jobs: list[GeneratedJob]) -> str:
    return "".join(j.trace_line() + "\n" for j in jobs)


def trace_name(opts: GeneratorOptions) -> str:
    """The reference's file-name convention: jobs_minh_maxh_ndur_lam_seed_modemix_gpumix_multigpu_dynamic."""
    def fmt(x):
        return f"{x:g}"
    return (f"{opts.jobs}_{fmt(opts.min_hours)}_{fmt(opts.max_hours)}_{opts.num_durations}_{fmt(opts.interarrival)}_"
            f"{opts.seed}_{','.join(fmt(x) for x in opts.mode_mix)}_{','.join(fmt(x) for x in opts.gpu_mix)}"
            f"_multigpu_dynamic.trace")


__all__ = ["GeneratorOptions", "GeneratedJob", "generate", "trace_text", "trace_name", "JOB_TABLE", "DATASET_SIZE"]
