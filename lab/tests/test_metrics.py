"""The paper's metrics on hand-computed cases (docs/reference.md §5)."""
import pytest

from slurm_shockwave.backends.base import JobRecord
from shockwave_lab.metrics import compute


def rec(i, arrival, finish, iso, gpus=1, run=0.0):
    return JobRecord(i, "u", gpus, arrival, finish, iso, run_time=run)


def test_makespan_jct_rho_and_unfair_fraction():
    records = [rec(0, 0, 100, 50, run=50), rec(1, 10, 210, 100, run=100), rec(2, 20, 120, 100, gpus=2, run=80)]
    # 3 jobs on 2 GPUs: contention factor max(1, 3/2) = 1.5
    m = compute("p", records, num_gpus=2)
    assert m.makespan == 210
    assert m.avg_jct == pytest.approx((100 + 200 + 100) / 3)
    assert m.rho == pytest.approx([100 / 75, 200 / 150, 100 / 150])
    assert m.worst_rho == pytest.approx(4 / 3)
    assert m.unfair_fraction == pytest.approx(200 / 3)       # two of three above 1.05
    assert m.unfair_fraction_1_1 == pytest.approx(200 / 3)
    assert m.utilization == pytest.approx((50 + 100 + 160) / (2 * 210))


def test_contention_factor_uses_trace_size_and_floors_at_one():
    records = [rec(0, 0, 100, 100)]
    assert compute("p", records, num_gpus=8).rho == [1.0]                 # max(1, 1/8) = 1
    assert compute("p", records, num_gpus=8, n_trace=16).rho == [0.5]     # 16 jobs / 8 GPUs = 2


def test_thresholds_are_strict():
    records = [rec(0, 0, 105, 100), rec(1, 0, 110, 100), rec(2, 0, 111, 100)]
    m = compute("p", records, num_gpus=3)
    assert m.unfair_fraction == pytest.approx(200 / 3)    # 1.10 and 1.11 are > 1.05; 1.05 is not
    assert m.unfair_fraction_1_1 == pytest.approx(100 / 3)


def test_makespan_counts_from_the_first_arrival():
    m = compute("p", [rec(0, 100, 300, 200)], num_gpus=1, start_time=100)
    assert m.makespan == 200


def test_no_records_is_an_error():
    with pytest.raises(ValueError):
        compute("p", [], num_gpus=1)


def test_dynamic_ftf_counts_the_contention_each_job_saw():
    from shockwave_lab.metrics import dynamic_ftf
    # alone on the cluster: entitled to the whole JCT
    assert dynamic_ftf([(0, 100, 100, 1)], 4) == [1.0]
    # two 1-GPU jobs on one GPU, run one after the other: the first was entitled to half a GPU while both
    # waited (0.5), the second to half for 100 s then the whole GPU for 100 s (1.5); time-slicing both to 200 s
    # is the fair outcome (1.0 each)
    assert dynamic_ftf([(0, 100, 100, 1), (0, 200, 100, 1)], 1) == [0.5, 1.5]
    assert dynamic_ftf([(0, 200, 100, 1), (0, 200, 100, 1)], 1) == [1.0, 1.0]
    # gangs count in GPUs: a 2-GPU job and a 2-GPU job on 2 GPUs share like two 1-GPU jobs on one
    assert dynamic_ftf([(0, 100, 100, 2), (0, 200, 100, 2)], 2) == [0.5, 1.5]
    # the paper's rho divides by the whole trace's jobs per GPU (2 here) though the two jobs never overlapped:
    # it credits each with contention it never saw
    recs = [rec(0, 0, 100, 100), rec(1, 1000, 1100, 100)]
    m = compute("p", recs, num_gpus=1)
    assert m.rho == [0.5, 0.5] and m.ftf_dynamic == [1.0, 1.0]
    assert (m.ftf_dynamic_worst, m.ftf_dynamic_unfair) == (1.0, 0.0)


def test_dynamic_ftf_summary_in_compute():
    recs = [rec(i, 0, 100 * (i + 1), 100) for i in range(5)]          # FIFO on one GPU
    m = compute("p", recs, num_gpus=1)
    assert m.ftf_dynamic_worst == pytest.approx(max(m.ftf_dynamic))
    assert m.ftf_dynamic_unfair == pytest.approx(100 * sum(x > 1.05 for x in m.ftf_dynamic) / 5)
    assert min(m.ftf_dynamic) < 1 < m.ftf_dynamic_p95 <= m.ftf_dynamic_worst
    assert "ftf_dynamic" not in m.summary() and "ftf_dynamic_p95" in m.summary()
