"""Nodes (solver/nodes.py): each gang on one node, running jobs stay, moves only when a gang fits nowhere else; the
simulator with nodes (sim/cluster.py `gpus_per_node`) and plain Slurm's backfill on nodes."""
import random

import pytest

from solver import preemption
from solver.nodes import NO_NODE, USER_NODES, assign_nodes, moved
from solver.policies import make_policy
from solver.types import GPU, ClusterView, JobPlan, JobView, RoundDecision
from slurm_shockwave.controller.loop import RoundLoop
from shockwave_lab.sim.cluster import SimulatedCluster
from tests.helpers import random_workload, table


def jv(jid, gpus, nodes=(), gpu_type=GPU, left=1000.0, run_time=3600.0, restarts=0):
    """A job with `left` seconds of work; when it has `nodes`, running there for `run_time` s."""
    return JobView(job_id=jid, arrival_time=0.0, num_gpus=gpus, batch_size=32, epochs_done=0, total_epochs=1,
                   samples_per_epoch=100, steps_done=0, total_steps=left, throughput=1.0,
                   ran_last_round=bool(nodes), nodes=tuple(nodes), run_time=run_time if nodes else 0.0,
                   restarts=restarts)


def view(jobs, nodes):
    nodes = {n: (GPU, g) if isinstance(g, int) else g for n, g in nodes.items()}
    total = sum(g for _t, g in nodes.values())
    caps: dict = {}
    for t, g in nodes.values():
        caps[t] = caps.get(t, 0) + g
    return ClusterView(now=0.0, round_index=3, round_length=120.0, num_gpus=total, jobs=tuple(jobs),
                       capacity=caps, nodes=nodes)


def decided(v, run, nodes=None):
    by = {j.job_id: j for j in v.jobs}
    return RoundDecision(run=tuple(run), plans={j: JobPlan(j, rule="market", next_offset=0) for j in run},
                         placement={j: {GPU: by[j].num_gpus} for j in run}, nodes=nodes or {})


def check(v, d):
    """Every running job on nodes of its type, each node within its GPUs."""
    used: dict = {}
    for jid in d.run:
        on = d.nodes[jid]
        (t, g), = d.placement[jid].items()
        assert all(v.nodes[n][0] == t for n in on) and g % len(on) == 0
        for n in on:
            used[n] = used.get(n, 0) + g // len(on)
    assert all(used[n] <= v.nodes[n][1] for n in used)


def test_without_nodes_the_decision_is_unchanged():
    v = ClusterView(now=0.0, round_index=0, round_length=120.0, num_gpus=4, jobs=(jv(1, 2),))
    d = decided(v, [1])
    assert assign_nodes(v, d) is d


def test_running_jobs_stay_and_new_ones_go_to_the_fullest_node_with_room():
    v = view([jv(1, 2, ("b",)), jv(2, 1, ("a",)), jv(3, 1), jv(4, 4)], {"a": 4, "b": 4, "c": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3, 4]))
    assert d.nodes[1] == ("b",) and d.nodes[2] == ("a",)
    assert d.nodes[4] == ("c",)                 # the only whole node
    assert d.nodes[3] == ("b",)                 # a has 3 free, b 2: b is the best fit
    check(v, d)
    assert moved(v, d) == []


def test_best_fit_prefers_the_node_with_fewest_free_gpus():
    v = view([jv(1, 3, ("a",)), jv(2, 2, ("b",)), jv(3, 1)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3]))
    assert d.nodes[3] == ("a",)                 # a has 1 free, b 2
    check(v, d)


def test_a_gang_that_fits_no_node_moves_the_fewest_gpus_when_moves_are_allowed():
    # a: two 1-GPU jobs (2 free), b: one 2-GPU job and one 1-GPU job (1 free), c: one 1-GPU job (3 free)
    v = view([jv(1, 1, ("a",)), jv(2, 1, ("a",)), jv(3, 2, ("b",)), jv(4, 1, ("b",)), jv(5, 1, ("c",)),
              jv(6, 4)], {"a": 4, "b": 4, "c": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3, 4, 5, 6]))
    assert set(d.run) == {1, 2, 3, 4, 5, 6}
    assert d.nodes[6] == ("c",)                 # moving job 5 (1 GPU) is the cheapest room
    assert moved(v, d) == [5] and d.nodes[5] in (("a",), ("b",))
    check(v, d)


