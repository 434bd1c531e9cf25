"""A resized job's new nodes kept for its restart (slurm/reservations.py): the race of the elastic replay of 2026-11-28
10:42 (docs/replay-elastic.md), where Slurm started an arrival on the GPU a growing job had just freed by its requeue,
and the job then waited on its new count until a round took the change back.

On a real cluster (2 nodes x 4 fake GPUs; 22.05, 24.11 and 26.05): node1 is full, node2 runs a foreign 2-GPU job and
an elastic job on 1 GPU; the round grows it to 2 on node2.  A job submitted while it checkpoints (a foreign one, which
no round holds, as an arrival no round has seen) must not start on node2's free GPU, nor on the one the requeue frees:
the grown job restarts there on 2 GPUs, and the arrival still waits.  Without the reservation it starts at once (a
variant of this test with reservations off checks that the race is real).  A controller killed (SIGKILL) right after
the create, and again right after the release, before the delete: the next one, on the same state, deletes the
reservation once the job is released, and the job restarts grown."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurm_shockwave.backends.base import check_decision
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.enact import Action
from slurm_shockwave.slurm.reservations import Reservations, ours
from slurm_shockwave.slurm.uninstall import uninstall
from solver.types import GPU, RoundDecision
from tests.slurm_fixtures import cluster_up, die_after, killed, make_root, version_test_versions, wait_for
from tests.test_elastic_slurm import _backend, _config, _job, _running_at

SLEEP = "trap '' USR1; sleep 300"


# ---------------------------------------------------------------------- without Slurm
def _obs(state="RUNNING", gpus=1, wanted=0):
    return SimpleNamespace(state=state, gpus=gpus, wanted_gpus=wanted)


def test_a_resize_or_a_move_signalled_this_round_is_reserved_and_released_ones_are_deleted(tmp_path):
    state = StateStore(tmp_path / "state.sqlite")
    r = Reservations(state, user="ops")
    observed = {1: _obs(wanted=2), 2: _obs(), 3: _obs(), 4: _obs(wanted=2)}
    results = [(Action(Verb.SIGNAL, (1, 2, 3, 4), "B:USR1"), "done")]
    # 1: grows; 2: moves; 3: signalled, lost its round; 4: grows but the round gave it no nodes
    acts = r.wanted(results, {1, 2, 4}, {2: ("n2",)}, observed, {1, 2, 4}, {1: ("n1", "n2"), 2: ("n2",)}, 5)
    assert [(a.verb, a.job_ids, a.value) for a in acts] == [
        (Verb.RESERVE, (1,), "Nodes=n1,n2 Duration=5 Users=ops"), (Verb.RESERVE, (2,), "Nodes=n2 Duration=5 Users=ops")]
    r._save({1, 2, 7})                                    # as `after` does before the creates; 7: left by a crash
    again = Reservations(state, user="ops")         # a restarted controller knows what it made
    assert again.live == {1, 2, 7}
    # 1 still checkpoints (followed); 2 was requeued by the controller this round (kept until its release); 7 is gone
    acts = again.wanted([(Action(Verb.REQUEUE_HOLD, (2,), "x"), "done")], {1, 2}, {}, observed, {1}, {}, 5)
    assert [(a.verb, a.job_ids) for a in acts] == [(Verb.UNRESERVE, (7,))]
    acts = again.wanted([], {1, 2}, {}, {1: _obs("PENDING"), 2: _obs("PENDING")}, set(), {}, 5)  # both released now
    assert [(a.verb, a.job_ids) for a in acts] == [
        (Verb.UNRESERVE, (1,)), (Verb.UNRESERVE, (2,)), (Verb.UNRESERVE, (7,))]
    state.close()


# ---------------------------------------------------------------------- on Slurm
@pytest.fixture(scope="module", params=version_test_versions(), ids=lambda v: f"slurm{v}")
def cluster(request):
    yield from cluster_up("shockwave-reserve-", version=request.param, gpus_per_node=4, cpus_per_node=8)


def _sbatch(c, gres: str, *args: str) -> int:
    out = c.run(["sbatch", "--parsable", "--chdir=/", "--output=/dev/null", f"--gres={gres}", *args, "--wrap", SLEEP])
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def _round(b, job: int, n: int) -> None:
    view = b.observe()
    decision = RoundDecision(run=(job,), placement={job: {GPU: n}}, nodes={job: ("node2",)})
    b.apply(check_decision(view, decision))


@pytest.mark.slurm
@pytest.mark.parametrize("reserve", [True, False], ids=["reserved", "unreserved"])
def test_an_arrival_does_not_take_the_gpus_a_growing_job_restarts_on(cluster, reserve, monkeypatch):
    c, root = cluster, make_root("shockwave-reserve-")
    if not reserve:  # the race as it was: nothing kept for the restart
        monkeypatch.setattr(Reservations, "wanted", lambda *a, **k: [])
    b = _backend(_config(c, root))
    jobs = [_sbatch(c, "gpu:4", "--nodelist=node1"), _sbatch(c, "gpu:2", "--nodelist=node2")]   # foreign fillers
    try:
        assert [_running_at(c, j, n) for j, n in zip(jobs, (4, 2), strict=True)]
        el = _sbatch(c, "gpu:1", "--comment=shockwave epochs=5 bs=8 gpus=1-2")   # Slurm starts it on node2
        jobs.append(el)
        assert _running_at(c, el, 1).nodes == "node2"
        _round(b, el, 2)                                           # held, signalled; its node kept from now
        assert _job(c, el).held
        arrival = _sbatch(c, "gpu:1")                              # foreign: no round holds it
        jobs.append(arrival)
        if not reserve:
            assert _running_at(c, arrival, 1).nodes == "node2"     # the race: it takes the free GPU at once
            return
        assert ours(c.cli) == {el}
        runs = _job(c, el).restart_count
        wait_for(lambda: _round(b, el, 2) or _job(c, el).restart_count > runs, 20, what="requeued after the grace")
        assert _job(c, arrival).state == "PENDING"                 # not on the GPU the requeue freed
        wait_for(lambda: _job(c, el).state == "PENDING", 20, what="pending after its requeue")
        _round(b, el, 2)                                           # updated, released, then its reservation deleted
        j = _running_at(c, el, 2)
        assert j.nodes == "node2" and _job(c, arrival).state == "PENDING"
        assert ours(c.cli) == set()
        done = [r["verb"] for r in reversed(b.state.actions(job_id=el, status="done"))]
        assert done.index("reserve") < done.index("requeue_hold") < done.index("release") < done.index("unreserve")
        # uninstall deletes a restart reservation left behind, never an admin's
        for name in ("shockwave-restart-999999", "admin-maint"):
            out = c.run(["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now",
                         "Duration=5", "Nodes=node1", "Users=root", "Flags=IGNORE_JOBS,OVERLAP"])
            assert out.returncode == 0, out.stderr
        b.state.close()
        assert uninstall(b.cfg, cli=c.cli)["unreserved"] == ["999999"]
        assert "ReservationName=admin-maint" in c.run(["scontrol", "--oneliner", "show", "reservation"]).stdout
    finally:
        c.run(["scontrol", "delete", "ReservationName=admin-maint"])
        c.run(["scancel", *map(str, jobs)])
        wait_for(lambda: not [j for j in c.cli.squeue_jobs() if j.state in ("RUNNING", "COMPLETING")], 30,
                 what="the cluster empty for the next test")



# -- kill -9 of the controller right after a Slurm call: a child process runs one round and SIGKILLs itself
def _child(conf: str, job: int, n: int, token: str) -> None:
    die_after(token)
    _round(_backend(Path(conf)), job, n)


def _killed_round(conf: Path, job: int, n: int, token: str) -> None:
    killed(f"from tests.test_reservations_slurm import _child; _child({str(conf)!r}, {job}, {n}, {token!r})")


@pytest.mark.slurm
def test_kill9_after_the_reservation_and_after_the_release_the_job_restarts_grown_and_none_is_left(cluster):
    c, root = cluster, make_root("shockwave-reserve-k9-")
    conf = _config(c, root)
    jobs = [_sbatch(c, "gpu:4", "--nodelist=node1"), _sbatch(c, "gpu:2", "--nodelist=node2")]
    try:
        assert [_running_at(c, j, n) for j, n in zip(jobs, (4, 2), strict=True)]
        el = _sbatch(c, "gpu:1", "--comment=shockwave epochs=5 bs=8 gpus=1-2")
        jobs.append(el)
        _running_at(c, el, 1)
        _killed_round(conf, el, 2, "create reservation")           # held, signalled, reserved: killed right after
        assert ours(c.cli) == {el} and _job(c, el).held
        b = _backend(conf)                                          # a new controller: the reservation in its state
        runs = _job(c, el).restart_count
        wait_for(lambda: _round(b, el, 2) or _job(c, el).restart_count > runs, 20, what="requeued after the grace")
        assert ours(c.cli) == {el}                                  # kept while the job is on its way
        wait_for(lambda: _job(c, el).state == "PENDING", 20, what="pending after its requeue")
        b.state.close()
        _killed_round(conf, el, 2, "scontrol release")             # released, killed before the delete
        time.sleep(2)
        j = _job(c, el)
        assert j.state == "PENDING" and not j.held and j.gpus == 2 and ours(c.cli) == {el}   # the reservation waits
        _round(_backend(conf), el, 2)                               # the next controller deletes it: the job starts
        assert _running_at(c, el, 2).nodes == "node2" and ours(c.cli) == set()
    finally:
        c.run(["scancel", *map(str, jobs)])
        wait_for(lambda: not [j for j in c.cli.squeue_jobs() if j.state in ("RUNNING", "COMPLETING")], 30,
                 what="the cluster empty for the next test")
