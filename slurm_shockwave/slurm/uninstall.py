"""`shockwave controller uninstall`: undo what the controller did to Slurm, from Slurm's own records.

* refuses while a live controller holds the lock (``controller.lock`` in the state directory, flock);
* releases every job whose AdminComment carries the controller's hold mark (slurm/ownership.py), and
  every job the journal says it held that is still held without a mark (holds of older versions);
* clears the marks (an admin's own AdminComment text is kept);
* resets SiteFactor to 0 on every active job the controller manages (pending AND running), and on every
  job the journal says it gave a SiteFactor;
* deletes every restart reservation of the controller (``shockwave-restart-JOBID``, slurm/reservations.py);
* clears the required node list (``update JobId=<id> NodeList=``, a line per job for one scontrol) of every pending job
  whose list is one the journal says the controller wrote (slurm/nodes.py, verb ``place_nodes``); a list the
  user asked for is kept, and so is a running job's (its node list cannot be changed while it runs).

Slurm is the source of truth: the state directory may be missing, stale or from another host.
"""

from __future__ import annotations

import logging
from pathlib import Path

from slurm_shockwave.journal import StateStore
from slurm_shockwave.journal.lock import ControllerRunning, check_not_running
from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.commands import SlurmCLI
from slurm_shockwave.slurm.hints import is_marked
from slurm_shockwave.slurm.models import ACTIVE_STATES, in_partition
from slurm_shockwave.slurm.nodes import journal_pins, our_pins_to_clear
from slurm_shockwave.slurm.ownership import admin_comments, cleared, status_of
from slurm_shockwave.slurm.reservations import delete_all

log = logging.getLogger("slurm_shockwave.slurm")

__all__ = ["ControllerRunning", "uninstall"]


def _journal(cfg) -> tuple[set, set, dict]:
    """(held_by_us, site_factor_touched, node pins written: job -> node sets) from the state, if there is one (an
    extra, never required)."""
    path = Path(cfg.state_path)
    if not path.exists():
        return set(), set(), {}
    try:
        state = StateStore(path, readonly=True)
    except Exception as e:  # noqa: BLE001 - the journal is optional here
        log.warning("uninstall: the state %s cannot be opened (%s); going by Slurm's records only", path, e)
        return set(), set(), {}
    try:
        held = {int(j) for j in state.held_by_us()}
        touched = {int(a["job_id"]) for a in state.actions(verb=Verb.SITE_FACTOR, status="done")}
        return held, touched, journal_pins(state)
    except Exception as e:  # noqa: BLE001 - the journal is optional here
        log.warning("uninstall: the journal in %s cannot be read (%s); going by Slurm's records only", path, e)
        return set(), set(), {}
    finally:
        state.close()


def uninstall(cfg, cli=None) -> dict:
    """Release the jobs the controller holds, clear its marks and node pins, reset the SiteFactors it set."""
    check_not_running(cfg.state_dir)
    if cli is None:
        cli = SlurmCLI.from_config(cfg)
    journal_held, journal_touched, pinned = _journal(cfg)
    live = [j for j in cli.squeue_jobs() if j.state in ACTIVE_STATES]
    ac = admin_comments(live)
    marked = [j for j in live if status_of(ac.get(j.job_id, "")) is not None]
    marked_ids = {j.job_id for j in marked}
    release = sorted(
        {j.job_id for j in marked if j.held and status_of(ac.get(j.job_id, "")) == "held"}  # not an elastic's base
        | {j.job_id for j in live if j.job_id in journal_held and j.held and j.job_id not in marked_ids}
    )
    managed = {
        j.job_id
        for j in live
        if in_partition(j, cfg.partition) and (cfg.managed_by == "partition" or is_marked(j.comment, cfg.marker))
    }
    reset = sorted((managed | journal_touched | marked_ids) & {j.job_id for j in live})
    if reset:
        cli.scontrol_update(reset, SiteFactor=0)
    unpin = our_pins_to_clear(live, pinned)
    if unpin:
        cli.scontrol_update_each(unpin, NodeList="")
    unreserved = delete_all(cli)  # before the releases: a released job then starts wherever it fits
    if release:
        cli.release(release)
    # clear the marks after the releases (a crash in between leaves marks, and uninstall can run again)
    by_text: dict[str, list] = {}
    for j in marked:
        by_text.setdefault(cleared(ac.get(j.job_id, "")), []).append(j.job_id)
    for text, ids in sorted(by_text.items()):
        cli.scontrol_update(sorted(ids), AdminComment=text)
    return {
        "released": [str(j) for j in release],
        "site_factor_reset": [str(j) for j in reset],
        "unmarked": sorted(str(j.job_id) for j in marked),
        "unpinned": [str(j) for j in unpin],
        "unreserved": [str(j) for j in unreserved],
    }
