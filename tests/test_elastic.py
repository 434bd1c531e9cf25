"""Elastic GPU counts in the decision core (solver/elastic.py, issue 34 part 2), no Slurm: idle GPUs lent to elastic
jobs and given back when the round needs them, fewer GPUs rather than none, every change paying for its restarts, a
job without a range never resized; the round loop's stage, its counters and reasons; the journal keeps it all."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from slurm_shockwave.backends.base import check_decision
from slurm_shockwave.controller.loop import RoundLoop
from slurm_shockwave.controller.reasons import annotate
from slurm_shockwave.journal.record import RoundRecord
from solver.elastic import counts, horizon, pays, size
from solver.placement import check_placement, place
from solver.policies.base import Policy
from solver.preemption import gate, held
from solver.types import RULES, ClusterView, JobPlan, JobView, RoundDecision
from tests.helpers import ScriptedViews

ROUND = 120.0
COST = 30.0
#: iterations/s of the whole job on 1, 2, 4, 8 GPUs: sublinear, like the reference's profiles
SCALING = {1: 10.0, 2: 18.0, 4: 32.0, 8: 56.0}


def jv(i, gpus=1, left_s=3600.0, elastic=True, ran=False, running=None, run_s=0.0, **kw) -> JobView:
    """A job with `left_s` seconds of work left on its `gpus` GPUs; elastic between 1 and 8 GPUs."""
    thr = SCALING[gpus]
    return JobView(job_id=i, arrival_time=0.0, num_gpus=gpus, batch_size=64, epochs_done=0, total_epochs=10,
                   samples_per_epoch=640, steps_done=0.0, total_steps=left_s * thr, throughput=thr,
                   throughput_by_gpus=dict(SCALING), gpus_range=(1, 8) if elastic else None, ran_last_round=ran,
                   running_gpus=running if running is not None else (gpus if ran else None), run_time=run_s, **kw)


def decided(view: ClusterView, run, plans=None) -> RoundDecision:
    plans = plans or {j: JobPlan(j, rule="deadline") for j in run}
    return check_decision(view, RoundDecision(run=tuple(run), plans=plans, window_rounds=20))


def sized(view, run, plans=None, **kw):
    d, out = size(view, decided(view, run, plans), COST, **kw)
    check_placement(view, d)  # every count a profiled one within capacity, on one type
    return d, out


def gpus(d: RoundDecision, jid) -> int:
    return sum(d.placement[jid].values())


def test_counts_and_the_payoff_rule():
    assert counts(jv(1, gpus=2)) == [1, 2, 4, 8]
    assert counts(jv(1, elastic=False)) == []  # a job without a range is never resized
    narrow = replace(jv(1, gpus=2), gpus_range=(2, 4))
    assert counts(narrow) == [2, 4]  # within its range only
    bad = replace(jv(1), throughput_by_gpus={2: math.nan, 4: -1.0, 8: 56.0})
    assert counts(bad) == [1, 8]  # a non-finite or non-positive throughput is no count
    assert pays(61.0, COST, running=True) and not pays(59.0, COST, running=True)  # the change and the way back
    assert pays(31.0, COST, running=False) and not pays(29.0, COST, running=False)  # starting: the way back only


def test_idle_gpus_go_to_an_elastic_job_and_never_to_a_rigid_one():
    view = ClusterView(0.0, 0, ROUND, 16, (jv("e"), jv("r", elastic=False)))
    d, out = sized(view, ["e", "r"])
    assert gpus(d, "r") == 1  # rigid: its own count, though 14 GPUs idle and its throughput per count is listed
    assert gpus(d, "e") == 8 and out["e"].before == 1 and out["e"].after == 8
    assert d.plans["e"].gpus == 8
    assert d.plans["e"].resize == "8 GPUs (asked 1): idle capacity; back to 1 when the queue grows"
    assert d.plans["e"].rule == "deadline"  # the policy's rule placed it; the lent GPUs are counted apart
    assert "elastic" in RULES


def test_spreading_gives_the_next_gpus_where_they_speed_up_most():
    """Two elastic jobs and 6 GPUs: each one's first step (1 -> 2: +0.8 of its speed per GPU) before either one's
    second (2 -> 4: +0.39 per GPU)."""
    view = ClusterView(0.0, 0, ROUND, 6, (jv("a"), jv("b")))
    d, _ = sized(view, ["a", "b"])
    assert sorted([gpus(d, "a"), gpus(d, "b")]) == [2, 4]  # 1+1 -> 2+2 (0.8 per GPU each) -> one to 4 (0.39)


def test_grown_jobs_give_gpus_back_when_the_round_needs_them():
    """A job that ran on 8 (asked 2) and a rigid newcomer of 4 on 8 GPUs: it goes down one step, to 4."""
    view = ClusterView(0.0, 5, ROUND, 8, (jv("e", gpus=2, ran=True, running=8, run_s=3000.0),
                                          jv("n", gpus=4, elastic=False)))
    d, out = sized(view, ["e", "n"])
    assert gpus(d, "n") == 4 and gpus(d, "e") == 4
    assert (out["e"].before, out["e"].after) == (8, 4)
    # with room, it keeps its count (no restart)
    view = ClusterView(0.0, 5, ROUND, 16, view.jobs)
    d, out = sized(view, ["e", "n"])
    assert gpus(d, "e") == 8 and out["e"].before == out["e"].after == 8


def test_a_change_must_pay_for_its_restarts():
    # 40 s of work left on 1 GPU: 8 GPUs would save 33 s; starting, that pays one restart (30 s), running not two
    assert gpus(sized(ClusterView(0.0, 0, ROUND, 8, (jv("s", left_s=40.0),)), ["s"])[0], "s") > 1
    running = ClusterView(0.0, 9, ROUND, 8, (jv("s", left_s=40.0, ran=True, run_s=5000.0),))
    d, out = sized(running, ["s"])
    assert gpus(d, "s") == 1 and not out
    # the restart bound: a running job restarted once that has run 60 s (less than 10 rounds) does not grow; one no
    # round started (Slurm started it on its own count before the round) grows as a start would, and so does one
    # that never restarted (its first change: no thrash to bound)
    view = ClusterView(0.0, 9, ROUND, 8, (jv("b", left_s=10000.0, ran=True, run_s=60.0, restarts=1),))
    assert gpus(sized(view, ["b"])[0], "b") == 1
    assert gpus(sized(view, ["b"], begun=frozenset({"b"}))[0], "b") == 8
    first = ClusterView(0.0, 9, ROUND, 8, (replace(view.jobs[0], restarts=0),))
    assert gpus(sized(first, ["b"])[0], "b") == 8
    # the GPUs the bound keeps from a running job go to the others (2 of 6 did idle: the shorter "b" won each tie of
    # speed-up, and its growth to 4 was then undone)
    view = ClusterView(0.0, 9, ROUND, 6, (jv("b", left_s=1000.0, ran=True, run_s=60.0, restarts=1),
                                          jv("n", left_s=10000.0)))
    d, _ = sized(view, ["b", "n"])
    assert (gpus(d, "b"), gpus(d, "n")) == (1, 4)
    # the loan's horizon: a waiting job planned next round bounds what a running job's growth saves (1 -> 8 on one
    # round: 120 s x (5.6 - 1) = 552 s, less than two restarts of 300 s); planned later, it pays
    jobs = (jv("r", left_s=10000.0, ran=True, run_s=5000.0), jv("w", gpus=8, elastic=False))
    view = ClusterView(0.0, 9, ROUND, 8, jobs)
    for offset, expected in ((1, 1), (2, 8)):
        plans = {"r": JobPlan("r", rule="deadline"), "w": JobPlan("w", next_offset=offset)}
        d = decided(view, ["r"], plans)
        assert horizon(view, d) == offset * ROUND
        assert gpus(size(view, d, COST, {"r": 300.0})[0], "r") == expected


def test_a_job_changed_less_than_a_round_ago_is_not_grown_again_while_it_runs():
    """Growing a running job whose count changed less than a round ago would waste that change (wasted_change): it
    keeps its count (2, though 6 GPUs idle), and one started small is not taken back up to its base yet; a recent
    job that does not run (requeued for its change) is placed as decided, and the jobs the round needs still get
    their GPUs back."""
    grown = jv("g", ran=True, running=2, run_s=5000.0, left_s=10000.0)
    view = ClusterView(0.0, 9, ROUND, 8, (grown,))
    assert gpus(sized(view, ["g"])[0], "g") == 8
    d, out = sized(view, ["g"], recent=frozenset({"g"}))
    assert gpus(d, "g") == 2 and (out["g"].before, out["g"].after) == (2, 2)
    small = jv("s", gpus=4, ran=True, running=1, run_s=5000.0, left_s=10000.0)
    view = ClusterView(0.0, 9, ROUND, 8, (small,))
    assert gpus(sized(view, ["s"])[0], "s") >= 4
    assert gpus(sized(view, ["s"], recent=frozenset({"s"}))[0], "s") == 1
    pending = ClusterView(0.0, 9, ROUND, 8, (jv("p", run_s=5000.0, left_s=10000.0),))
    assert gpus(sized(pending, ["p"], recent=frozenset({"p"}))[0], "p") == 8
    busy = ClusterView(0.0, 9, ROUND, 8, (jv("e", gpus=2, ran=True, running=8, run_s=3000.0),
                                          jv("n", gpus=4, elastic=False)))
    assert gpus(sized(busy, ["e", "n"], recent=frozenset({"e"}))[0], "e") == 4


class _Run(Policy):
    name = "run-all"
    sizes_elastic_jobs = True

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs), plans={j.job_id: JobPlan(j.job_id) for j in
                                                                           view.jobs})


def test_the_round_loop_does_not_grow_a_job_again_within_a_round_of_its_change():
    """Round 0 grows `a` 1 -> 2 (1 GPU idle); an early round at 60 s (`b` ended) leaves it on 2 though 2 GPUs idle;
    the next one, a round after its change, grows it to 4."""
    a = dict(left_s=10000.0, ran=True, run_s=5000.0)
    views = [ClusterView(0.0, 0, ROUND, 4, (jv("a", **a), jv("b", gpus=2, elastic=False, ran=True, run_s=5000.0))),
             ClusterView(60.0, 1, ROUND, 4, (jv("a", running=2, **a),)),
             ClusterView(120.0, 2, ROUND, 4, (jv("a", running=2, **a),))]
    backend = ScriptedViews(views)
    loop = RoundLoop(backend, _Run(), preemption_cost_s=COST)
    while not backend.done():
        loop.run_round()
    assert [gpus(d, "a") for d in backend.decisions] == [2, 2, 4]
    assert loop.resizes == {"grown": 2, "shrunk": 0}


def test_fewer_gpus_rather_than_none():
    """An elastic job of 4 that does not fit the 2 idle GPUs runs on 2 (rule "elastic"); a rigid one waits."""
    jobs = (jv("big", gpus=4, elastic=False), jv("r", gpus=2, elastic=False), jv("w", gpus=4), jv("x", gpus=4,
            elastic=False))
    view = ClusterView(0.0, 3, ROUND, 8, jobs)
    plans = {"big": JobPlan("big", rule="deadline"), "r": JobPlan("r", rule="deadline"),
             "w": JobPlan("w", next_offset=3), "x": JobPlan("x", next_offset=2)}
    d, out = size(view, decided(view, ["big", "r"], plans), COST)
    check_placement(view, d)
    assert "x" not in d.run and gpus(d, "w") == 2 and d.plans["w"].rule == "elastic"
    assert d.plans["w"].resize.startswith("2 GPUs (asked 4): on idle GPUs rather than none")
    # a job whose preemption is under way is left alone
    d, _ = size(view, decided(view, ["big", "r"], plans), COST, fixed=frozenset({"w"}))
    assert "w" not in d.run


def test_a_job_on_lent_gpus_is_not_kept_by_the_restart_bound_and_a_kept_one_keeps_only_those():
    assert held(jv("k", gpus=4, ran=True, running=2)) == 2
    assert held(jv("g", gpus=2, ran=True, running=8)) == 2 and held(jv("r", elastic=False)) == 1
    plans = {"n": JobPlan("n", rule="deadline"), "k": JobPlan("k", next_offset=5)}
    # 100 s of run: the restart bound would keep a job on its own count; one on 2 of its 4 GPUs gives them back ...
    small = jv("k", gpus=4, ran=True, running=2, run_s=100.0, left_s=5000.0)
    view = ClusterView(0.0, 3, ROUND, 4, (small, jv("n", gpus=4, elastic=False)))
    g, verdicts = gate(view, decided(view, ["n"], plans), {}, COST)
    assert "k" not in g.run and verdicts["k"].pays
    # ... and its last round of work keeps it, on those 2 GPUs only
    last = replace(small, total_steps=60.0 * SCALING[4])
    view = ClusterView(0.0, 3, ROUND, 4, (last, jv("n", gpus=2, elastic=False)))
    g, _ = gate(view, decided(view, ["n"], plans), {}, COST)
    assert g.plans["k"].rule == "kept" and gpus(g, "k") == 2 and gpus(g, "n") == 2


def test_annotated_reason_and_journal_round_trip():
    view = ClusterView(0.0, 0, ROUND, 8, (jv("e"),))
    d, _ = sized(view, ["e"])
    d = annotate(view, d, "authoritative")
    assert d.plans["e"].reason.endswith("; 8 GPUs (asked 1): idle capacity; back to 1 when the queue grows")
    back = RoundRecord.from_json(RoundRecord(view, d, 0.0, False, "shockwave-edf").to_json())
    assert back.view.jobs[0].gpus_range == (1, 8) and back.decision.plans["e"].gpus == 8
    assert back.decision.placement["e"] == d.placement["e"]


def test_placement_refuses_an_unprofiled_count():
    view = ClusterView(0.0, 0, ROUND, 8, (jv("e"),))
    bad = RoundDecision(run=("e",), placement={"e": {"gpu": 3}})
    with pytest.raises(ValueError, match="elastic"):
        check_placement(view, bad)
    assert place(view, ["e"]) == {"e": {"gpu": 1}}  # the plain placement: its asked count