def test_a_job_within_its_last_round_of_work_is_not_moved():
    from solver.nodes import KEPT, unmovable
    # job 1 (a) has 60 s of work left, within its last 120-s round: moving it is wasted; job 2 (b) is moved instead
    v = view([jv(1, 1, ("a",), left=60.0), jv(2, 1, ("b",)), jv(3, 4)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3]))
    assert moved(v, d) == [2] and d.nodes[3] == ("b",) and d.nodes[2] == ("a",)
    assert unmovable(v, decided(v, [1, 2, 3])) == {1: 60.0}
    # both within their last round: the gang waits that round, and its reason names the job that stays and why
    v = view([jv(1, 1, ("a",), left=60.0), jv(2, 1, ("b",), left=90.0), jv(3, 4)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3]))
    assert set(d.run) == {1, 2} and moved(v, d) == [] and d.plans[3].next_offset == 1
    assert d.plans[3].reason == NO_NODE.format(n=4) + KEPT.format(job=1, left=60.0)
    assert "(60 s left) would be wasted" in d.plans[3].reason
    # without the gate (the reference's semantics) it is moved
    assert 3 in assign_nodes(v, decided(v, [1, 2, 3]), gated=False).run
    # and so is a job past the last round it was first found in (preemption.LastRounds): job 1 is moved
    d = assign_nodes(v, decided(v, [1, 2, 3]), outlived=frozenset({1}))
    assert moved(v, d) == [1] and d.nodes[3] == ("a",) and unmovable(v, decided(v, [1, 2, 3]), {1}) == {2: 90.0}
    # the work left is the least of the plan's prediction and the view's (preemption.work_left_s)
    from dataclasses import replace
    planned = decided(v, [1, 2, 3])
    planned = replace(planned, plans={**planned.plans, 1: JobPlan(1, next_offset=0, predicted_remaining_s=600.0),
                                      2: JobPlan(2, next_offset=0, predicted_remaining_s=600.0)})
    assert 3 not in assign_nodes(v, planned).run                     # 60 and 90 s by the view
    v = view([jv(1, 1, ("a",)), jv(2, 1, ("b",)), jv(3, 4)], {"a": 4, "b": 4})   # 1,000 s by the view
    planned = replace(planned, plans={**planned.plans, 1: JobPlan(1, next_offset=0, predicted_remaining_s=50.0)})
    assert moved(v, assign_nodes(v, planned)) == [2]                  # 50 s by the plan: job 1 stays
    # a job that has run only minutes (the restart bound would keep it from a preemption) may still be moved
    v = view([jv(1, 1, ("a",), run_time=100.0, restarts=1), jv(3, 4)], {"a": 4, "b": 4})
    assert moved(v, assign_nodes(v, decided(v, [1, 3]))) == []      # room on b without a move
    v = view([jv(1, 1, ("a",), run_time=100.0, restarts=1), jv(2, 1, ("b",), left=30.0), jv(3, 4)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3]))
    assert moved(v, d) == [1] and d.nodes[3] == ("a",)


def test_without_moves_the_gang_waits_with_a_reason_and_the_rest_runs():
    v = view([jv(1, 1, ("a",)), jv(2, 1, ("b",)), jv(3, 4), jv(4, 1)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3, 4]), moves=False)
    assert set(d.run) == {1, 2, 4} and 3 not in d.placement and 3 not in d.nodes
    assert d.plans[3].rule == "" and d.plans[3].reason == NO_NODE.format(n=4) and d.plans[3].next_offset == 1
    assert d.nodes[1] == ("a",) and d.nodes[2] == ("b",)
    check(v, d)


