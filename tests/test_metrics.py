"""The paper's metrics on hand-computed cases (reference notes section 3.4)."""
import pytest

from slurm_shockwave.backends.base import JobRecord
from slurm_shockwave.metrics import compute


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
