#!/usr/bin/env python3
"""Example Shockwave-managed training program: a small CNN on synthetic CIFAR-shaped data.

Runs on CPU (about a minute with the defaults).  A ``slurm_shockwave.wrapper.Training`` object owns
reporting and checkpointing: it restores, reports every epoch and checkpoints; on the checkpoint signal (SIGUSR1 from
``--signal=B:USR1@grace``, or SIGTERM from ``scontrol requeue``) it checkpoints *mid-epoch*
and exits; when restarted (``SLURM_RESTART_COUNT`` > 0) it resumes from the checkpoint at the
same epoch and step (the data order is a pure function of seed and epoch), so no epoch is
lost or repeated.

Batch-size modes (the batch size really changes: the data loader and the LR follow it):

* ``static``    keeps ``--batch-size``;
* ``gns``       doubles the batch size when the gradient noise scale (measured every step
                from two micro-batches) exceeds it, up to ``--max-batch-size``.  While the GNS
                estimate is not usable (fewer than 10 steps, or a non-positive |G|^2 / tr(S)
                estimate, i.e. too noisy) the deterministic fallback schedule applies:
                doubling at epochs E/3 and 2E/3.  ``--gns-schedule fallback`` forces that
                schedule, ``estimate`` uses only the estimator;
* ``accordion`` small batch in critical regimes, ``--max-batch-size`` otherwise
                (Accordion detector on the mean gradient norm, every ``--accordion-interval``
                epochs, threshold 0.5).
"""
from __future__ import annotations

