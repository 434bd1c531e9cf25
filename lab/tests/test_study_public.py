"""The study's samples of public traces (lab/shockwave_lab/bench/study_public.py, docs/public-traces.md): the
committed windows of Alibaba's 2023 GPU pods load, hold what their index says (300 jobs, arrivals sorted from 0,
accounts = QoS classes, no users, finite numbers, the cluster of the stated rule) and run in the simulator; the
`sample` command cuts the same windows of a user's file deterministically (here the synthetic pollux_philly.csv)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from shockwave_lab.bench import study_public as sp
from shockwave_lab.bench.study_traces import PUBLIC, offered_load, public_specs, trace_file, users_samples
from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.imports.common import Row
from shockwave_lab.simulate import run_simulation
from shockwave_lab.workload.throughputs import ThroughputTable

DATA = Path(__file__).resolve().parent / "data" / "imports"
TABLE = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")
COMMITTED = [s for s in PUBLIC if Path(s.spec_file).parent == sp.PUBLIC_DIR.resolve()]


def entries(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_the_committed_samples_are_the_indexed_openb_windows():
    index = sp.read_index(sp.PUBLIC_DIR)
    assert (
        [s.name for s in COMMITTED]
        == [r["name"] for r in index]
        == [
            "openb_p25_300j_8g",
            "openb_p50_300j_16g",
            "openb_p75_300j_16g",
        ]
    )
    src = sp.SOURCES["openb"]
    for spec, r in zip(COMMITTED, index, strict=True):
        assert r["sha256"] == src.sha256 and r["source"] == {"repo": src.repo, "commit": src.commit, "path": src.path}
        assert r["first"] == int(r["position"] * r["of"]) and r["of"] == 6171 and r["users"] == []
        es = entries(spec.spec_file)
        assert len(es) == spec.jobs == r["jobs"] == 300 and len({e["id"] for e in es}) == 300
        arrivals = [e["arrival"] for e in es]
        assert arrivals[0] == 0 and arrivals == sorted(arrivals)
        assert all(math.isfinite(x) for e in es for x in (e["arrival"], e["total_steps"]))
        assert {e.get("account") for e in es} == set(r["accounts"]) <= {"LS", "BE", "Burstable", "Guaranteed"}
        assert not any("user" in e for e in es) and all(1 <= e["gpus"] <= spec.gpus for e in es)
        assert trace_file(spec, Path("."))[1] == THROUGHPUTS / "tacc_throughputs.json"  # 1-8 GPUs: all profiled
        assert f"{src.repo}@{src.commit[:7]}:{src.path}" in spec.describe()


@pytest.mark.parametrize("spec", COMMITTED, ids=[s.name for s in COMMITTED])
def test_the_cluster_is_the_stated_rule_of_the_window(spec):
    """Run times back from the steps (steps / throughput at the job's GPUs): the smallest power of two >= the largest
    job and >= the mean demand while the jobs arrive is the sample's GPU count; offered load is work / (GPUs x span)."""
    es = entries(spec.spec_file)
    rows = [Row(e["id"], e["arrival"], e["total_steps"] / TABLE.get("ResNet-18", 32, e["gpus"]), e["gpus"]) for e in es]
    record = next(r for r in sp.read_index(sp.PUBLIC_DIR) if r["name"] == spec.name)
    assert sp.mean_demand(rows) == pytest.approx(record["mean_demand"], abs=0.01)
    assert sp.cluster_gpus(rows) == spec.gpus and spec.gpus / 2 < max(sp.mean_demand(rows), max(r.gpus for r in rows))
    work = sum(r.runtime * r.gpus for r in rows)
    # the simulator's exclusive time (offered_load's work) rounds each job up to whole epochs: under 1% more here
    assert 1 <= offered_load(spec, Path(".")) / (work / (spec.gpus * rows[-1].submit)) < 1.01


def test_a_committed_sample_runs_every_job_to_the_end():
    spec = COMMITTED[0]
    path, thr = trace_file(spec, Path("."))
    for policy in ("fifo", "shockwave-edf"):
        m = run_simulation(path, thr, spec.gpus, policy).metrics
        assert m.jobs == 300 and m.makespan >= m.lower_bound * (1 - 1e-9) and math.isfinite(m.avg_jct)


def sample(out, *extra):
    args = ["sample", "--format", "pollux-philly", "--file", str(DATA / "pollux_philly.csv"), "--out", str(out)]
    return sp.main([*args, "--name", "syn", "--jobs", "3", "--positions", "0.25,0.5", *extra])


def test_sample_cuts_the_same_windows_every_time(tmp_path, capsys):
    assert sample(tmp_path / "a") == 0 and sample(tmp_path / "b") == 0
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == [
        "samples.json",
        "syn_p25_3j_16g.jsonl",
        "syn_p25_3j_16g.throughputs.json",  # 16 GPUs: not in the TACC table
        "syn_p50_3j_8g.jsonl",
    ]
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    # 6 jobs kept; a quarter of the way: jobs 1-3 in arrival order (lines 4, 7, 8); half: 3-5 (lines 8, 9, 2)
    (p25, p50) = sp.read_index(tmp_path / "a")
    assert (p25["first"], p25["of"], p25["gpus"], p50["first"], p50["gpus"]) == (1, 6, 16, 3, 8)
    assert "source" not in p25 and p25["imported"].endswith("(dropped: 1 zero run time, 1 no GPUs)")
    es = entries(tmp_path / "a" / "syn_p50_3j_8g.jsonl")
    assert [(e["id"], e["arrival"], e["gpus"], e["account"]) for e in es] == [
        ("philly-8", 0.0, 8, "6214e9"),
        ("philly-9", 900.0, 2, "11cb48"),
        ("philly-2", 1915.0, 1, "11cb48"),
    ]
    # 8 x 600 s + 2 x 1015 s (until the last arrival) over the 1915 s span: 3.57 GPUs; the largest job needs 8
    assert p50["mean_demand"] == round((8 * 600 + 2 * 1015) / 1915, 2)
    assert "syn_p50_3j_8g: jobs 3-5 of the 6 pollux-philly jobs, 8 GPUs" in capsys.readouterr().out


def test_a_users_samples_join_the_study(tmp_path):
    assert sample(tmp_path) == 0
    specs = {s.name: s for s in public_specs(tmp_path)}
    assert {n: s.gpus for n, s in specs.items()} == {"syn_p25_3j_16g": 16, "syn_p50_3j_8g": 8}
    path, thr = trace_file(specs["syn_p25_3j_16g"], tmp_path)
    assert thr == tmp_path.resolve() / "syn_p25_3j_16g.throughputs.json"
    m = run_simulation(path, thr, 16, "fifo").metrics
    # the 16-GPU job (arrives at 384 s) waits for the 4-GPU one (0-2,759 s), then runs 7,200 s: rounds of 120 s
    assert m.jobs == 3 and 2759 + 7200 <= m.makespan <= 2759 + 7200 + 2 * 120
    assert "of the 6 `pollux-philly` jobs of pollux_philly.csv" in specs["syn_p50_3j_8g"].describe()


def test_samples_of_several_directories_join_the_study(tmp_path):
    assert sample(tmp_path / "a") == 0 and sample(tmp_path / "b", "--name", "other") == 0
    both = users_samples(os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")]))
    assert sorted(s.name for s in both) == ["other_p25_3j_16g", "other_p50_3j_8g", "syn_p25_3j_16g", "syn_p50_3j_8g"]
    assert users_samples(None) == [] and users_samples("") == []


def test_build_refuses_a_file_that_is_not_the_source(tmp_path, capsys):
    assert sp.main(["build", "--openb", str(DATA / "alibaba_openb_pod_list.csv"), "--out", str(tmp_path)]) == 2
    assert "SHA-256" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_window_positions():
    rows = [Row(str(i), float(i), 10.0, 1) for i in range(6)]
    assert [r.id for r in sp.window(rows, 0.9, 3)[1]] == ["3", "4", "5"]  # the last 3 when fewer are left
    assert sp.window(rows[::-1], 0.0, 2) == (0, rows[:2])  # arrival order whatever the file's
    with pytest.raises(ValueError, match="position must be in"):
        sp.window(rows, 1.0)
    with pytest.raises(SystemExit):
        sample(Path("/nonexistent"), "--positions", "half")


def test_the_public_windows_with_slurms_starts_run_and_report_against_the_studys_baselines(tmp_path):
    """bench/study_public_starts.py: the default on a committed window with Slurm's own starts, cached by the study's
    run key, and its report reads the study's targets with that run against the baselines' study runs.  On this window
    the study's worst dynamic FTF is a 36-second job held to the next round (docs/public-traces.md); with Slurm's
    starts it starts at once, and the worst falls."""
    from shockwave_lab.bench import study_public_starts as sps

    spec = next(s for s in COMMITTED if s.name == "openb_p50_300j_16g")
    row = sps.run_one(spec, tmp_path, tmp_path / "out")
    assert row["slurm_starts"] is True and row["trace"] == spec.name and math.isfinite(row["ftf_dynamic_worst"])
    assert sps.run_one(spec, tmp_path, tmp_path / "out") == row                 # cached: never re-run
    trace, thr = trace_file(spec, tmp_path)
    rounds = run_simulation(trace, thr, spec.cluster, row["policy"], semantics="controller").metrics
    assert row["ftf_dynamic_worst"] < rounds.ftf_dynamic_worst and row["avg_jct"] <= rounds.avg_jct
    doc = sps.report([spec], tmp_path, tmp_path / "doc.md", tmp_path / "out").read_text()
    assert f"| {spec.name} | 300 / {spec.gpus} |" in doc and "Targets met: makespan <= 1.10 x LB: 1/1" in doc
