"""Environment contract between ``shockwave-run`` and the training program."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_shockwave import site
from slurm_shockwave.events.schema import check_job_id
from slurm_shockwave.events.store import job_event_path

ENV_STORE = "SHOCKWAVE_STORE"
ENV_EVENT_FILE = "SHOCKWAVE_EVENT_FILE"
ENV_JOB_ID = "SHOCKWAVE_JOB_ID"
ENV_RESTART = "SHOCKWAVE_RESTART_COUNT"
ENV_CKPT_DIR = "SHOCKWAVE_CHECKPOINT_DIR"
ENV_CKPT_SIGNAL = "SHOCKWAVE_CHECKPOINT_SIGNAL"
ENV_REQUEST_FILE = "SHOCKWAVE_CHECKPOINT_REQUEST_FILE"
ENV_GPUS = "SHOCKWAVE_GPUS"
ENV_PREVIOUS_GPUS = "SHOCKWAVE_PREVIOUS_GPUS"
ENV_RUN_START = "SHOCKWAVE_RUN_START"
DEFAULT_SIGNAL = "USR1"


def warn(msg: str) -> None:
    """One-line diagnostic on stderr (never raises)."""
    with contextlib.suppress(Exception):  # stderr itself failed: there is nothing left to say it on
        sys.stderr.write(f"shockwave: {msg}\n")
        sys.stderr.flush()


def parse_signal(name: str | int) -> signal.Signals:
    """``USR1`` / ``SIGUSR1`` / ``10`` -> ``signal.SIGUSR1``; ``ValueError`` otherwise."""
    s = str(name).strip().upper()
    if s.isdigit():
        return signal.Signals(int(s))
    if not s.startswith("SIG"):
        s = "SIG" + s
    try:
        return signal.Signals[s]
    except KeyError:
        raise ValueError(f"unknown signal {name!r}") from None


def find_store(env: Mapping[str, str] = os.environ, store: str | None = None) -> tuple[Path, str]:
    """(event store root, where it came from): ``--store``, else ``$SHOCKWAVE_STORE``, else the site's controller
    config (site.py: ``$SHOCKWAVE_CONFIG`` or /etc/shockwave/config.toml), else a private store under
    ``$XDG_STATE_HOME`` (~/.local/state/shockwave/events) that no site controller reads."""
    if store:
        return Path(store), "--store"
    if env.get(ENV_STORE):
        return Path(env[ENV_STORE]), f"${ENV_STORE}"
    conf = site.config_path(env)
    if conf is not None:
        try:
            return Path(site.event_store(conf)), f"the site's config {conf}"
        except (OSError, ValueError) as e:
            warn(f"cannot read the site's config ({str(e).splitlines()[0][:200]}); using a private store")
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return (
        Path(base) / "shockwave" / "events",
        f"a private store: no ${ENV_STORE} and no site config ({site.SITE_CONFIG}), so no controller sees "
        f"this job's reports; ask your admin for the site's store",
    )


def count_gpus(env: Mapping[str, str] = os.environ) -> int:
    """GPUs of this job: ``SHOCKWAVE_GPUS``, else Slurm's / CUDA's visible device lists."""
    if env.get(ENV_GPUS, "").isdigit():
        return int(env[ENV_GPUS])
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        nodes = env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "1"))
        return int(env["SLURM_GPUS_ON_NODE"]) * (int(nodes) if nodes.isdigit() else 1)
    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        val = env.get(var, "").strip()
        if val and val not in ("-1", "NoDevFiles"):
            return len([x for x in val.split(",") if x.strip()])
    return 0


@dataclass(frozen=True)
class JobContext:
    """Who we are: job id, restart count, where events and checkpoints go."""

    job_id: str
    restart: int
    store: Path
    event_file: Path
    checkpoint_dir: Path
    in_slurm: bool
    store_source: str = "--store"  # where `store` came from (find_store), said once in the job's output

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] = os.environ, *, store: str | None = None, checkpoint_dir: str | None = None
    ) -> JobContext:
        """Build the context for ``shockwave-run`` (raises ``ValueError`` on a bad job id)."""
        slurm_id = env.get("SLURM_JOB_ID")
        if slurm_id:
            job_id = check_job_id(slurm_id.strip())
        else:
            job_id = f"local-{int(time.time())}{os.getpid():07d}"
        restart = _int_or_zero(env.get("SLURM_RESTART_COUNT"), "SLURM_RESTART_COUNT")
        root, source = find_store(env, store)
        event_file = job_event_path(root, job_id)  # <store>/users/<uid>/<jobid>/events.jsonl
        if checkpoint_dir:
            ckpt = Path(checkpoint_dir)
        elif env.get(ENV_CKPT_DIR):
            ckpt = Path(env[ENV_CKPT_DIR])
        else:  # the job's working directory (sbatch -D, else the submit directory)
            ckpt = Path(os.getcwd()) / "checkpoints" / job_id
        return cls(job_id, restart, root, event_file, ckpt, bool(slurm_id), source)

    def child_env(
        self, signame: str, request_file: Path | None, gpus: int = 0, previous_gpus: int | None = None
    ) -> dict[str, str]:
        """Variables exported to the training program (``gpus``: this run's count; ``previous_gpus``: the job's
        previous run's, when it had one)."""
        out = {
            ENV_GPUS: str(gpus),
            ENV_STORE: str(self.store),
            ENV_EVENT_FILE: str(self.event_file),
            ENV_JOB_ID: self.job_id,
            ENV_RESTART: str(self.restart),
            ENV_CKPT_DIR: str(self.checkpoint_dir),
            ENV_CKPT_SIGNAL: signame,
            ENV_RUN_START: f"{time.time():.6f}",
        }
        if request_file is not None:
            out[ENV_REQUEST_FILE] = str(request_file)
        if previous_gpus is not None:
            out[ENV_PREVIOUS_GPUS] = str(previous_gpus)
        return out


def _int_or_zero(val: str | None, name: str) -> int:
    if val is None or val.strip() == "":
        return 0
    try:
        n = int(val)
        if n < 0:
            raise ValueError
        return n
    except ValueError:
        warn(f"ignoring bad {name}={val[:40]!r}; using 0")
        return 0
