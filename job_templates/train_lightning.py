#!/usr/bin/env python3
"""Example Shockwave-managed PyTorch Lightning program: a 2-layer MLP on synthetic regression data.

Follows the training-program contract of job_templates (flags, ``--step-log``, exit 0): runs alone or under
``torchrun --nproc_per_node=N`` (Lightning's DDP: gloo on CPU, NCCL on GPUs), reports through
``ShockwaveCallback``, which on the checkpoint request saves at a step boundary (every rank the same step) and
stops; the next run resumes from ``last_checkpoint()`` at the next step (``ResumableSampler`` skips the batches the
interrupted epoch did), so every optimizer step runs exactly once and the final weights equal an uninterrupted
run's.  ``--batch-size`` is the global batch size (per device: B / (world size x ``--accumulate``)).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16, help="global batch size")
    p.add_argument("--step-time", type=float, default=0.0, help="seconds slept per optimizer step")
    p.add_argument("--step-log", default=None, help="rank 0 appends '<restart> <global step>' per step")
    p.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint-dir", default=None, help="default: $SHOCKWAVE_CHECKPOINT_DIR, else ./shockwave")
    p.add_argument(
        "--sampler",
        choices=("resumable", "plain"),
        default="resumable",
        help="plain: a DataLoader(shuffle=True) (Lightning restarts the epoch's data on a resume)",
    )
    a = p.parse_args(argv)
    for name in ("epochs", "steps_per_epoch", "batch_size", "accumulate", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        import lightning.pytorch as pl
        import torch
        from torch.utils.data import DataLoader, TensorDataset
    except ImportError as exc:
        print(f"train_lightning.py: needs torch and lightning ({exc}); pip install lightning", file=sys.stderr)
        return 2
    from slurm_shockwave.wrapper.integrations.lightning import ResumableSampler, ShockwaveCallback, last_checkpoint

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    per_device, rest = divmod(a.batch_size, world * a.accumulate)
    if per_device < 1 or rest:
        print(
            f"train_lightning.py: --batch-size {a.batch_size} is not a multiple of world size {world} x "
            f"--accumulate {a.accumulate}",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(a.threads)
    restart = os.environ.get("SLURM_RESTART_COUNT") or "0"

    g = torch.Generator().manual_seed(a.seed)
    n = a.steps_per_epoch * a.batch_size
    x = torch.randn(n, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g) / 4 + 0.1 * torch.randn(n, 1, generator=g)
    data = TensorDataset(x, y)

    class MLP(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(a.seed)
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
            self.logged = -1

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            return torch.nn.functional.mse_loss(self.net(xb), yb)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=a.lr, momentum=0.9)

        def train_dataloader(self):
            if a.sampler == "plain":
                return DataLoader(data, batch_size=per_device, shuffle=True)
            return DataLoader(data, batch_size=per_device, sampler=ResumableSampler(data, seed=a.seed))

        def on_train_batch_end(self, outputs, batch, batch_idx):
            step = self.trainer.global_step - 1  # the optimizer step just done (0-based)
            if step <= self.logged:
                return  # mid-accumulation: no optimizer step in this batch
            self.logged = step
            if a.step_log and self.trainer.is_global_zero:
                with open(a.step_log, "a") as fh:
                    fh.write(f"{restart} {step}\n")
            if a.step_time:
                time.sleep(a.step_time)

    callback = ShockwaveCallback(a.checkpoint_dir)
    trainer = pl.Trainer(
        max_epochs=a.epochs,
        accelerator="auto",
        devices=local,
        num_nodes=max(1, world // local),
        strategy="ddp" if world > 1 else "auto",
        accumulate_grad_batches=a.accumulate,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = MLP()
    trainer.fit(model, ckpt_path=last_checkpoint(a.checkpoint_dir))
    digest = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters()))
    state = f"stopped at step {callback.stopped_at}" if callback.stopped_at is not None else "done"
    with torch.no_grad():
        loss = float(torch.nn.functional.mse_loss(model.net(x.to(model.device)), y.to(model.device)))
    line = (f"[train_lightning] rank {trainer.global_rank} {state} step={trainer.global_step} "
            f"weights={digest.hexdigest()[:16]} loss={loss:.6g}\n")
    os.write(1, line.encode())  # one write: the ranks share the output
    if torch.distributed.is_initialized():  # this order: a gloo rank may otherwise abort in its exit-time destructors
        del trainer, model
        gc.collect()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
