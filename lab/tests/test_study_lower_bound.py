"""The physical lower bound of the makespan (metrics.lower_bound) on hand-checkable workloads."""
from __future__ import annotations

import pytest

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.metrics import lower_bound
from shockwave_lab.simulate import run_simulation
from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable


def test_work_bound_at_time_zero():
    # two 100 s jobs on one GPU: 200 s of work at t = 0
    assert lower_bound([(0, 100, 1), (0, 100, 1)], 1) == 200


def test_longest_job_bound():
    # one 300 s job and a tiny one on 2 GPUs: work/G = 155, but the long job alone needs 300 s
    assert lower_bound([(0, 300, 1), (10, 10, 1)], 2) == 300


def test_late_work_bound():
    # a 2-GPU 100 s job arriving at 50 on 2 GPUs: 50 + 200/2 = 150 (the early job adds only 10 GPU-s before it)
    assert lower_bound([(0, 10, 1), (50, 100, 2)], 2) == 150
    # a burst arriving late dominates the early work: 1000 + 4 x 100 / 2 = 1200
    assert lower_bound([(0, 500, 2)] + [(1000, 100, 1)] * 4, 2) == 1200


def test_times_relative_to_the_first_arrival():
    jobs = [(0, 10, 1), (50, 100, 2)]
    shifted = [(a + 1.7e9, x, g) for a, x, g in jobs]
    assert lower_bound(shifted, 2) == pytest.approx(lower_bound(jobs, 2))


def test_same_arrival_group_counted_together():
    # three jobs arriving together at t=5 on 1 GPU: 5 + 30 = 35
    assert lower_bound([(0, 1, 1), (5, 10, 1), (5, 10, 1), (5, 10, 1)], 1) == 35


def test_no_policy_beats_the_bound(tmp_path):
    table = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")
    path = tmp_path / "t.trace"
    path.write_text(trace_text(generate(GeneratorOptions(jobs=30, seed=9, interarrival=60, max_gpus=8), table)))
    for policy in ("max_min_fairness", "min_total_duration", "allox"):
        m = run_simulation(path, table, 8, policy).metrics
        assert 0 < m.lower_bound <= m.makespan
        assert m.makespan_over_lb == pytest.approx(m.makespan / m.lower_bound)
