"""submitit: a ``Checkpointable`` that reports to the site's event store, so the controller can plan the job.

submitit does the preemption itself and this module stays out of its way: its sbatch script has
``--signal=USR2@90`` and ``--requeue``; the controller recognises a submitit job (its script or output name,
slurm/jobview.py) and sends USR2 to the job's steps (``srun ... submitit.core._submit``), never to the batch shell;
submitit's handler calls ``checkpoint()`` and then runs ``scontrol requeue`` itself (exactly one party requeues; the
controller's hold, set before its signal, stays with the requeued job).  Usage::

    from slurm_shockwave.wrapper.integrations.submitit import Checkpointable

    class Train(Checkpointable):            # `step` (optimizer steps) and `epoch` are pickled with the rest of self
        def __call__(self, epochs):
            self.report_start()             # once per run: this run's start, and where it resumes
            for epoch in range(self.epoch, epochs):
                ...                         # train; self.step += 1 per optimizer step
                self.epoch = epoch + 1
                self.reporter.report_epoch(epoch, batch_size=bs, samples=n, duration_s=dt)

    executor.update_parameters(slurm_comment="shockwave epochs=30 bs=32")   # managed by the controller

The store is found as ``shockwave-run`` finds it (wrapper/context.py `find_store`: ``$SHOCKWAVE_STORE``, else the
site's controller config).  submitit pickles ``self`` into the requeued submission: the reporter is left out.

Elastic GPU counts: not for submitit jobs.  submitit writes its task count (one task per GPU) into its own sbatch
script, so a GPU request the controller changes would not change the world size; declare no ``gpus=MIN-MAX`` range
for a submitit job (``api.per_rank_batch`` still computes and checks a per-rank batch from the global one).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import submitit

from slurm_shockwave.wrapper.api import Reporter
from slurm_shockwave.wrapper.context import ENV_EVENT_FILE, ENV_STORE, find_store


class Checkpointable(submitit.helpers.Checkpointable):
    """submitit's Checkpointable plus the job's reports (events: start, resume, epoch_end, signal, checkpoint)."""

    step = 0  # optimizer steps done, counted from the job's first run
    epoch = 0  # epochs completed
    checkpoint_path: str | None = None  # what checkpoint() saves besides the pickled self (default: that pickle)

    @property
    def reporter(self) -> Reporter:
        """This run's Reporter (built on first use; only global rank 0 writes; no signal handlers: submitit's)."""
        rep = self.__dict__.get("_sw_reporter")
        if rep is None:
            env = dict(os.environ)
            if not env.get(ENV_EVENT_FILE):
                env[ENV_STORE] = str(find_store(env)[0])
            rep = self.__dict__["_sw_reporter"] = Reporter(install_handlers=False, env=env)
        return rep

    def report_start(self, path: str | os.PathLike | None = None) -> None:
        """Once per run, before the first step: its start (submitit's handlers are up, it may be signalled) and
        its resume at ``self.step`` / ``self.epoch`` (``path``: the checkpoint restored, if any)."""
        self.reporter.emit("start", gpus=self.reporter.gpus, pid=os.getpid())
        self.reporter.resumed(self.step, self.epoch, path)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """submitit's preemption (or timeout) hook: reports the request and the checkpoint (``self.step``); a
        subclass saves its files first, then returns ``super().checkpoint(...)``."""
        sig = signal.Signals["SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")]
        self.reporter.emit("signal", signal=int(sig), reason="checkpoint request (submitit)")
        delayed = super().checkpoint(*args, **kwargs)
        path = self.checkpoint_path or submitit.JobEnvironment().paths.submitted_pickle
        self.reporter.checkpointed(path, epoch=self.epoch, step=self.step)
        self.reporter.emit("exit", exit_code=0, reason="preempted: checkpointed, submitit requeues the job")
        return delayed

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_sw_reporter"}