import argparse
import math
import resource
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("static", "gns", "accordion"), default="static")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--samples", type=int, default=4096, help="samples per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.01, help="LR at --batch-size (sqrt-scaled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint-dir", default=None,
                   help="default: $SHOCKWAVE_CHECKPOINT_DIR, else ./checkpoints")
    p.add_argument("--gns-schedule", choices=("auto", "estimate", "fallback"), default="auto")
    p.add_argument("--accordion-interval", type=int, default=2)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="extra seconds per step (to stretch short test runs)")
    a = p.parse_args(argv)
    for name in ("epochs", "samples", "batch_size", "max_batch_size", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.batch_size > a.max_batch_size:
        p.error("--batch-size must be <= --max-batch-size")
    return a


def make_data(n, seed):
    """Deterministic, learnable CIFAR-shaped data: faint class prototype + noise,
    20% noisy labels (so the loss cannot reach 0)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(10, 3, 8, 8, generator=g)
    protos = torch.nn.functional.interpolate(protos, size=(32, 32), mode="bilinear",
                                             align_corners=False)
    y = torch.randint(0, 10, (n,), generator=g)
    x = 0.08 * protos[y] + torch.randn(n, 3, 32, 32, generator=g)
    flip = torch.rand(n, generator=g) < 0.2  # label noise: the loss cannot reach 0
    y = torch.where(flip, torch.randint(0, 10, (n,), generator=g), y)
    return x, y


def make_model():
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def fallback_bs(epoch, epochs, base, max_bs):
    doublings = sum(1 for t in (epochs // 3, (2 * epochs) // 3) if t > 0 and epoch >= t)
    return min(base * 2 ** doublings, max_bs)


def lr_for(bs, a):
    return a.lr * math.sqrt(bs / a.batch_size)


class CNNJob:
    """Everything a restart needs, saved by ``state_dict`` and restored by ``load_state_dict``: the
    ``Training`` object decides when (after every epoch, and mid-epoch on the checkpoint signal)."""

    def __init__(self, a, model, opt, gns, acc):
        self.model, self.opt, self.gns, self.acc = model, opt, gns, acc
        self.step, self.bs, self.elapsed, self.seen = 0, a.batch_size, 0.0, 0

    def state_dict(self):
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "gns": self.gns.state_dict(),
                "acc": self.acc.state_dict(), "step": self.step, "bs": self.bs, "elapsed": self.elapsed,
                "seen": self.seen}

    def load_state_dict(self, st):
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.gns.load_state_dict(st["gns"])
        self.acc.load_state_dict(st["acc"])
        self.step, self.bs, self.elapsed, self.seen = st["step"], st["bs"], st["elapsed"], st["seen"]


def main(argv=None):
    a = parse_args(argv)
    import torch
    from slurm_shockwave.wrapper import Training, api
    from slurm_shockwave.wrapper.torch_helpers import (AccordionDetector, GNSEstimator,
                                                       grad_sq_norm, measure_step)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rep = api.get_reporter()  # installs the checkpoint-signal handlers first thing
    x, y = make_data(a.samples, a.seed)
    model = make_model()
    job = CNNJob(a, model, torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9),
                 GNSEstimator(ema=0.9, min_updates=10),
                 AccordionDetector(a.batch_size, a.max_batch_size, 0.5, a.accordion_interval))
    loss_fn = torch.nn.CrossEntropyLoss()
    # one object owns reporting and checkpointing: it restores the last checkpoint now, reports every epoch
    # with the total (so shockwave-run knows when training is finished), saves after every epoch, and on
    # the checkpoint signal saves and ends the loop (shockwave-run then requeues the job)
    run = Training(job, total_epochs=a.epochs, samples_per_epoch=a.samples, batch_size=a.batch_size,
                   min_batch_size=a.batch_size, max_batch_size=a.max_batch_size,
                   checkpoint_dir=a.checkpoint_dir, reporter=rep)
    print(f"[train_cnn] mode={a.mode} restart={rep.restart} resume epoch={run.start_epoch} step={job.step} "
          f"bs={job.bs}", flush=True)
    for epoch in run.epochs():
        bs = job.bs
        for group in job.opt.param_groups:
            group["lr"] = lr_for(bs, a)
        perm = torch.randperm(a.samples, generator=torch.Generator().manual_seed(
            a.seed * 100003 + epoch))
        steps = math.ceil(a.samples / bs)
        t0 = time.monotonic()
        loss_sum = 0.0
        while job.step < steps:
            idx = perm[job.step * bs:(job.step + 1) * bs]
            xb, yb = x[idx], y[idx]
            if a.mode == "gns" and len(idx) >= 2:
                loss, s_sq, s_bs, b_sq, b_bs = measure_step(model, loss_fn, xb, yb, 2)
                job.gns.update(s_sq, s_bs, b_sq, b_bs)
            else:
                job.opt.zero_grad(set_to_none=True)
                out = loss_fn(model(xb), yb)
                out.backward()
                loss = float(out.detach())
            if a.mode == "accordion":
                job.acc.observe(math.sqrt(grad_sq_norm(model.parameters())))
            job.opt.step()
            loss_sum += loss
            job.step += 1
            job.seen += len(idx)
            if a.step_sleep:
                time.sleep(a.step_sleep)
            if run.should_checkpoint() and job.step < steps:
                break                                   # mid-epoch: the loop saves this position and stops
        job.elapsed += time.monotonic() - t0
        if job.step < steps:
            print(f"[train_cnn] checkpoint on signal at epoch {epoch} step {job.step}", flush=True)
            break                                       # leaving mid-epoch: Training saves this position
        run.report(batch_size=bs, samples=job.seen, duration_s=job.elapsed,
                   gns=job.gns.gns if a.mode == "gns" else None,
                   peak_mem_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        print(f"[train_cnn] epoch {epoch} bs={bs} steps={steps} loss={loss_sum / steps:.3f} "
              f"time={job.elapsed:.2f}s", flush=True)
        new_bs = bs
        if epoch + 1 < a.epochs:
            new_bs = next_batch_size(a, epoch, bs, job.gns, job.acc, rep)
        job.step, job.bs, job.elapsed, job.seen = 0, new_bs, 0.0, 0   # what the save after this epoch holds
        if run.should_checkpoint() and epoch + 1 < a.epochs:
            print(f"[train_cnn] checkpoint on signal at end of epoch {epoch}", flush=True)
    if run.stopped_early:
        return 0
    print("[train_cnn] done", flush=True)
    return 0


def next_batch_size(a, epoch, bs, gns, acc, rep):
    """Batch size for epoch ``epoch + 1``; records a batch_size_change event if it changes."""
    if a.mode == "accordion":
        acc.end_epoch(epoch)
        return acc.decide(bs, rep, epoch + 1)
    if a.mode == "gns":
        if a.gns_schedule == "estimate" or (a.gns_schedule == "auto" and gns.gns is not None):
            return gns.decide(bs, rep, epoch + 1, a.max_batch_size)
        new = max(bs, fallback_bs(epoch + 1, a.epochs, a.batch_size, a.max_batch_size))
        if new != bs:
            rep.report_batch_size_change(bs, new, "gns fallback schedule", epoch + 1)
        return new
    return bs


if __name__ == "__main__":
    sys.exit(main())
