"""A move on its way (slurm/moving.py): a running job a round moved to a faster GPU type is, from its requeue until it
runs again, seen where the move takes it (it ran the last round, on its new nodes and type), as the simulator sees
it; the next round keeps it there and releases it pinned there, instead of deciding it afresh as a waiting job
(the typed replay of 2026-12-07 08:43: job 8 moved from a K80 to a V100, then placed back on a K80)."""
from __future__ import annotations

from dataclasses import replace

from slurm_shockwave.slurm.moving import InFlight
from slurm_shockwave.slurm.ownership import format_mark
from solver.types import JobPlan, RoundDecision
from tests.slurm_backend_fakes import fake_backend, me, sent, slurm_job, slurm_node

SPEEDS = {"v100": 1.0, "k80": 0.25}
NODES = [slurm_node("node1", {"v100": 2}, ["v100"]), slurm_node("node2", {"k80": 2}, ["k80"])]
ON_K80 = slurm_job(7, state="RUNNING", nodes="node2", start_time=1, gres_detail=("gpu:k80:2(IDX:0-1)",), gpus=2,
                   gpus_per_node=2, user_id=me(), requeue=True, comment="shockwave bs=32 samples=3200 epochs=40",
                   gpu_request="gres/gpu:2")
REQUEUED = replace(ON_K80, state="PENDING", held=True, restart_count=1, nodes="", gres_detail=(), start_time=None,
                   admin_comment=format_mark("held", "moving to node1"))
TO_V100 = RoundDecision(run=(7,), placement={7: {"v100": 2}}, nodes={7: ("node1",)},
                        plans={7: JobPlan(7, rule="deadline")})


def _backend(root, job):
    b = fake_backend(root, [job], NODES, mode="authoritative", clock=lambda: 4000.0)
    b.cfg = b.cfg.model_copy(update={"gpu_type_speeds": SPEEDS})
    return b


def _view(b):
    return {j.job_id: j for j in b.observe().jobs}[7]


def test_a_requeued_moving_job_is_seen_on_its_new_nodes_and_type_and_released_there(tmp_path):
    b = _backend(tmp_path, ON_K80)
    before = _view(b)
    assert before.running_type == "k80" and before.ran_last_round
    b.apply(TO_V100)                                              # the move: held and signalled
    assert [a.verb for a in sent(b) if 7 in a.job_ids][:2] == ["hold", "signal"]
    assert b.moving.by_job == {"7": {"nodes": ["node1"], "type": "v100", "restarts": 0, "gpus": 2, "until": 4150.0}}
    b.cli.jobs = [replace(REQUEUED, state="REQUEUED")]          # the wrapper's requeue, on its way to PENDING
    v = _view(b)
    assert (v.ran_last_round, v.nodes, v.running_type, v.gpu_type) == (True, ("node1",), "v100", "v100")
    b.cli.jobs = [REQUEUED]                                       # checkpointed, requeued held
    v = _view(b)
    assert (v.ran_last_round, v.nodes, v.running_type) == (True, ("node1",), "v100")
    assert v.throughput == v.throughput_by_type["v100"] == 4 * v.throughput_by_type["k80"]
    again = _view(_backend(tmp_path, REQUEUED))                   # a restarted controller: the state keeps the move
    assert (again.ran_last_round, again.nodes, again.running_type) == (True, ("node1",), "v100")
    b.apply(TO_V100)                                              # kept there: pinned, steered, released
    verbs = {a.verb: a.value for a in sent(b) if 7 in a.job_ids and a.verb in ("place_nodes", "place_tres", "release")}
    assert verbs.keys() == {"place_nodes", "place_tres", "release"} and "node1" in verbs["place_nodes"]
    assert "v100" in verbs["place_tres"]
    b.cli.jobs = [replace(REQUEUED, state="RUNNING", held=False, nodes="node1", gres_detail=("gpu:v100:2(IDX:0-1)",),
                          start_time=4000, admin_comment="")]
    v = _view(b)                                                  # running again: Slurm says where
    assert (v.ran_last_round, v.nodes, v.running_type) == (True, ("node1",), "v100") and b.moving.by_job == {}


def test_a_move_taken_back_or_not_yet_requeued_is_not_presented_and_junk_in_the_state_is_ignored(tmp_path):
    b = _backend(tmp_path, ON_K80)
    _view(b)
    b.apply(TO_V100)
    v = _view(b)                                                  # still running on the k80 (checkpointing)
    assert (v.nodes, v.running_type) == (("node2",), "k80") and b.moving.by_job
    b.cli.jobs = [REQUEUED]
    _view(b)
    b.apply(RoundDecision(run=(), placement={}))                  # the next round does not run it: a preemption
    assert b.moving.by_job == {}
    v = _view(b)
    assert not v.ran_last_round and v.nodes == () and v.running_type is None
    late = _backend(tmp_path / "late", ON_K80)                    # not started before its reservation ends
    _view(late)
    late.apply(TO_V100)
    late.cli.jobs, late.clock = [REQUEUED], lambda: 4151.0
    v = _view(late)
    assert not v.ran_last_round and late.moving.by_job == {}
    entry = {"nodes": ["node1"], "type": "v100", "restarts": 0, "gpus": 2, "until": 1}
    b.state.put(InFlight.KEY, {"7": {**entry, "nodes": "node1", "type": 3}, "8": [1], "x": None, "y": entry})
    assert InFlight(b.state).by_job == {}
    b.state.put(InFlight.KEY, {"7": entry, "y": entry})                  # a key that is no job id: dropped
    kept = InFlight(b.state)
    assert kept.by_job == {"7": entry}
    kept.started(b, {}, RoundDecision(), {7}, [])                        # and the next round reads it without fail
    assert kept.by_job == {"7": entry}
    b.state.put(InFlight.KEY, "junk")
    assert InFlight(b.state).by_job == {}
