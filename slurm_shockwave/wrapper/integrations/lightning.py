"""PyTorch Lightning integration: a callback that reports to Shockwave and checkpoints on its request.

Add three things to a Lightning script (``import lightning`` is needed only here, never by ``slurm_shockwave``)::

    from slurm_shockwave.wrapper.integrations.lightning import ResumableSampler, ShockwaveCallback, last_checkpoint

    loader = DataLoader(dataset, batch_size=per_device_bs, sampler=ResumableSampler(dataset, seed=0))
    trainer = L.Trainer(max_epochs=30, callbacks=[ShockwaveCallback()])
    trainer.fit(model, loader, ckpt_path=last_checkpoint())  # None on the first run

:class:`ShockwaveCallback` reports each training epoch (``epoch_end`` with the global batch size = per-device batch
size x world size x ``accumulate_grad_batches``) and, once per run at train start, ``resume`` (optimizer steps
already done, epoch, checkpoint restored).  After every training batch it polls the checkpoint request (the
wrapper's request file or the signal: a flag and a stat at most every 0.5 s) and agrees across ranks (under DDP
one all_reduce of one int per batch, ``ranks.agree``), so every rank stops at the same step.  On the request it
saves ``shockwave-<job>-step<N>.ckpt`` (``trainer.save_checkpoint`` into a temp name, then rank 0 renames it:
atomic), records ``checkpoint`` with ``step`` and sets ``trainer.should_stop``, so ``fit`` returns and the program
exits 0; ``shockwave-run`` then requeues the job.

Lightning's own Slurm requeue (``SLURMEnvironment(auto_requeue=True)``: on USR1 rank 0 saves ``hpc_ckpt_*`` and
runs ``scontrol requeue``) is turned off in :meth:`ShockwaveCallback.setup`, which Lightning calls before it
registers its signal handlers: under ``shockwave-run`` the wrapper is the one party that requeues.

Resume: Lightning restores the loop counters of a mid-epoch checkpoint (``global_step`` continues, no optimizer step
is redone) but restarts a plain data loader at the epoch's first batch.  :class:`ResumableSampler` (a
``DistributedSampler``, so Lightning keeps it under DDP; order = f(seed, epoch)) is told by the callback at train
start to skip the samples of the batches the interrupted run completed, so the resume is exact.  It needs the
loader's iterator to start after ``on_train_start`` (``num_workers=0``; with workers Lightning starts it earlier,
the callback then says so in one line).

Elastic GPU counts (the controller restarts the job on another count): give the callback the global batch size
(``ShockwaveCallback(batch_size=256)``) and size the loader with :func:`per_device_batch_size` (in the
``LightningModule``'s or ``DataModule``'s ``train_dataloader``, where ``self.trainer`` knows this run's world size);
``accumulate_grad_batches`` is kept.  A loader of another per-device batch stops the run at train start, before its
first step, and a count that does not divide the global batch is the job's exit reason.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins.environments import SLURMEnvironment
from torch.utils.data import DistributedSampler

from slurm_shockwave.wrapper import api, ranks
from slurm_shockwave.wrapper.context import ENV_RUN_START, warn
from slurm_shockwave.wrapper.integrations import per_device_batch

PREFIX = "shockwave-"
_NAME = re.compile(r"^shockwave-(?P<job>[A-Za-z0-9_.-]*)-step(?P<step>\d+)\.ckpt$")


def _job_tag() -> str:
    job = os.environ.get("SHOCKWAVE_JOB_ID") or os.environ.get("SLURM_JOB_ID") or "local"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", job)[:64]


def _restart() -> int:
    for var in ("SHOCKWAVE_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        with contextlib.suppress(ValueError):
            return max(0, int(os.environ.get(var) or ""))
    return 0


def _default_dir(trainer: pl.Trainer | None = None) -> Path:
    env = os.environ.get("SHOCKWAVE_CHECKPOINT_DIR")
    if env:
        return Path(env)
    return Path(trainer.default_root_dir if trainer is not None else os.getcwd()) / "shockwave"


def last_checkpoint(dirpath: str | os.PathLike | None = None) -> str | None:
    """The checkpoint to pass to ``trainer.fit(..., ckpt_path=...)``: the newest ``shockwave-*.ckpt`` in
    ``dirpath`` (default ``$SHOCKWAVE_CHECKPOINT_DIR``, else ``./shockwave``), None if there is none.

    On a job's first run (restart count 0) a checkpoint written by the same job id before this run started
    (``$SHOCKWAVE_RUN_START``) belongs to an older job that reused the id and is ignored with a warning."""
    d = Path(dirpath) if dirpath is not None else _default_dir()
    found: list[tuple[float, int, Path]] = []
    try:
        entries = list(d.iterdir())
    except OSError:
        return None
    try:
        run_start = float(os.environ.get(ENV_RUN_START) or "nan")
    except ValueError:
        run_start = float("nan")
    for p in entries:
        m = _NAME.match(p.name)
        if not m:
            continue
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if _restart() == 0 and m["job"] == _job_tag() and mtime < run_start:
            warn(f"ignoring {p}: written by an older job with this job id (this is the job's first run)")
            continue
        found.append((mtime, int(m["step"]), p))
    return str(max(found)[2]) if found else None


class ResumableSampler(DistributedSampler):
    """Shuffled (``seed``, epoch) order, sharded over the ranks like ``DistributedSampler`` (which it is, so
    Lightning keeps it under DDP and calls ``set_epoch``); :meth:`skip` drops the first samples of the next
    iteration (the callback sets it on a mid-epoch resume).  The ranks default to the initialized process
    group, else the launcher's environment (``ranks.detect``)."""

    def __init__(
        self,
        dataset: Any,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
    ):
        if num_replicas is None or rank is None:
            dist = ranks.distributed()
            r = ranks.detect() if dist is None else ranks.Rank(dist.get_rank(), 0, dist.get_world_size())
            num_replicas = r.world_size if num_replicas is None else num_replicas
            rank = r.rank if rank is None else rank
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self._skip = 0
        self.started = False  # an iteration began since the last skip()/set_epoch()

    def skip(self, samples: int) -> None:
        """The next iteration starts after ``samples`` of this rank's samples of the epoch."""
        self._skip = max(0, int(samples))

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:  # a generator: the order and the skip are read at the first next()
        self.started = True
        skip, self._skip = self._skip, 0
        yield from itertools.islice(super().__iter__(), skip, None)


