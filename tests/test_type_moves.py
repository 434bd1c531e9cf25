"""Moves to a faster GPU type (solver/type_moves.py): a running job moves when the time it saves pays for two
restarts, within the restart bound, onto idle GPUs or those of a start that loses less than it saves; never a job
its user pinned, a stopping one, a running job displaced.  On Slurm (with the site's `gpu_type_speeds`) the views carry
the speeds and a move is checkpointed and requeued like a node move (slurm/gpu_types.py)."""
from __future__ import annotations

from dataclasses import replace

from solver.placement import check_placement
from solver.type_moves import move, unpinned
from solver.types import ClusterView, JobPlan, RoundDecision
from tests.helpers import mkjob

CAP = {"v100": 2, "k80": 2}


def _running(i, total=20, run_time=3000.0, restarts=0, on="k80", by_type=None):
    j = mkjob(i, total=total, run_time=run_time)                     # 100 s per epoch on v100 (its reference)
    by_type = by_type or {"v100": j.throughput, "k80": j.throughput / 4}
    return replace(j, ran_last_round=True, running_type=on, gpu_type=on, running_gpus=1, restarts=restarts,
                   throughput_by_type=by_type)


def _start(i, total):
    j = mkjob(i, total=total)
    return replace(j, throughput_by_type={"v100": j.throughput, "k80": j.throughput / 4})


def _view(jobs, cap=CAP):
    return ClusterView(now=0.0, round_index=0, round_length=120.0, num_gpus=sum(cap.values()), jobs=tuple(jobs),
                       capacity=cap)


def _decide(jobs, placement):
    return RoundDecision(run=tuple(placement), placement=placement,
                         plans={j.job_id: JobPlan(j.job_id, rule="deadline") for j in jobs})


def test_a_long_job_on_a_slow_type_moves_to_idle_faster_gpus_when_that_pays():
    a = _running(0)                                       # 2,000 s left on v100: 8,000 s on the k80 it runs on
    d = _decide([a], {0: {"k80": 1}})
    out, moved = move(_view([a]), d, 30.0)
    assert moved == {0: ("k80", "v100")} and out.placement == {0: {"v100": 1}}
    assert out.plans[0].resize.startswith("moves to v100 (from k80): saves 6000 s")
    check_placement(unpinned(_view([a]), moved), out)     # its user's limit: the types of its throughput_by_type
    assert move(_view([a]), d, 3_100.0)[1] == {}          # 6,000 s saved < two restarts of 3,100 s
    assert move(_view([a]), d, 30.0, costs={0: 3_100.0})[1] == {}      # its own measured cost
    assert move(_view([a]), d, 30.0, fixed={0})[1] == {}                # stopping, or its count changed this round
    assert move(_view([a], {"k80": 4}), d, 30.0)[1] == {}               # one type: nothing faster


def test_the_restart_bound_the_last_round_and_the_users_type_keep_a_job_where_it_runs():
    young = _running(0, run_time=1_000.0)                 # one restart per 10 rounds (1,200 s) of its run
    often = _running(0, run_time=3_000.0, restarts=2)     # a third restart needs 3,600 s of run
    ending = replace(_running(0), steps_done=_running(0).total_steps - 1)
    pinned = _running(0, by_type={"k80": 1.0})           # its user asked for k80: only k80 listed
    for j in (young, often, ending, pinned):
        assert move(_view([j]), _decide([j], {0: {"k80": 1}}), 30.0)[1] == {}, j
    assert move(_view([_running(0, restarts=1)]), _decide([_running(0)], {0: {"k80": 1}}), 30.0)[1]


