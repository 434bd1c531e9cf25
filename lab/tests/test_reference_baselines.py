"""On the bundled 120-job trace (32 GPUs, TACC throughputs) every baseline reproduces the reference's
shipped results: makespan and average JCT within 2%, unfair fraction within 3 percentage points."""
import json

import pytest

from shockwave_lab.data_files import REFERENCE_RESULTS, experiment_paths
from shockwave_lab.simulate import run_simulation

SHIPPED = {v["policy"]: v for k, v in json.loads(
    (REFERENCE_RESULTS / "shipped_result_pickles_summary.json").read_text()).items()
    if k.startswith("tacc_32gpus/") and "old_" not in k and "new_orig" not in k}
REF_NAME = {"max_sum_throughput": "max_sum_throughput_perf"}


@pytest.mark.parametrize("policy", ["max_min_fairness", "finish_time_fairness", "allox", "max_sum_throughput",
                                    "min_total_duration", "gandiva_fair"])
def test_baseline_matches_reference(policy):
    p = experiment_paths("tacc_32gpus")
    m = run_simulation(p["trace"], p["throughputs"], 32, policy).metrics
    ref = SHIPPED[REF_NAME.get(policy, policy)]
    assert m.jobs == 120
    assert m.makespan == pytest.approx(ref["makespan"], rel=0.02)
    assert m.avg_jct == pytest.approx(ref["avg_jct"], rel=0.02)
    assert abs(m.unfair_fraction - ref["unfair_fraction_pct_gt1.05"]) <= 3.0
