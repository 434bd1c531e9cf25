"""Jobs that may not be preempted (solver/pinned.py): once running, such a job keeps its GPUs, count, type and nodes
whatever the policy decides, on every policy; the simulator honours a job spec's `preemptible: false`; the controller
reads Slurm's --no-requeue as such (the real-Slurm test: tests/test_controller_slurm.py)."""
from dataclasses import replace

import pytest

from solver.nodes import assign_nodes, moved
from solver.pinned import WHY, pin, pinned
from solver.policies import make_policy
from solver.types import GPU, ClusterView, JobPlan, JobView, RoundDecision
from slurm_shockwave.backends.base import check_decision
from slurm_shockwave.controller.loop import RoundLoop
from slurm_shockwave.controller.reasons import annotate
from slurm_shockwave.slurm.enact import Observed, Verb, reconcile
from shockwave_lab.sim.cluster import SimulatedCluster
from shockwave_lab.workload.spec import read_spec
from tests.helpers import random_workload, table


def jv(jid, gpus, ran=False, preemptible=True, running_gpus=None, running_type=None, nodes=(), **kw):
    return JobView(job_id=jid, arrival_time=0.0, num_gpus=gpus, batch_size=32, epochs_done=0, total_epochs=1,
                   samples_per_epoch=100, steps_done=0, total_steps=5000.0, throughput=1.0, ran_last_round=ran,
                   run_time=600.0 if ran else 0.0, preemptible=preemptible, nodes=tuple(nodes),
                   running_gpus=running_gpus if running_gpus is not None else (gpus if ran else None),
                   running_type=running_type, **kw)


def cluster(jobs, capacity=None, nodes=None):
    capacity = capacity or {GPU: 4}
    return ClusterView(now=600.0, round_index=5, round_length=120.0, num_gpus=sum(capacity.values()),
                       jobs=tuple(jobs), capacity=capacity, nodes=nodes or {})


def decided(v, run, placement=None):
    d = RoundDecision(run=tuple(run), plans={j: JobPlan(j, rule="deadline", next_offset=0) for j in run},
                      placement=placement or {})
    return check_decision(v, d)


def test_a_pinned_job_the_policy_drops_runs_on_and_the_last_start_waits():
    v = cluster([jv("a", 2, ran=True, preemptible=False), jv("b", 2), jv("c", 2)])
    d = pin(v, decided(v, ["b", "c"]))
    assert d.run == ("a", "b") and d.placement["a"] == {GPU: 2}
    assert d.plans["a"].rule == "pinned" and d.plans["a"].reason == WHY
    assert d.plans["c"].rule == "" and d.plans["c"].next_offset == 1      # taken out: it waits
    assert check_decision(v, d) is not None
    assert pinned(v) == {"a"}


def test_starts_go_first_then_running_jobs_that_may_be_preempted_never_another_pinned_one():
    # "b" (pinned) ran on 2 and "r" on 2; the policy runs "r" grown to 4 (an elastic count) and drops both pinned
    r = jv("r", 2, ran=True, throughput_by_gpus={2: 2.0, 4: 4.0})
    v = cluster([jv("a", 2, ran=True, preemptible=False), jv("b", 2, ran=True, preemptible=False), r,
                 jv("n", 2)], capacity={GPU: 6})
    d = pin(v, decided(v, ["r", "n"], {"r": {GPU: 4}, "n": {GPU: 2}}))
    assert set(d.run) == {"a", "b"} and sum(sum(p.values()) for p in d.placement.values()) == 4
    v = cluster([jv("a", 2, ran=True, preemptible=False), jv("r", 2, ran=True), jv("n", 2)])
    d = pin(v, decided(v, ["r", "n"]))
    assert d.run == ("a", "r")                                          # the start went, not the running job


def test_a_pinned_job_keeps_the_count_and_type_it_runs_on():
    e = jv("e", 4, ran=True, preemptible=False, running_gpus=2, running_type="k80",
           throughput_by_gpus={1: 1.0, 2: 2.0, 4: 4.0}, gpus_range=(1, 4))
    v = cluster([e, jv("x", 2)], capacity={"v100": 4, "k80": 4})
    d = pin(v, decided(v, ["e", "x"], {"e": {"v100": 4}, "x": {"k80": 2}}))    # the policy moved and grew it
    assert d.placement["e"] == {"k80": 2} and d.plans["e"].gpus == 2
    assert d.placement["x"] == {"k80": 2}
    same = decided(v, ["e"], {"e": {"k80": 2}})
    assert pin(v, same) is same                                         # already as it ran: untouched