def test_a_start_on_the_faster_type_gives_way_only_when_it_loses_less_than_the_move_saves():
    cap = {"v100": 1, "k80": 2}
    a = _running(0)                                       # saves 6,000 s on v100
    short, long_ = _start(1, total=2), _start(2, total=200)    # 600 s and 60,000 s lost on k80
    out, moved = move(_view([a, short], cap), _decide([a, short], {0: {"k80": 1}, 1: {"v100": 1}}), 30.0)
    assert moved == {0: ("k80", "v100")} and out.placement == {0: {"v100": 1}, 1: {"k80": 1}}
    assert "saves 5400 s" in out.plans[0].resize
    d = _decide([a, long_], {0: {"k80": 1}, 2: {"v100": 1}})
    assert move(_view([a, long_], cap), d, 30.0) == (d, {})
    b = _running(3, on="v100")                            # a running job is never displaced
    d = _decide([a, b], {0: {"k80": 1}, 3: {"v100": 1}})
    assert move(_view([a, b], cap), d, 30.0) == (d, {})
    pinned = replace(short, gpu_type="v100", throughput_by_type={"v100": short.throughput})
    d = _decide([a, pinned], {0: {"k80": 1}, 1: {"v100": 1}})
    assert move(_view([a, pinned], cap), d, 30.0) == (d, {})    # a start its user pinned stays
    on_nodes = replace(short, allowed_nodes=("node1",))          # and one its user gave nodes (--nodelist)
    d = _decide([a, on_nodes], {0: {"k80": 1}, 1: {"v100": 1}})
    assert move(_view([a, on_nodes], cap), d, 30.0) == (d, {})


def test_on_slurm_the_speeds_reach_the_view_and_a_move_is_checkpointed_and_requeued(tmp_path):
    from slurm_shockwave.slurm.ownership import format_mark
    from tests.slurm_backend_fakes import fake_backend, me, sent, slurm_node
    from tests.test_slurm_gpu_types import _jobs

    jobs = _jobs()
    pinned, _constrained, free = jobs
    on_k80 = dict(comment="shockwave", partition="gpu", state="RUNNING", nodes="node2", start_time=1, requeue=True, held=False,
                  gres_detail=("gpu:k80:2(IDX:0-1)",), user_id=me())
    nodes = [slurm_node("node1", {"v100": 2}, ["v100"]), slurm_node("node2", {"k80": 2}, ["k80"])]
    for mode, speeds in (("authoritative", {"v100": 1.0, "k80": 0.25}), ("advisory", {"v100": 1.0, "k80": 0.25}),
                         ("authoritative", {"v100": 1.0})):
        root = tmp_path / f"{mode}{len(speeds)}"
        b = fake_backend(root, [replace(jobs[free], **on_k80), replace(jobs[pinned], **on_k80, job_id=pinned)],
                         nodes, mode=mode, clock=lambda: 4000.0)
        b.cfg = b.cfg.model_copy(update={"gpu_type_speeds": speeds})
        views = {j.job_id: j for j in b.observe().jobs}
        assert views[free].running_type == "k80" and views[free].gpu_type == "k80"
        if len(speeds) < 2:                                # a type without a speed: none listed, nothing moves
            assert views[free].throughput_by_type == {}
            continue
        thr = views[free].throughput                          # measured on the k80 it runs on
        assert views[free].throughput_by_type == {"v100": 4 * thr, "k80": thr}
        assert views[pinned].throughput_by_type == {"k80": views[pinned].throughput}    # its user's type only
        b.apply(RoundDecision(run=(free, pinned), placement={free: {"v100": 2}, pinned: {"k80": 2}},
                              plans={free: JobPlan(free, rule="deadline")}))
        moved = [(a.verb, a.value) for a in sent(b) if free in a.job_ids and a.verb in ("hold", "signal")]
        moved = [(v, x if v == "hold" else "a checkpoint signal") for v, x in moved]
        assert not [a for a in sent(b) if pinned in a.job_ids and a.verb in ("hold", "signal")]
        if mode == "authoritative":
            assert moved == [("hold", format_mark("held", "moving to v100")), ("signal", "a checkpoint signal")]
        else:
            assert moved == []
