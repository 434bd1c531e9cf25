"""An emulated training job: follows one trace job through the real job side, on no CPU.

    shockwave-run -- python -m shockwave_lab.replay.emujob --spec JOB.json [--timeline FILE]

It is a training program like any other (`slurm_shockwave.wrapper.Training` restores, reports every epoch,
saves after each one and on Slurm's checkpoint signal; epochs shorter than 1 / SAVES_PER_S wall seconds are
saved every k-th, see `save_every`), except that an epoch is a sleep: for epoch e it
sleeps the profiled duration of the trace job's epoch at its batch size of that epoch on its GPUs
(`schedule[e]`, `epoch_s[bs]`, replay/plan.py), divided by the time scale.  Dozens of them share 2 cores
without slowing each other (each is a sleeping process that wakes 10 times a second).

Preemption: on the checkpoint signal (or SIGTERM) the epoch in progress is left and the part of it already
done (a fraction of the epoch) is saved in the checkpoint, so the next run resumes the same epoch where it stopped
(the simulator keeps a preempted job's iterations the same way); the wrapper then requeues the job.  An epoch's
report carries the batch size it ran at, the GPUs and the time it took in this run (measured by `Training`, as for
any program), and the samples of the part done in this run.

On a cluster of several GPU types (`epoch_s_by_type`, `node_types`) it sleeps at the throughput of its node's type: a
move to another type (a restart there) changes the length of the rest of the epoch as a count change does.

An elastic job (`epoch_s_by_gpus` in its spec) sleeps each epoch at the throughput of the count this run has
(`SHOCKWAVE_GPUS`, wrapper/context.py `count_gpus`): a count change (a restart on another count) keeps the fraction
of the epoch done and changes the length of the rest.  A count its spec has no duration for fails the job.

`--timeline FILE` appends one JSON line per run when its work starts (after start-up and the checkpoint load)
and one when it stops, with the epoch and the seconds done in it: the replay measures restart costs and each
user's GPU time from it (replay/collect.py).  The events the controller reads are only the wrapper's and the
API's, as in production.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from slurm_shockwave.wrapper import Training
from slurm_shockwave.wrapper.context import count_gpus

TICK = 0.1          # seconds between two looks at the checkpoint flag while an epoch "runs"
SAVES_PER_S = 4.0   # at most this many checkpoints a second (module docstring)


class Emulated:
    """The program's state: the fraction of the current (unfinished) epoch already done."""

    def __init__(self):
        self.in_epoch = 0.0

    def state_dict(self) -> dict:
        return {"in_epoch": self.in_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.in_epoch = float(state.get("in_epoch", 0.0))


def _timeline(path, **fields) -> None:
    if not path:
        return
    fields.update(t=time.time(), run=int(os.environ.get("SLURM_RESTART_COUNT") or 0),
                  job=os.environ.get("SLURM_JOB_ID", ""), node=os.environ.get("SLURMD_NODENAME", ""))
    with open(path, "a") as fh:
        fh.write(json.dumps(fields) + "\n")


def save_every(durations: dict, scale: float) -> int:
    """Checkpoint after every epoch, unless epochs are so short (a 1 s Recommendation epoch at a high time scale)
    that this would mean more than SAVES_PER_S checkpoints a second: then after every k-th epoch (and always
    on the signal and at the end)."""
    shortest = min(durations.values()) / scale
    return max(1, math.ceil(1.0 / (SAVES_PER_S * shortest))) if shortest > 0 else 1


def durations_at(spec: dict, gpus: int) -> dict:
    """{batch size: epoch trace seconds} on `gpus` GPUs: the job's own count's, or an elastic job's at `gpus`; on a
    cluster of several GPU types its node's type's (`SLURMD_NODENAME`)."""
    typed = spec.get("epoch_s_by_type") or {}
    if typed:
        node = os.environ.get("SLURMD_NODENAME", "")
        t = (spec.get("node_types") or {}).get(node)
        if t is None or any(t not in at for at in typed.values()):
            raise SystemExit(f"emujob: no epoch durations on node {node!r} (type {t}) (spec {spec['name']})")
        return {int(bs): float(at[t]) for bs, at in typed.items()}
    by = spec.get("epoch_s_by_gpus") or {}
    if not by:
        return {int(k): float(v) for k, v in spec["epoch_s"].items()}
    missing = sorted(int(bs) for bs, at in by.items() if str(gpus) not in at)
    if missing:
        raise SystemExit(f"emujob: no throughput on {gpus} GPU(s) at batch sizes {missing} (spec {spec['name']})")
    return {int(bs): float(at[str(gpus)]) for bs, at in by.items()}


def run(spec: dict, timeline: str | None = None) -> int:
    sched = [int(b) for b in spec["schedule"]]
    gpus = count_gpus()
    durations = durations_at(spec, gpus)
    scale = float(spec["time_scale"])
    state = Emulated()
    training = Training(state, total_epochs=len(sched), samples_per_epoch=int(spec["samples"]),
                        batch_size=sched[0], min_batch_size=int(spec["min_bs"]), max_batch_size=int(spec["max_bs"]),
                        save_every=save_every(durations, scale))
    start = training.start_epoch
    if start < len(sched):
        training.batch_size = sched[start]
    first = sched[min(start, len(sched) - 1)]
    _timeline(timeline, ev="work_start", epoch=start, in_epoch_s=state.in_epoch * durations[first], gpus=gpus)
    previous = sched[start - 1] if start > 0 else sched[0]
    # a virtual clock: each epoch ends its duration after the previous one's scheduled end, so the time spent
    # reporting and saving is absorbed by the next sleep instead of adding up over thousands of epochs
    clock = time.monotonic()
    for epoch in training.epochs():
        bs = sched[epoch]
        if bs != previous:
            training.reporter.report_batch_size_change(previous, bs, reason="schedule", epoch=epoch)
            previous = bs
        began, done_before = clock, state.in_epoch
        deadline = began + max(0.0, (1.0 - done_before) * durations[bs]) / scale
        stopped = False
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            if training.should_checkpoint():
                stopped = True
                break
            time.sleep(min(TICK, deadline - now))
        if stopped:
            state.in_epoch = min(1.0, done_before + max(0.0, time.monotonic() - began) * scale / durations[bs])
            _timeline(timeline, ev="work_end", epoch=epoch, in_epoch_s=state.in_epoch * durations[bs], gpus=gpus,
                      why="checkpoint")
            break                                   # Training saves (mid-epoch) and stops: the wrapper requeues
        state.in_epoch = 0.0
        clock = deadline
        # a resumed epoch: the samples of the part done in this run (its throughput at this count is what it did)
        training.report(batch_size=bs, gpus=gpus, samples=max(1, round(int(spec["samples"]) * (1.0 - done_before))))
    else:
        _timeline(timeline, ev="work_end", epoch=None, in_epoch_s=0.0, gpus=gpus,
                  why="stopped" if training.stopped_early else "done")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="emujob", description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="the job's JSON spec (replay/plan.py ReplayJob.spec)")
    ap.add_argument("--timeline", default=None, help="append run start/stop lines to this file")
    args = ap.parse_args(argv)
    with open(args.spec) as fh:
        spec = json.load(fh)
    return run(spec, args.timeline)


if __name__ == "__main__":
    sys.exit(main())