def per_device_batch_size(global_batch_size: int, trainer: pl.Trainer) -> int:
    """The loader's batch size on this run's devices: global // (world size x ``accumulate_grad_batches``)."""
    return per_device_batch(global_batch_size, trainer.world_size, trainer.accumulate_grad_batches)


def _loaders(trainer: pl.Trainer) -> list[Any]:
    dl = trainer.train_dataloader
    if isinstance(dl, dict):
        return list(dl.values())
    if isinstance(dl, list | tuple):
        return list(dl)
    return [dl] if dl is not None else []


def _per_device_batch_size(loader: Any) -> int | None:
    bs = getattr(loader, "batch_size", None)
    if bs is None:
        bs = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return int(bs) if isinstance(bs, int) and bs > 0 else None


def _done_in_epoch(trainer: pl.Trainer) -> int:
    """Training batches of the current epoch Lightning counts as done (restored from a checkpoint too)."""
    return int(getattr(trainer.fit_loop.epoch_loop.batch_progress.current, "processed", 0))


def _samplers(loader: Any) -> list[Any]:
    found = [getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)]
    return [s for i, s in enumerate(found) if isinstance(s, ResumableSampler) and s not in found[:i]]


class ShockwaveCallback(pl.Callback):
    """Reports epochs, checkpoints and stops on Shockwave's request (see the module docstring).

    ``dirpath``: where the checkpoints go (default ``$SHOCKWAVE_CHECKPOINT_DIR``, else
    ``<default_root_dir>/shockwave``); ``batch_size``: the global batch size, checked against the train loader at
    train start (module docstring; default: per-device batch size x world size x ``accumulate_grad_batches``, only
    reported); ``keep``: checkpoints kept."""

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        *,
        reporter: api.Reporter | None = None,
        batch_size: int | None = None,
        keep: int = 2,
    ):
        super().__init__()
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.reporter = reporter if reporter is not None else api.get_reporter()  # handlers: before Lightning's
        self.batch_size = batch_size
        self.keep = max(1, keep)
        self.stopped_at: int | None = None  # global step of the checkpoint on request, if any
        self._resumed = False
        self._t0 = 0.0
        self._batches = 0
        self._per_device: int | None = None

    # ---------------------------------------------------------------- Lightning's own Slurm requeue
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Turn off Lightning's auto-requeue: runs before the trainer registers its signal handlers."""
        env = getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)
        if env is None:
            env = getattr(trainer.strategy, "cluster_environment", None)
        if isinstance(env, SLURMEnvironment) and env.auto_requeue:
            env.auto_requeue = False  # shockwave-run requeues; Lightning would run `scontrol requeue` a second time
        if self.dirpath is None:
            self.dirpath = _default_dir(trainer)

    # ---------------------------------------------------------------- reporting
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loaders = _loaders(trainer)
        self._per_device = _per_device_batch_size(loaders[0]) if loaders else None
        if self.batch_size and self._per_device:
            per_device_batch(
                self.batch_size, trainer.world_size, trainer.accumulate_grad_batches, self._per_device, self.reporter
            )
        nb = trainer.num_training_batches
        if self._per_device and isinstance(nb, int):
            spe = nb * self._per_device * trainer.world_size
            self.reporter.configure(samples_per_epoch=spe)
        total = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        self.reporter.configure(total_epochs=total)
        done = self._resume_data(trainer, loaders)
        if not self._resumed:  # once per run, before the first step
            self._resumed = True
            self.reporter.emit(
                "resume",
                step=int(trainer.global_step),
                epoch=int(trainer.current_epoch),
                path=str(trainer.ckpt_path)[:1024] if trainer.ckpt_path else None,
                total_epochs=total if total is not None and trainer.current_epoch < total else None,
            )
        if trainer.ckpt_path and trainer.is_global_zero:
            print(
                f"[shockwave] resumed from {trainer.ckpt_path}: step {trainer.global_step}, epoch "
                f"{trainer.current_epoch}, batch {done}",
                file=sys.stderr,
                flush=True,
            )
        self._t0, self._batches = time.monotonic(), 0

    def _resume_data(self, trainer: pl.Trainer, loaders: list[Any]) -> int:
        """On a mid-epoch resume, tell the ResumableSamplers to skip the batches already done; returns them."""
        done = _done_in_epoch(trainer) if trainer.ckpt_path else 0
        nb = trainer.num_training_batches
        if not (done > 0 and isinstance(nb, int) and done < nb):
            return 0
        samplers = [(dl, s) for dl in loaders for s in _samplers(dl)]
        if not samplers:
            if trainer.is_global_zero:
                warn(
                    f"resumed at batch {done} of epoch {trainer.current_epoch}: the data loader restarts at the "
                    "epoch's first batch (use ResumableSampler for an exact resume)"
                )
            return done
        for dl, s in samplers:
            if s.started:
                warn("the data loader started before the resume position was known (num_workers > 0?): not exact")
            s.skip(done * (_per_device_batch_size(dl) or 1))
        return done

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t0, self._batches = time.monotonic(), 0

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        nb = trainer.num_training_batches
        if self._batches == 0 or (isinstance(nb, int) and _done_in_epoch(trainer) < nb):
            return  # left mid-epoch (the checkpoint request): not an epoch done
        per = self._per_device or 0
        self.reporter.report_epoch(
            int(trainer.current_epoch),
            batch_size=self.batch_size or per * trainer.world_size * trainer.accumulate_grad_batches,
            samples=self._batches * per * trainer.world_size,
            duration_s=max(time.monotonic() - self._t0, 1e-6),
        )

    # ---------------------------------------------------------------- the checkpoint request
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        if not self._agree(trainer, self.reporter.should_checkpoint()) or self.stopped_at is not None:
            return  # a collective: every rank calls it once per batch and takes the same decision
        nb = trainer.num_training_batches
        last = isinstance(nb, int) and batch_idx + 1 >= nb
        if last and trainer.max_epochs is not None and trainer.current_epoch + 1 >= trainer.max_epochs:
            return  # the last batch of the training: it ends now anyway
        if trainer.accumulate_grad_batches > 1 and (batch_idx + 1) % trainer.accumulate_grad_batches and not last:
            return  # mid-accumulation: stop at the next optimizer step
        self.save(trainer)
        trainer.should_stop = True

    @staticmethod
    def _agree(trainer: pl.Trainer, flag: bool) -> bool:
        """Any rank's request stops every rank: one all_reduce of one int under torch.distributed (Lightning's
        ``reduce_boolean_decision`` adds a barrier to it), the strategy's own reduction otherwise (e.g. XLA)."""
        if ranks.distributed() is not None:
            return ranks.agree(flag)
        return bool(trainer.strategy.reduce_boolean_decision(flag, all=False))

    def save(self, trainer: pl.Trainer) -> Path:
        """Save a checkpoint now (every rank calls it; rank 0 writes it atomically) and record it."""
        assert self.dirpath is not None
        step = int(trainer.global_step)
        final = self.dirpath / f"{PREFIX}{_job_tag()}-step{step}.ckpt"
        tmp = self.dirpath / f".{final.name}.tmp"
        t0 = time.monotonic()
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
        trainer.strategy.barrier("shockwave.mkdir")
        trainer.save_checkpoint(tmp)  # rank 0 writes; a barrier follows
        if trainer.is_global_zero:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            with contextlib.suppress(OSError):
                fd = os.open(self.dirpath, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._prune(final)
            epoch = int(trainer.current_epoch)
            nb = trainer.num_training_batches
            whole = isinstance(nb, int) and _done_in_epoch(trainer) >= nb
            last_done = epoch if whole else epoch - 1  # the last epoch completed in this checkpoint
            self.reporter.checkpointed(final, epoch=last_done if last_done >= 0 else None, step=step)
            print(
                f"[shockwave] checkpoint at step {step} (epoch {epoch}) in {time.monotonic() - t0:.2f}s: {final}; "
                "stopping",
                file=sys.stderr,
                flush=True,
            )
        self.stopped_at = step
        return final

    def _prune(self, newest: Path) -> None:
        """Keep the newest ``keep`` checkpoints of this job; remove temp files of saves that died."""
        assert self.dirpath is not None
        mine = []
        for p in self.dirpath.iterdir():
            if p.name.startswith(f".{PREFIX}{_job_tag()}-") and p.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    p.unlink()
                continue
            m = _NAME.match(p.name)
            if m and m["job"] == _job_tag() and p != newest:
                with contextlib.suppress(OSError):
                    mine.append((p.stat().st_mtime, p))
        for _, p in sorted(mine)[: max(0, len(mine) - (self.keep - 1))]:
            with contextlib.suppress(OSError):
                p.unlink()


__all__ = ["ResumableSampler", "ShockwaveCallback", "last_checkpoint"]