def test_a_job_whose_user_chose_its_nodes_runs_there_or_not_at_all_and_is_never_moved():
    from dataclasses import replace
    # 1 runs on a; 2 (its user's -w b) and 3 (-w a) are pending; 4, a 4-GPU gang, needs a whole node
    v = view([jv(1, 2, ("a",)), replace(jv(2, 3), allowed_nodes=("b",)), replace(jv(3, 3), allowed_nodes=("a",)),
              jv(4, 4)], {"a": 4, "b": 4, "c": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3, 4]))
    assert d.nodes[2] == ("b",) and d.nodes[1] == ("a",) and d.nodes[4] == ("c",)
    assert 3 not in d.run and d.plans[3].reason == USER_NODES.format(nodes="a", n=3)   # a has 2 free: it waits
    check(v, d)
    # a gang that fits no node moves others, never a job on the nodes its user chose
    v = view([replace(jv(1, 1, ("a",)), allowed_nodes=("a",)), jv(2, 1, ("b",)), jv(3, 4)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3]))
    assert d.nodes[1] == ("a",) and d.nodes[3] == ("b",) and d.nodes[2] == ("a",) and moved(v, d) == [2]
    v = view([replace(jv(1, 1, ("a",)), allowed_nodes=("a",)), replace(jv(2, 1, ("b",)), allowed_nodes=("b",)),
              jv(3, 4)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2, 3]))
    assert set(d.run) == {1, 2} and d.plans[3].reason == NO_NODE.format(n=4) and moved(v, d) == []
    # nodes the view does not list (down, another partition) or of another type: it waits
    v = view([replace(jv(1, 1), allowed_nodes=("z",))], {"a": 4})
    assert assign_nodes(v, decided(v, [1])).run == ()


def test_a_gang_larger_than_a_node_takes_whole_free_nodes():
    v = view([jv(1, 8), jv(2, 2, ("a",))], {"a": 4, "b": 4, "c": 4})
    d = assign_nodes(v, decided(v, [1, 2]))
    assert d.nodes[1] == ("b", "c") and d.nodes[2] == ("a",)
    check(v, d)
    v2 = view([jv(1, 8), jv(2, 1, ("b",))], {"a": 4, "b": 4, "c": 4})
    d2 = assign_nodes(v2, decided(v2, [1, 2]))          # only two nodes whole after job 2: 8 GPUs fit there
    assert d2.nodes[1] == ("a", "c")


def test_nodes_the_policy_gave_are_kept():
    v = view([jv(1, 1), jv(2, 1)], {"a": 4, "b": 4})
    d = assign_nodes(v, decided(v, [1, 2], nodes={1: ("b",), 2: ("b",)}))
    assert d.nodes == {1: ("b",), 2: ("b",)}


def test_gangs_only_go_to_nodes_of_their_type():
    nodes = {"k1": ("k80", 4), "v1": ("v100", 4)}
    v = view([jv(1, 4), jv(2, 2)], nodes)
    d = RoundDecision(run=(1, 2), placement={1: {"k80": 4}, 2: {"v100": 2}})
    d = assign_nodes(v, d)
    assert d.nodes == {1: ("k1",), 2: ("v1",)}


@pytest.mark.parametrize("seed", range(30))
def test_random_rounds_never_overfill_a_node_and_move_only_what_they_report(seed):
    rng = random.Random(seed)
    nodes = {f"n{i}": 4 for i in range(rng.randint(2, 6))}
    free, jobs = dict(nodes), []
    for jid in range(rng.randint(3, 20)):
        g = rng.choice([1, 1, 2, 4])
        room = [n for n, f in free.items() if f >= g]
        if room and rng.random() < 0.6:
            n = rng.choice(room)
            free[n] -= g
            jobs.append(jv(jid, g, (n,)))
        else:
            jobs.append(jv(jid, g))
    v = view(jobs, nodes)
    run, left = [], sum(nodes.values())
    for j in sorted(jobs, key=lambda j: rng.random()):
        if j.num_gpus <= left:
            run.append(j.job_id)
            left -= j.num_gpus
    d = assign_nodes(v, decided(v, run), moves=bool(seed % 2))
    check(v, d)
    by = {j.job_id: j for j in jobs}
    stayed = [j for j in d.run if by[j].nodes and d.nodes[j] == by[j].nodes]
    assert set(moved(v, d)) == {j for j in d.run if by[j].nodes} - set(stayed)
    if not seed % 2:
        assert moved(v, d) == []
    # sizes 1, 2, 4 on 4-GPU nodes always pack when moves are allowed
    if seed % 2:
        assert set(d.run) == set(run)


THR = table({("ResNet-18", 32, g): 10.0 * g for g in (1, 2, 4, 8)} | {("LM", 10, g): 5.0 * g for g in (1, 2, 4, 8)}
            | {("ResNet-18", 64, g): 18.0 * g for g in (1, 2, 4, 8)} | {("LM", 20, g): 9.0 * g for g in (1, 2, 4, 8)})


