"""`shockwave controller uninstall`: undo what the controller did to Slurm, from Slurm's own records.

* refuses while a live controller holds the lock (``controller.lock`` in the state directory, flock);
* releases every job whose AdminComment carries the controller's hold mark (controller/ownership.py), and
  every job the journal says it held that is still held without a mark (holds of older versions);
* clears the marks (an admin's own AdminComment text is kept);
* resets SiteFactor to 0 on every active job the controller manages (pending AND running), and on every
  job the journal says it gave a SiteFactor.

Slurm is the source of truth: the state directory may be missing, stale or from another host.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..hints import is_marked
from ..slurmcli import SlurmCLI
from .ownership import admin_comments, status_of, unmarked

ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD")


class ControllerRunning(RuntimeError):
    """A live controller holds the lock: stop it first."""


def _check_not_running(state_dir: Path) -> None:
    path = state_dir / "controller.lock"
    if not path.exists():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "?"
            raise ControllerRunning(f"a controller is running (pid {pid}, lock {path}): stop it first "
                                    "(systemctl stop shockwave-controller), then run uninstall") from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _journal(cfg) -> tuple[set, set]:
    """(held_by_us, site_factor_touched) from the state, if there is one (an extra, never required)."""
    path = Path(cfg.state_path)
    if not path.exists():
        return set(), set()
    from .state import StateStore
    try:
        state = StateStore(path, readonly=True)
    except Exception:  # noqa: BLE001 - the journal is optional here
        return set(), set()
    try:
        held = {int(j) for j in state.held_by_us()}
        touched = {int(a["job_id"]) for a in state.actions(verb="site_factor", status="done")}
        return held, touched
    except Exception:  # noqa: BLE001
        return set(), set()
    finally:
        state.close()


def _in_partition(job, partition: str) -> bool:
    return not (partition and job.partition and partition not in str(job.partition).split(","))


def uninstall(cfg, cli=None) -> dict:
    """Release the jobs the controller holds, clear its marks, reset the SiteFactors it set."""
    _check_not_running(Path(cfg.state_dir))
    if cli is None:
        cli = SlurmCLI(env=cfg.slurm_env, timeout=cfg.slurm_timeout,
                       **({"bin_dir": cfg.slurm_bin_dir} if getattr(cfg, "slurm_bin_dir", None) else {}))
    journal_held, journal_touched = _journal(cfg)
    live = [j for j in cli.squeue_jobs() if j.state in ACTIVE]
    ac = admin_comments(live)
    marked = [j for j in live if status_of(ac.get(j.job_id, "")) is not None]
    marked_ids = {j.job_id for j in marked}
    release = sorted({j.job_id for j in marked if j.held} |
                     {j.job_id for j in live if j.job_id in journal_held and j.held and j.job_id not in marked_ids})
    managed = {j.job_id for j in live if _in_partition(j, cfg.partition) and
               (cfg.managed_by == "partition" or is_marked(j.comment, cfg.marker))}
    reset = sorted((managed | journal_touched | marked_ids) & {j.job_id for j in live})
    if reset:
        cli.scontrol_update(reset, SiteFactor=0)
    if release:
        cli.release(release)
    # clear the marks after the releases (a crash in between leaves marks, and uninstall can run again)
    by_text: dict[str, list] = {}
    for j in marked:
        by_text.setdefault(unmarked(ac.get(j.job_id, "")), []).append(j.job_id)
    for text, ids in sorted(by_text.items()):
        cli.scontrol_update(sorted(ids), AdminComment=text)
    return {"released": [str(j) for j in release], "site_factor_reset": [str(j) for j in reset],
            "unmarked": sorted(str(j.job_id) for j in marked)}
