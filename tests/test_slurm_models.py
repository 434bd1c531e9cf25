"""The Slurm site models (solver/policies/slurm_multifactor.py, slurm_preempt.py) on hand-made views: priority,
decayed fair-share usage, backfill, and requeue preemption."""
import dataclasses

import pytest

from solver.policies import make_policy
from solver.types import ClusterView
from tests.helpers import mkjob

DAY = 86400.0


def sj(i, g=1, arrival=0.0, d=100.0, user="", ran=False):
    """A job of 20 epochs of `d` s alone: its time limit is 1.5 x 20 x d."""
    return dataclasses.replace(mkjob(i, g=g, d=d, arrival=arrival), user=user, ran_last_round=ran)


def cv(jobs, now, G, ran=None):
    return ClusterView(now=now, round_index=int(now // 120), round_length=120.0, num_gpus=G, jobs=tuple(jobs),
                       last_round_run_time=ran or {})


def test_priority_is_the_weighted_sum_of_age_fairshare_and_size():
    pol = make_policy("slurm-multifactor")
    a, b, c = sj("a", g=4), sj("b", g=1), sj("c", g=1, arrival=1800.0)
    view = cv([c, b, a], 3600.0, 8)
    # no usage yet: fair-share 1; age = wait / 14 days; size = GPUs / 8
    assert pol.priority(view, a) == int(1000 * 3600 / (14 * DAY) + 10000 + 1000 * 4 / 8)       # 10502
    assert pol.priority(view, b) == int(1000 * 3600 / (14 * DAY) + 10000 + 1000 / 8)           # 10127
    assert pol.priority(view, c) == int(1000 * 1800 / (14 * DAY) + 10000 + 1000 / 8)           # 10126
    # 5 GPUs: a and b start in priority order; c (one point lower than b) finds none left
    assert make_policy("slurm-multifactor").decide(cv([c, b, a], 3600.0, 5)).run == ("a", "b")
    small = make_policy("slurm-multifactor", {"favor_small": True})
    assert small.priority(view, b) > small.priority(view, a)


def test_usage_decays_with_the_half_life_and_sets_the_fairshare_factor():
    pol = make_policy("slurm-multifactor", {"decay_half_life_s": 1000.0})
    a, b = sj("a", user="alice"), sj("b", g=2, user="bob")
    pol.decide(cv([a, b], 0.0, 4))
    pol.decide(cv([a, b], 1000.0, 4, ran={"a": 120.0}))
    assert pol.usage == {"alice": 120.0, "bob": 0.0}
    # a finished in the last round (not in the view any more): its run is still charged
    pol.decide(cv([b], 2000.0, 4, ran={"a": 100.0, "b": 50.0}))
    assert pol.usage["alice"] == pytest.approx(120.0 * 0.5 + 100.0)
    assert pol.usage["bob"] == pytest.approx(50.0 * 2)
    share = 1 / 2                                          # two users, one share each
    # as Slurm's RawUsage: a's run was counted at its end, b's (still running) by this tick, after the factor was
    # computed (22.05's sshare: EffectvUsage at a tick = the usage shares of the moment before it)
    assert pol.fairshare("alice") == pytest.approx(2 ** -((160 / 160) / share)) and pol.fairshare("bob") == 1.0
    pol.decide(cv([b], 2120.0, 4, ran={"b": 60.0}))        # the next tick sees b's run (decay: same for both)
    assert pol.fairshare("alice") == pytest.approx(2 ** -((160 / 260) / share))
    assert pol.fairshare("bob") == pytest.approx(2 ** -((100 / 260) / share))
    # the under-served user's job ranks first, other things equal
    x, y = sj("x", user="alice"), sj("y", user="bob")
    assert pol.priority(cv([x, y], 2000.0, 4), y) > pol.priority(cv([x, y], 2000.0, 4), x)


def test_the_fairshare_factor_sees_usage_as_of_the_last_calc_period_tick():
    pol = make_policy("slurm-multifactor", {"calc_period_s": 600.0})
    a, b = sj("a", user="alice"), sj("b", user="bob")
    pol.decide(cv([a, b], 0.0, 4))                                      # a tick: no usage yet
    pol.decide(cv([a, b], 120.0, 4, ran={"a": 120.0}))
    assert pol.uncounted["a"] == pytest.approx(120.0) and pol.fairshare("alice") == pol.fairshare("bob") == 1.0
    pol.decide(cv([a, b], 600.0, 4, ran={"a": 480.0}))       # a tick: a's run counts from now on
    assert pol.usage["alice"] == pytest.approx(600.0, rel=1e-4) and pol.fairshare("alice") == 1.0
    pol.decide(cv([a, b], 1080.0, 4, ran={"a": 480.0}))
    assert pol.fairshare("alice") == 1.0
    pol.decide(cv([a, b], 1200.0, 4, ran={"a": 120.0}))      # the next tick sees it
    assert pol.fairshare("alice") < pol.fairshare("bob")
    every_round = make_policy("slurm-multifactor")                       # the default: every round
    every_round.decide(cv([a, b], 0.0, 4))
    every_round.decide(cv([a, b], 120.0, 4, ran={"a": 120.0}))
    every_round.decide(cv([a, b], 240.0, 4, ran={"a": 120.0}))
    assert every_round.fairshare("alice") < every_round.fairshare("bob")
    again = make_policy("slurm-multifactor", {"calc_period_s": 600.0})
    again.load_state_dict(pol.state_dict())
    assert again.fairshare("alice") == pol.fairshare("alice")


def test_a_running_jobs_usage_counts_at_the_next_tick_an_ended_jobs_at_its_end():
    pol = make_policy("slurm-multifactor", {"calc_period_s": 600.0})
    a, b = sj("a", user="alice"), sj("b", user="bob")
    pol.decide(cv([a, b], 0.0, 4))                                      # a tick
    pol.decide(cv([a, b], 120.0, 4, ran={"a": 120.0, "b": 120.0}))
    assert pol.usage == {"alice": 0.0, "bob": 0.0}                      # both still run: counted at the next tick
    pol.decide(cv([a], 240.0, 4, ran={"a": 120.0, "b": 120.0}))         # b ended: its 240 s count now
    assert pol.usage["alice"] == 0.0 and pol.usage["bob"] == pytest.approx(240.0, rel=1e-4)
    assert pol.fairshare("alice") == pol.fairshare("bob") == 1.0        # not a tick: the factor is unchanged
    pol.decide(cv([a], 600.0, 4, ran={"a": 360.0}))                     # a tick: it sees bob's 240 s, not a's run
    assert pol.fairshare("alice") == 1.0 and pol.fairshare("bob") == pytest.approx(2 ** -(1 / 0.5))
    assert pol.usage["alice"] == pytest.approx(600.0, rel=1e-4)           # counted right after
    again = make_policy("slurm-multifactor", {"calc_period_s": 600.0})
    again.load_state_dict(pol.state_dict())
    assert again.uncounted == pol.uncounted and again.usage == pol.usage


def test_idle_shares_dilute_every_users_share():
    # sacctmgr gives root's own user association 1 share beside the accounts: 2 users then hold 1/3 each
    pol = make_policy("slurm-multifactor", {"idle_shares": 1})
    a, b = sj("a", user="alice"), sj("b", user="bob")
    pol.decide(cv([a, b], 0.0, 4))
    pol.decide(cv([b], 120.0, 4, ran={"a": 120.0}))                     # a ended: alice has all the usage
    assert pol.fairshare("alice") == pytest.approx(2 ** -(1 / (1 / 3)))


def test_the_size_factor_averages_the_node_and_gpu_shares_on_a_view_with_nodes():
    pol = make_policy("slurm-multifactor")
    one, four = sj("one", g=1), sj("four", g=4)
    nodes = {f"n{i}": ("gpu", 4) for i in range(8)}
    view = dataclasses.replace(cv([one, four], 0.0, 32), nodes=nodes)
    # sprio on the replay's cluster (8 nodes x 4 GPUs, CPUs following GPUs): 78 and 125 job-size points
    assert pol.priority(view, one) - 10000 == int(1000 * (1 / 8 + 1 / 32) / 2) == 78
    assert pol.priority(view, four) - 10000 == int(1000 * (1 / 8 + 4 / 32) / 2) == 125
    assert pol.priority(cv([one, four], 0.0, 32), one) - 10000 == int(1000 / 32)      # one pool: GPUs alone


def test_a_time_limit_is_whole_minutes_rounded_up():
    pol = make_policy("slurm-multifactor")
    pol.decide(cv([sj("a", d=101.0), sj("b", d=10.0)], 0.0, 4))
    assert pol.limit == {"a": 3060.0, "b": 300.0}                       # 1.5 x 20 x d: 3030 s -> 51 min; 5 min
    scaled = make_policy("slurm-multifactor", {"time_limit_unit_s": 1800.0})   # a minute at time scale 30
    scaled.decide(cv([sj("a", d=101.0), sj("b", d=10.0)], 0.0, 4))
    assert scaled.limit == {"a": 3600.0, "b": 1800.0}


def backfill_case(policy, cfg=None):
    """4 GPUs.  r (2 GPUs, limit 3000 s) started at 0; at 120 s come A (4 GPUs: the top priority), B (2 GPUs,
    limit 3000 s) and C (2 GPUs, limit 300 s)."""
    pol = make_policy(policy, cfg)
    r = sj("r", g=2)
    assert pol.decide(cv([r], 0.0, 4)).run == ("r",)
    jobs = [dataclasses.replace(r, ran_last_round=True), sj("A", g=4, arrival=120.0),
            sj("B", g=2, arrival=120.0), sj("C", g=2, arrival=120.0, d=10.0)]
    return pol, pol.decide(cv(jobs, 120.0, 4, ran={"r": 120.0}))


def test_backfill_starts_only_a_job_that_ends_before_the_reservation():
    # A is reserved from r's expected end (0 + 3000 s); B (to 3120 s) would delay it, C (to 420 s) does not
    _pol, d = backfill_case("slurm-multifactor")
    assert d.run == ("r", "C")                       # r keeps its GPUs: no preemption
    assert d.placement == {"r": {"gpu": 2}, "C": {"gpu": 2}}


def test_a_running_job_keeps_its_gpus_until_it_ends():
    pol, _d = backfill_case("slurm-multifactor")
    jobs = [sj("r", g=2, ran=True), sj("A", g=4, arrival=120.0), sj("C", g=2, arrival=120.0, d=10.0, ran=True)]
    assert pol.decide(cv(jobs, 240.0, 4, ran={"r": 120.0, "C": 120.0})).run == ("r", "C")


def test_requeue_preemption_lets_the_top_job_start():
    # r started with fair-share 1 (no usage yet, Slurm's 2^0); once the factor has seen r's run (its user's, the
    # only usage: 2^-1), r outranks A for good
    pol = make_policy("slurm-preempt")
    r = sj("r", g=2)
    assert pol.decide(cv([r], 0.0, 4)).run == ("r",)
    r = dataclasses.replace(r, ran_last_round=True)
    assert pol.decide(cv([r], 120.0, 4, ran={"r": 120.0})).run == ("r",)
    d = pol.decide(cv([r, sj("A", g=4, arrival=240.0)], 240.0, 4, ran={"r": 120.0}))
    assert d.run == ("r",) and pol.fairshare("") == 0.5
    # when A comes before the factor has seen any run, its size (4 GPUs: 500 points more than r's 2) wins
    pol, d = backfill_case("slurm-preempt")
    assert d.run == ("A",)
    pol, d = backfill_case("slurm-preempt", {"weight_fairshare": 0})
    assert d.run == ("A",)                           # r (started with a lower priority: size 500 < 1000) is requeued
    assert pol.eligible["r"] == 120.0                # its age counts from the requeue
    assert "r" not in pol.started
    pol, d = backfill_case("slurm-preempt", {"weight_fairshare": 0, "calc_period_s": 3600.0})
    assert d.run == ("A",) and pol.usage[""] == pytest.approx(240.0) and not pol.uncounted   # counted at its end


def test_preemption_requeues_the_lowest_priority_first_and_only_when_it_lets_the_job_start():
    cfg = {"weight_age": 100000, "max_age_s": 1000.0}
    pol = make_policy("slurm-preempt", cfg)
    # old (age 1000 s: priority ~110000), young (age 0) and mid (age 500 s), 1 GPU each on 3 GPUs
    old, mid, young = sj("old", arrival=-1000.0), sj("mid", arrival=-500.0), sj("young")
    assert set(pol.decide(cv([old, mid, young], 0.0, 3)).run) == {"old", "mid", "young"}
    running = [dataclasses.replace(j, ran_last_round=True) for j in (old, mid, young)]
    # p (1 GPU, age 300 s) outranks young (frozen at age 0) and not mid: young alone is requeued
    d = pol.decide(cv([*running, sj("p", arrival=-180.0)], 120.0, 3))
    assert set(d.run) == {"old", "mid", "p"}
    # q needs 3 GPUs: requeuing every job of lower priority (all but old) leaves 2: nobody is requeued
    pol = make_policy("slurm-preempt", cfg)
    pol.decide(cv([old, mid, young], 0.0, 3))
    d = pol.decide(cv([*running, sj("q", g=3, arrival=-380.0)], 120.0, 3))
    assert set(d.run) == {"old", "mid", "young"}


def test_state_round_trips_through_json():
    import json
    pol, d = backfill_case("slurm-preempt", {"weight_fairshare": 0})
    again = make_policy("slurm-preempt", {"weight_fairshare": 0})
    again.load_state_dict(json.loads(json.dumps(pol.state_dict())))
    jobs = [sj("A", g=4, arrival=120.0, ran=True), sj("B", g=2, arrival=120.0), sj("C", g=2, arrival=120.0, d=10.0),
            sj("r", g=2)]
    view = cv(jobs, 240.0, 4, ran={"A": 120.0})
    assert again.decide(view) == pol.decide(view)
    assert again.state_dict() == pol.state_dict()        # usage, starts and eligible times carried over