@pytest.mark.parametrize("policy", ["shockwave-edf", "slurm-multifactor", "max_min_fairness", "pollux"])
def test_the_simulator_with_nodes_runs_every_job_within_each_node(policy):
    jobs = random_workload(1, 24, 4, THR)        # seed 1: without the rule a job is moved within its last round
    sim = SimulatedCluster(jobs, THR, 16, gpus_per_node=4)
    gated = policy == "shockwave-edf"                  # the controller's gate: a move must pass it too
    loop = RoundLoop(sim, make_policy(policy), preemption_cost_s=20.0 if gated else None)
    seen = []
    loop.on_round = lambda rec: seen.append((rec, loop._outlived))
    loop.run()
    assert len(sim.finished) == 24
    assert all(rec.view.nodes == {f"n{i:02d}": (GPU, 4) for i in range(4)} for rec, _ in seen)
    for rec, outlived in seen:
        check(rec.view, rec.decision)
        jobs = {j.job_id: j for j in rec.view.jobs}
        for jid in moved(rec.view, rec.decision):   # never a move within a job's last round of work (on its count)
            if gated:                               # (its predicted time left: the gate's own rule), unless it
                left = preemption.work_left_s(jobs[jid], rec.decision.plans.get(jid))   # outlived that round
                assert not preemption.wasted(left, 120.0) or jid in outlived
    if policy == "slurm-multifactor":
        assert loop.moves == 0                  # plain Slurm never moves a running job


def test_the_simulator_charges_a_move_as_a_restart():
    class Mover:
        name = "mover"

        def decide(self, v):
            j = v.jobs[0]
            to = ("n01",) if j.nodes == ("n00",) else ("n00",)
            return RoundDecision(run=(j.job_id,), placement={j.job_id: {GPU: 1}}, nodes={j.job_id: to})
    jobs = random_workload(3, 1, 1, THR)
    stay = SimulatedCluster(jobs, THR, 8, gpus_per_node=4)
    RoundLoop(stay, make_policy("fifo")).run()
    move = SimulatedCluster(jobs, THR, 8, gpus_per_node=4)
    RoundLoop(move, Mover()).run()
    assert stay.finished[0].restarts == 0
    assert move.finished[0].restarts == move.finished[0].rounds_run - 1 > 0
    assert move.finished[0].finish_time > stay.finished[0].finish_time


def test_the_simulator_rejects_a_node_overfilled():
    class Crowd:
        name = "crowd"

        def decide(self, v):
            run = tuple(j.job_id for j in v.jobs[:2])
            return RoundDecision(run=run, placement={j: {GPU: 4} for j in run}, nodes={j: ("n00",) for j in run})
    from tests.helpers import job
    sim = SimulatedCluster([job(0, 100, gpus=4), job(1, 100, gpus=4)], THR, 8, gpus_per_node=4)
    view_ = sim.observe()
    with pytest.raises(ValueError, match="over their GPUs"):
        sim.apply(Crowd().decide(view_))


def test_gpus_per_node_must_divide_each_type():
    with pytest.raises(ValueError, match="does not divide"):
        SimulatedCluster(random_workload(1, 2, 1, THR), THR, 6, gpus_per_node=4)


def test_a_job_left_out_for_lack_of_a_node_says_so_in_its_reason():
    from slurm_shockwave.controller.reasons import annotate
    v = view([jv(1, 1, ("a",)), jv(2, 1, ("b",)), jv(3, 4)], {"a": 4, "b": 4})
    d = annotate(v, assign_nodes(v, decided(v, [1, 2, 3]), moves=False), "authoritative")
    assert d.plans[3].reason.startswith("deferred (no node has room for its 4-GPU gang this round), planned at")
    v = view([jv(1, 1, ("a",), left=45.0), jv(2, 1, ("b",), left=45.0), jv(3, 4)], {"a": 4, "b": 4})
    d = annotate(v, assign_nodes(v, decided(v, [1, 2, 3])), "authoritative")
    assert d.plans[3].reason.startswith("deferred (no node has room for its 4-GPU gang this round; job 1 stays where "
                                        "it runs, a move within its last round of work (45 s left) would be wasted)")
