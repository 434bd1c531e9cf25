#!/usr/bin/env python3
"""Plain PyTorch DDP through ``slurm_shockwave.wrapper.Training``: every optimizer step runs exactly once across
preemptions.

    python train_ddp.py [--epochs 3] [--steps-per-epoch 20] [--batch-size 16] [--step-time 0] [--step-log FILE]
    torchrun --nproc_per_node=N train_ddp.py ...        # gloo on CPU, NCCL on CUDA (one GPU per LOCAL_RANK; gloo
                                                        # when the ranks of a node outnumber its GPUs)
    shockwave-run -- torchrun --standalone --nproc_per_node=N train_ddp.py ...   # as job_templates/torchrun.sbatch

A tiny MLP (built in code) on synthetic data from a fixed seed: the global batch of step ``i`` of epoch ``e`` is a
pure function of (seed, e, i) and each rank takes its slice, so a resumed run sees exactly the batches it would have
seen.  ``--batch-size`` is the GLOBAL batch size (split over the ranks).  On the checkpoint request every rank stops
at the same step boundary, rank 0 writes the checkpoint, the program exits 0 (shockwave-run requeues the job) and the
next run continues at the next step.  ``--step-log FILE``: rank 0 appends ``<restart count> <global step index>``
per step it completes.  ``--gns``: measures the gradient noise scale across ranks every step (local vs. all-reduced
gradient) and doubles the global batch size at an epoch's end when the GNS exceeds it (up to ``--max-batch-size``).
Exit status: 0 when done or stopped for a checkpoint, 2 on bad options.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

IN, HIDDEN, OUT = 16, 32, 4


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16, help="global batch size (all ranks together)")
    p.add_argument("--step-time", type=float, default=0.0, help="seconds slept per optimizer step")
    p.add_argument("--step-log", default=None, help="rank 0 appends '<restart> <global step>' per step")
    p.add_argument("--gns", action="store_true", help="double the global batch size when the GNS exceeds it")
    p.add_argument("--max-batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", default=None, help="default: $SHOCKWAVE_CHECKPOINT_DIR, else ./checkpoints")
    a = p.parse_args(argv)
    for name in ("epochs", "steps_per_epoch", "batch_size", "max_batch_size"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.step_time < 0:
        p.error("--step-time must be >= 0")
    return a


def batch(seed, epoch, i, bs, rank, world):
    """This rank's slice of the global batch of step ``i`` of ``epoch`` (a pure function of its arguments)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch * 10_007 + i)
    x = torch.randn(bs, IN, generator=g)
    y = (x[:, :OUT] * 2.0 + 0.5 * torch.randn(bs, OUT, generator=g)).argmax(dim=1)
    b = bs // world
    return x[rank * b : (rank + 1) * b], y[rank * b : (rank + 1) * b]


class Job:
    """What a restart needs besides the step position (which Training stores itself)."""

    def __init__(self, model, opt, gns, bs):
        self.model, self.opt, self.gns, self.bs = model, opt, gns, bs

    def state_dict(self):
        return {
            "model": self.model.module.state_dict(),
            "opt": self.opt.state_dict(),
            "gns": self.gns.state_dict(),
            "bs": self.bs,
        }

    def load_state_dict(self, st):
        self.model.module.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.gns.load_state_dict(st["gns"])
        self.bs = st["bs"]


class Wrapped:
    """A single process: the model as DDP would hold it (``.module``), no_sync() a no-op."""

    def __init__(self, module):
        self.module = module

    def __call__(self, x):
        return self.module(x)

    def parameters(self):
        return self.module.parameters()


def main(argv=None):
    a = parse_args(argv)
    import torch
    import torch.distributed as dist

    from slurm_shockwave.wrapper import Training, api
    from slurm_shockwave.wrapper.torch_helpers import GNSEstimator, measure_step_distributed

    rep = api.get_reporter()  # installs the checkpoint-signal handlers first thing
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ  # by torchrun (or srun + torchrun): a group
    cuda = torch.cuda.is_available()
    device = torch.device("cpu")
    if cuda:  # one GPU per local rank; more ranks than GPUs share them (gloo: NCCL refuses two ranks on one GPU)
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if launched:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        dist.init_process_group("nccl" if cuda and torch.cuda.device_count() >= per_node else "gloo")
    rank = dist.get_rank() if launched else 0
    for name in ("batch_size", "max_batch_size"):
        if getattr(a, name) % world:
            print(f"train_ddp: error: --{name.replace('_', '-')} {getattr(a, name)} is not a multiple of the "
                  f"{world} ranks", file=sys.stderr)
            return 2
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT)).to(device)
    if launched:
        model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if cuda else None)
    else:
        model = Wrapped(net)
    job = Job(model, torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9), GNSEstimator(0.9, 5), a.batch_size)
    loss_fn = torch.nn.CrossEntropyLoss()
    run = Training(job, total_epochs=a.epochs, steps_per_epoch=a.steps_per_epoch, batch_size=a.batch_size,
                   samples_per_epoch=a.steps_per_epoch * a.batch_size, min_batch_size=a.batch_size,
                   max_batch_size=max(a.batch_size, a.max_batch_size), checkpoint_dir=a.checkpoint_dir, reporter=rep)
    restart = os.environ.get("SLURM_RESTART_COUNT") or "0"
    log = open(a.step_log, "a") if a.step_log and rank == 0 else None  # noqa: SIM115 - open for the whole run
    if rank == 0:
        backend = dist.get_backend() if launched else "none"
        print(f"[train_ddp] world={world} backend={backend} device={device} restart={restart} resume "
              f"epoch={run.start_epoch} step={run.step} bs={job.bs}", flush=True)
    for epoch in run.epochs():
        t0, first, loss = time.monotonic(), run.epoch_step, 0.0
        for i in run.steps(a.steps_per_epoch):
            x, y = batch(a.seed, epoch, i, job.bs, rank, world)
            job.opt.zero_grad(set_to_none=True)
            if a.gns:
                loss, s_sq, s_bs, b_sq, b_bs = measure_step_distributed(model, loss_fn, x.to(device), y.to(device))
                job.gns.update(s_sq, s_bs, b_sq, b_bs)
            else:
                out = loss_fn(model(x.to(device)), y.to(device))
                out.backward()
                loss = float(out.detach())
            job.opt.step()
            if a.step_time:
                time.sleep(a.step_time)
            if log is not None:
                log.write(f"{restart} {run.step}\n")
                log.flush()
        if run.epoch_step < a.steps_per_epoch:
            if rank == 0:
                print(f"[train_ddp] checkpoint at epoch {epoch} step {run.epoch_step} (global {run.step})",
                      flush=True)
            continue  # the loop saves this position and ends
        done = run.epoch_step - first
        run.report(batch_size=job.bs, samples=done * job.bs, duration_s=time.monotonic() - t0,
                   gns=job.gns.gns if a.gns else None)
        if rank == 0:
            print(f"[train_ddp] epoch {epoch} bs={job.bs} loss={loss:.3f}", flush=True)
        if a.gns and epoch + 1 < a.epochs:
            job.bs = job.gns.decide(job.bs, rep, epoch + 1, a.max_batch_size)
    if log is not None:
        log.close()
    if rank == 0 and not run.stopped_early:
        print("[train_ddp] done", flush=True)
    if launched:  # this order: a gloo rank may otherwise abort in its exit-time destructors (torchrun then exits 1)
        dist.barrier()
        del run, job, model, net
        gc.collect()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
