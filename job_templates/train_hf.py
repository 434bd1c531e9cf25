#!/usr/bin/env python3
"""Example Shockwave-managed Hugging Face ``Trainer`` program: a tiny regression model on synthetic data.

Follows the training-program contract of the templates (job_templates/README.md): ``--epochs E --steps-per-epoch S
--batch-size B`` (global) ``--step-time T --step-log FILE``; runs alone or under ``torchrun --nproc_per_node=N``
(gloo on CPU, NCCL with CUDA).  What Shockwave adds to a Trainer script is two lines, marked ``# Shockwave``: the
callback (reports every epoch; on the checkpoint request every rank stops at the same step and the Trainer saves
``checkpoint-<step>``) and the resume from the last complete checkpoint (the Trainer skips the batches already done).
Checkpoints go to ``$SHOCKWAVE_CHECKPOINT_DIR`` (else ``./checkpoints/hf``).
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
    p.add_argument("--output-dir", default=None, help="default: $SHOCKWAVE_CHECKPOINT_DIR, else ./checkpoints/hf")
    p.add_argument("--jit-checkpoint", action="store_true",
                   help="TrainingArguments(enable_jit_checkpoint=True): HF's own SIGTERM checkpoint, which "
                        "ShockwaveCallback takes over (agreed across ranks, at the next step's end)")
    p.add_argument("--no-shockwave", action="store_true", help="plain Trainer, without the callback (benchmarks)")
    a = p.parse_args(argv)
    for name in ("epochs", "steps_per_epoch", "batch_size"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
        from transformers import Trainer, TrainerCallback, TrainingArguments
    except ImportError as exc:
        print(f"train_hf.py: needs torch and transformers ({exc}); pip install 'slurm-shockwave[frameworks]'",
              file=sys.stderr)
        return 2
    from slurm_shockwave.wrapper.integrations.huggingface import ShockwaveCallback, last_checkpoint

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if a.batch_size % world:
        print(f"train_hf.py: --batch-size {a.batch_size} is not a multiple of the {world} ranks", file=sys.stderr)
        return 2
    torch.set_num_threads(1)

    class Tiny(torch.nn.Module):  # 8 -> 16 -> 1, 161 parameters; returns {"loss": ...} as the Trainer wants
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

        def forward(self, x, labels=None):
            out = self.net(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):  # S*B samples: S optimizer steps of B per epoch; fixed seed
        def __init__(self, n):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(n, 8, generator=g)
            self.y = self.x @ torch.randn(8, generator=g) + 0.1 * torch.randn(n, generator=g)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"x": self.x[i], "labels": self.y[i]}

    restart = os.environ.get("SLURM_RESTART_COUNT") or "0"

    class StepLog(TrainerCallback):  # the contract's --step-log and --step-time
        def on_step_end(self, args, state, control, **kw):
            if a.step_log and state.is_world_process_zero:
                with open(a.step_log, "a") as fh:
                    fh.write(f"{restart} {state.global_step - 1}\n")
            if a.step_time:
                time.sleep(a.step_time)

    cuda = torch.cuda.is_available()
    out = a.output_dir or os.environ.get("SHOCKWAVE_CHECKPOINT_DIR") or os.path.join("checkpoints", "hf")
    args = TrainingArguments(
        output_dir=out, num_train_epochs=a.epochs, per_device_train_batch_size=a.batch_size // world,
        learning_rate=0.01, seed=0, report_to="none", save_strategy="no", logging_strategy="epoch",
        disable_tqdm=True, dataloader_num_workers=0, ddp_find_unused_parameters=False, use_cpu=not cuda,
        ddp_backend="gloo" if world > 1 and not cuda else None,
        **({"enable_jit_checkpoint": True} if a.jit_checkpoint else {}))
    torch.manual_seed(0)
    callbacks = [StepLog()] if a.no_shockwave else [StepLog(), ShockwaveCallback()]  # Shockwave
    trainer = Trainer(model=Tiny(), args=args, train_dataset=Data(a.steps_per_epoch * a.batch_size),
                      callbacks=callbacks)
    resume = None if a.no_shockwave else last_checkpoint(out)  # Shockwave: None on the first run
    t0 = time.monotonic()
    trainer.train(resume_from_checkpoint=resume)
    st = trainer.state
    w = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    line = (f"[train_hf] rank={os.environ.get('RANK', '0')} restart={restart} from={resume} "
            f"step={st.global_step}/{st.max_steps} time={time.monotonic() - t0:.2f}s weights={w.sum().item():.8f}")
    os.write(1, (line + "\n").encode())  # one write: the ranks share the output
    if torch.distributed.is_initialized():
        # the DDP model first, then the group: a gloo group destroyed from the model's teardown at exit can hang
        del trainer
        gc.collect()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
