"""What each job is owed and the default's latest fair start (solver/entitlement.py, issue 36): entitlement accrues
at min(1, G / D) of the contention each job saw; the latest fair start puts the jobs of one burst on one scale (a
short job's fairness falls fastest while it waits); the state survives a controller restart and hostile state is
dropped, never stored as a non-finite number."""

from __future__ import annotations

import math

from solver.entitlement import EntitlementTracker, rate
from solver.types import ClusterView, JobView


def jv(i, arrival: float, gpus: int = 1) -> JobView:
    return JobView(job_id=i, arrival_time=arrival, num_gpus=gpus, batch_size=32, epochs_done=0, total_epochs=10,
                   samples_per_epoch=320, steps_done=0.0, total_steps=100.0, throughput=1.0)


def view(now: float, jobs, gpus: int = 4) -> ClusterView:
    return ClusterView(now=now, round_index=int(now // 100), round_length=100.0, num_gpus=gpus, jobs=tuple(jobs))


def test_the_rate_is_the_share_of_its_gang_each_job_is_owed_under_the_contention_now():
    assert rate(view(0.0, [jv(1, 0.0, 2), jv(2, 0.0, 6)])) == 0.5          # 8 GPUs asked of 4
    assert rate(view(0.0, [jv(1, 0.0, 2)])) == 1.0                         # no contention: all of its gang
    assert rate(view(0.0, [])) == 1.0


def test_what_is_owed_accrues_at_the_rate_of_the_view_before_and_from_arrival_for_a_new_job():
    t = EntitlementTracker()
    t.update(view(100.0, [jv("a", 0.0, 2)]))                               # alone since 0: owed 100 s
    assert t.owed == {"a": 100.0}
    t.update(view(200.0, [jv("a", 0.0, 2), jv("b", 150.0, 6)]))            # 100 s more at rate 1; b: 50 s at 0.5
    assert t.owed == {"a": 200.0, "b": 25.0}
    t.update(view(300.0, [jv("b", 150.0, 6)]))                             # a left: forgotten; b 100 s at 0.5
    assert t.owed == {"b": 75.0}


def test_jobs_of_one_burst_are_on_one_scale_and_the_short_one_comes_first():
    t = EntitlementTracker()
    burst = [jv("short", 0.0), jv("long", 0.0)]
    t.update(view(50.0, burst))                                            # both owed 50 s
    due = t.latest_starts(view(50.0, burst), {"short": 100.0, "long": 1000.0}, {"short": 100.0, "long": 1000.0})
    # rho* = max(1, (50 + 100) / 100, (50 + 1000) / 1000) = 1.5: short (1.5*100 - 50) - 100 = 0, long 450
    assert due == {"short": 0.0, "long": 450.0}


def test_a_job_without_a_finite_total_has_no_deadline_and_does_not_move_the_others():
    t = EntitlementTracker()
    jobs = [jv(1, 0.0), jv(2, 0.0)]
    t.update(view(0.0, jobs))
    due = t.latest_starts(view(0.0, jobs), {1: 100.0, 2: math.nan}, {1: 100.0, 2: 5.0})
    assert due == {1: 0.0, 2: math.inf}


def test_the_state_survives_a_restart_and_hostile_values_are_dropped():
    t = EntitlementTracker()
    t.update(view(100.0, [jv("a", 0.0)]))
    u = EntitlementTracker()
    u.load_state_dict(t.state_dict())
    assert u.owed == t.owed and u.last == t.last
    u.load_state_dict({"owed": {"x": float("nan"), "y": -5.0, "w": "abc", "v": None, "z": 7.0}, "last": None})
    assert u.owed == {"z": 7.0} and u.last is None
