#!/usr/bin/env python3
"""Example Shockwave-managed Hugging Face Accelerate loop: a tiny regression model on synthetic data.

Follows the training-program contract of the templates (job_templates/README.md): ``--epochs E --steps-per-epoch S
--batch-size B`` (global) ``--step-time T --step-log FILE``; runs alone or under ``torchrun --nproc_per_node=N`` /
``accelerate launch`` (gloo on CPU, NCCL with CUDA).  The lines Shockwave adds are marked ``# Shockwave``: resume
from the last checkpoint, iterate the epoch through ``sw.batches`` (skips the batches done, reports the epoch), and
on the checkpoint request (agreed by every rank) save and leave.  Checkpoints go to ``$SHOCKWAVE_CHECKPOINT_DIR``
(else ``./checkpoints/accelerate``).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16, help="global batch size (all ranks)")
    p.add_argument("--step-time", type=float, default=0.0, help="seconds slept per optimizer step")
    p.add_argument("--step-log", default=None, help="rank 0 appends '<restart> <global step>' per step")
    p.add_argument("--checkpoint-dir", default=None,
                   help="default: $SHOCKWAVE_CHECKPOINT_DIR, else ./checkpoints/accelerate")
    p.add_argument("--no-shockwave", action="store_true", help="the plain loop, without the helper (benchmarks)")
    a = p.parse_args(argv)
    for name in ("epochs", "steps_per_epoch", "batch_size"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
        from accelerate import Accelerator, DataLoaderConfiguration
    except ImportError as exc:
        print(f"train_accelerate.py: needs torch and accelerate ({exc}); pip install 'slurm-shockwave[frameworks]'",
              file=sys.stderr)
        return 2
    from slurm_shockwave.wrapper.integrations.accelerate import ShockwaveAccelerate

    torch.set_num_threads(1)
    # the seedable sampler: the order of epoch e is a function of (seed, e), so a resumed epoch sees the same batches
    acc = Accelerator(cpu=not torch.cuda.is_available(),
                      dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    if a.batch_size % acc.num_processes:
        print(f"train_accelerate.py: --batch-size {a.batch_size} is not a multiple of the {acc.num_processes} ranks",
              file=sys.stderr)
        return 2
    g = torch.Generator().manual_seed(0)
    n = a.steps_per_epoch * a.batch_size
    x = torch.randn(n, 8, generator=g)
    y = x @ torch.randn(8, generator=g) + 0.1 * torch.randn(n, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), shuffle=True,
                                         batch_size=a.batch_size // acc.num_processes)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / (a.epochs * a.steps_per_epoch + 1))
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)

    restart = os.environ.get("SLURM_RESTART_COUNT") or "0"
    start_epoch, step, sw = 0, 0, None
    if not a.no_shockwave:
        sw = ShockwaveAccelerate(acc, total_epochs=a.epochs)                       # Shockwave
        start_epoch, step = sw.resume()                                            # Shockwave
    t0, first, stopped = time.monotonic(), step, False
    for epoch in range(start_epoch, a.epochs):
        batches = sw.batches(loader, epoch) if sw else loader                      # Shockwave
        if not sw:
            loader.set_epoch(epoch)
        for xb, yb in batches:
            loss = torch.nn.functional.mse_loss(model(xb).squeeze(-1), yb)
            acc.backward(loss)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if a.step_log and acc.is_main_process:
                with open(a.step_log, "a") as fh:
                    fh.write(f"{restart} {step - 1}\n")
            if a.step_time:
                time.sleep(a.step_time)
            if sw and sw.should_checkpoint():                                      # Shockwave
                sw.save(step)                                                      # Shockwave
                stopped = True
                break
        if stopped:
            break
    w = torch.cat([p.detach().flatten() for p in acc.unwrap_model(model).parameters()])
    line = (f"[train_accelerate] rank={acc.process_index} restart={restart} from={first} step={step} "
            f"stopped={stopped} time={time.monotonic() - t0:.2f}s weights={w.sum().item():.8f}")
    os.write(1, (line + "\n").encode())  # one write: the ranks share the output
    if torch.distributed.is_initialized():
        # the DDP model first, then the group: a gloo group destroyed from the model's teardown at exit can hang
        del model, opt, sched, loader, acc, sw
        gc.collect()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
