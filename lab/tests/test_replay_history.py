"""Plain Slurm's own history against its model (replay/history.py, issue 35): the comparison on REAL `sacct --json`
output (lab/tests/data/imports/sacct_22.05.json, recorded from a local cluster with slurmdbd), the model with
Slurm's recorded time limits, and a small real plain-Slurm replay read back with sacct, imported and compared."""

import json
import math
import os
from pathlib import Path

import pytest

from shockwave_lab.data_files import experiment_paths
from shockwave_lab.imports.common import Row
from shockwave_lab.replay import history as H
from shockwave_lab.replay.errors import ReplayError
from shockwave_lab.workload.throughputs import ThroughputTable

DATA = Path(__file__).parent / "data" / "imports"
THR = experiment_paths("tacc_32gpus")["throughputs"]


def test_recorded_sacct_is_read_matched_and_compared(tmp_path):
    rows, hist = H.read_history(DATA / "sacct_22.05.json")
    assert {i: j.name for i, j in hist.items()} == {
        "1": "completes",
        "2": "fails",
        "4_0": "array",
        "4_1": "array",
        "4_2": "array",
        "5": "cancelled-running",
        "6": "requeued",
    }  # 3 (CPU only) and 9 (never started) are not imported
    six = hist["6"]  # requeued once: its first start, its last run's end
    assert (six.runs, six.submit, six.start, six.end) == (2, 1795800925.0, 1795800928.0, 1795800938.0)
    assert hist["1"].limit_s == 60.0 * 525600  # --time unset: the partition's (a year), in seconds
    res = H.fidelity(DATA / "sacct_22.05.json", THR, gpus=8, nodes=1, scale=1.0, runs=3, out_dir=tmp_path)
    assert res["jobs"] == len(res["per_job"]) == 7 and res["requeued"] == 1
    # Slurm's waits (start - submit, s): 2, 2 (jobs 1, 2), 1 x 4 (the array, job 5), 3 (job 6): median 1
    assert res["wait_median_s"] == 1.0 and res["waited"] == 3
    assert res["per_job"]["6"]["slurm"] == [4.0, 14.0]  # seconds from the first submit (job 1's and 2's)
    runtime = {r.id: r.runtime for r in rows}
    for jid, job in res["per_job"].items():
        s1, e1 = job["model"]
        assert s1 >= job["submit"] - 1e-6  # the model starts no job before it arrives
        assert e1 - s1 == pytest.approx(runtime[jid], abs=0.11)  # and runs it for its imported run time
    figs = [v for k, v in res["model"].items() if k.endswith("_s")]
    assert all(math.isfinite(x) for x in figs) and res["model"]["jobs"] == 7
    assert res["ratio"] == pytest.approx(res["model"]["start_median_s"] / 1.0)
    assert set(res["spread"]["vs_model"]) == {"start_median_s", "start_p90_s", "end_median_s", "end_p90_s"}
    assert (tmp_path / "sacct_22.05.jobs.jsonl").read_text().count("\n") == 7  # the imported job spec


def test_errors_are_per_job_medians_and_p90s():
    real = {"a": (0.0, 10.0), "b": (5.0, 20.0), "c": (10.0, 30.0)}
    model = {"a": (2.0, 10.0), "b": (5.0, 30.0), "c": (4.0, 40.0)}
    e = H.errors(real, model, tol=2.0)
    assert (e["start_median_s"], e["start_p90_s"]) == (2.0, pytest.approx(5.2))  # |d| = 2, 0, 6
    assert (e["end_median_s"], e["end_p90_s"]) == (10.0, 10.0)  # |d| = 0, 10, 10
    assert e["start_mean_signed_s"] == pytest.approx(-4 / 3) and e["start_within"] == 2
    with pytest.raises(ReplayError, match="did not run 1 job"):
        H.errors(real, {"a": (0.0, 1.0), "b": (0.0, 1.0)})


def test_recorded_time_limits_change_backfill(tmp_path):
    """One node of 2 GPUs: A (1 GPU, 100 s) runs, B (2 GPUs) waits for it, C (1 GPU, 50 s) is backfilled beside A
    when its limit ends before B's reservation: with the model's assumed limits (1.5 x run time in minutes: A 180 s,
    C 120 s) it is, with recorded ones (A 120 s, C 600 s) it waits until B has run."""
    table = ThroughputTable.load(THR)
    rows = [Row("A", 0.0, 100.0, 1, "u1"), Row("B", 1.0, 30.0, 2, "u2"), Row("C", 2.0, 50.0, 1, "u3")]
    specs = H.workload(rows, table, 1.0, tmp_path / "w.jsonl")
    assumed = H.model_runs(specs, table, 2, 1, 1.0)
    assert assumed["C"][0] < 10 and assumed["B"][0] >= assumed["A"][1] - 1e-6
    recorded = H.model_runs(specs, table, 2, 1, 1.0, limits={"A": 120.0, "B": 60.0, "C": 600.0})
    assert recorded["C"][0] >= recorded["B"][1] - 1e-6 and recorded["C"][0] > assumed["C"][0] + 100


@pytest.mark.slurm
def test_plain_slurm_replay_is_read_back_imported_and_compared(tmp_path):
    """6 short emulated jobs on 2 nodes of 4 GPUs under plain Slurm (no controller): sacct --json read back before
    the teardown, every job matched to its trace job, imported with the run time Slurm measured, compared."""
    if os.geteuid() != 0:
        pytest.skip("the replay needs root to start Slurm")
    from shockwave_lab.replay.api import load
    from shockwave_lab.replay.run import Replay
    from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text

    scale = 60.0
    trace = tmp_path / "six.trace"
    opts = GeneratorOptions(
        jobs=6, seed=3, interarrival=60, min_hours=0.05, max_hours=0.12, gpu_mix=(0.3, 0.4, 0.3, 0.0), max_gpus=4
    )
    trace.write_text(trace_text(generate(opts, ThroughputTable.load(THR))))
    jobs, _specs, _table = load(trace, THR, 8, 2)
    sacct = tmp_path / "sacct.json"
    raw = Replay(
        jobs,
        gpus=8,
        nodes=2,
        time_scale=scale,
        policy="slurm",
        out=lambda m: None,
        timeout_s=240,
        after_jobs=lambda rep: H.capture(rep, sacct),
    ).run()
    assert raw["after_jobs"] == str(sacct)
    data = json.loads(sacct.read_text())
    assert len(data["jobs"]) == 6 and all(j["steps"] == [] for j in data["jobs"])
    res = H.fidelity(sacct, THR, gpus=8, nodes=2, scale=scale, runs=2, out_dir=tmp_path)
    assert sorted(res["names"].values()) == sorted(j.name for j in jobs) and res["jobs"] == 6
    by_name = {j.name: j for j in jobs}
    for job in res["per_job"].values():
        (s0, e0), (s1, e1) = job["slurm"], job["model"]
        assert s0 >= job["submit"] and e0 > s0 and s1 >= job["submit"] - 1e-6
        work = by_name[job["name"]].work_s / scale  # wall seconds the emulated program slept
        assert work - 1.0 <= (e0 - s0) / scale <= work + 15.0  # sacct's whole seconds; start-up under load
        assert e1 - s1 == pytest.approx(e0 - s0, abs=0.2)  # the model runs the imported run time
    figs = [res["model"][k] for k in ("start_median_s", "start_p90_s", "end_median_s", "end_p90_s")]
    assert all(math.isfinite(x) and x >= 0 for x in figs)
    assert res["wait_median_s"] >= 0 and (res["ratio"] is None) == (res["wait_median_s"] == 0)