def test_a_job_that_may_be_preempted_is_not_pinned_and_a_waiting_pinned_job_is_scheduled_like_any_other():
    v = cluster([jv("a", 2, ran=True), jv("w", 2, preemptible=False), jv("b", 4)])
    d = decided(v, ["b"])
    assert pin(v, d) is d and not pinned(v)


def test_a_pinned_job_is_never_moved_to_make_room_for_a_gang():
    nodes = {"n0": (GPU, 4), "n1": (GPU, 4)}
    q = jv("q", 2, ran=True, nodes=["n1"], allowed_nodes=("n1",))                # its user's node: never moved
    jobs = [jv("p", 1, ran=True, preemptible=False, nodes=["n0"]), q, jv("g", 4)]
    v = cluster(jobs, capacity={GPU: 8}, nodes=nodes)
    d = assign_nodes(v, decided(v, ["p", "q", "g"]), moves=True, gated=False)
    assert "g" not in d.run and not moved(v, d)                         # only "p" could have moved: it stays
    jobs[0] = replace(jobs[0], preemptible=True)
    v = cluster(jobs, capacity={GPU: 8}, nodes=nodes)
    d = assign_nodes(v, decided(v, ["p", "q", "g"]), moves=True, gated=False)
    assert "g" in d.run and moved(v, d) == ["p"]


def test_the_reason_says_it_runs_until_it_ends():
    v = cluster([jv("a", 2, ran=True, preemptible=False), jv("b", 4)])
    d = annotate(v, pin(v, decided(v, ["b"])), "authoritative")
    assert d.plans["a"].reason == f"running; {WHY}" and d.plans["a"].rule == "pinned"


def test_the_enactor_never_stops_a_job_submitted_with_no_requeue():
    def obs(jid, requeue):
        return Observed(jid, "RUNNING", False, "", 0, 0, 1, running_for=900.0, requeue=requeue)
    acts = reconcile([obs(1, False), obs(2, True)], set(), "authoritative", 10000, 1000.0, {}, 1.0,
                     lambda *_: False)
    stopped = {j for a in acts if a.verb in (Verb.SIGNAL, Verb.HOLD, Verb.REQUEUE_HOLD) for j in a.job_ids}
    assert stopped == {2}


THR = table({("ResNet-18", 32, g): 10.0 * g for g in (1, 2, 4, 8)} | {("LM", 10, g): 5.0 * g for g in (1, 2, 4, 8)}
            | {("ResNet-18", 64, g): 18.0 * g for g in (1, 2, 4, 8)} | {("LM", 20, g): 9.0 * g for g in (1, 2, 4, 8)})


@pytest.mark.parametrize("policy,gated", [("shockwave-edf", True), ("gavel", False), ("pollux", False)])
def test_the_simulator_never_preempts_resizes_or_moves_a_job_the_spec_says_may_not_be_preempted(policy, gated):
    base = random_workload(2, 24, 4, THR)
    rigid = {j.job_id for j in base if j.job_id % 2 == 0}
    jobs = [replace(j, preemptible=False) if j.job_id in rigid else j for j in base]

    def simulate(js):
        sim = SimulatedCluster(js, THR, 8, gpus_per_node=4)
        loop = RoundLoop(sim, make_policy(policy), keep_records=True, preemption_cost_s=20.0 if gated else None)
        loop.run()
        assert len(sim.finished) == 24
        return {r.job_id: r for r in sim.finished}, loop.records

    free, _ = simulate(base)
    done, records = simulate(jobs)
    assert sum(free[j].restarts for j in rigid) > 0                    # without the flag they are preempted
    assert all(done[j].restarts == 0 for j in rigid)
    for j in rigid:                                                    # once started, in every round to its end
        rounds = [i for i, rec in enumerate(records) if j in rec.decision.run]
        assert rounds == list(range(rounds[0], rounds[-1] + 1))
        shapes = {(tuple(records[i].decision.placement[j].items()), tuple(records[i].decision.nodes.get(j, ())))
                  for i in rounds}
        assert len(shapes) == 1, (j, shapes)                           # one type, count and set of nodes


def test_the_job_spec_field_reaches_the_view(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"model": "ResNet-18", "batch_size": 32, "epochs": 1, "preemptible": false}\n'
                    '{"model": "ResNet-18", "batch_size": 32, "epochs": 1}\n')
    sim = SimulatedCluster(read_spec(path), THR, 4)
    views = {v.job_id: v.preemptible for v in sim.observe().jobs}
    assert views == {0: False, 1: True}
