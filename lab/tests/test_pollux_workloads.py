"""Pollux's realistic workloads (`--format pollux-workload`, imports/pollux_workloads.py) and the elastic study
(bench/study_elastic.py): each application becomes its reference model with the artifact's 1-GPU length, batch
sizes the profiled ones nearest, clipping counted, bad rows refused with file, line and field; a tiny study run
writes its result, re-reads it and reports its targets."""

from __future__ import annotations

import ast
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from shockwave_lab.bench import study_elastic as se
from shockwave_lab.bench import study_public as sp
from shockwave_lab.imports import load
from shockwave_lab.imports.common import Tally
from shockwave_lab.imports.pollux_workloads import (
    APPS,
    TACC,
    exclusive_seconds,
    nearest,
    read_jobs,
    throughputs_json,
    to_entries,
)
from shockwave_lab.simulate import load_workload
from shockwave_lab.workload.throughputs import ThroughputTable
from tests.helpers import assert_import_refused

HEAD = "name,time,application,num_replicas,batch_size\n"
ROWS = [
    "cifar10-0,10,cifar10,1,128",
    "cifar10-1,20,cifar10,4,512",
    "ncf-2,30,ncf,4,1024",
    "bert-3,40,bert,1,12",
    "bert-4,50,bert,4,48",
    "deepspeech2-5,60,deepspeech2,1,20",
    "yolov3-6,70,yolov3,2,16",
    "imagenet-7,80,imagenet,16,3200",
]


@pytest.fixture
def table():
    return ThroughputTable.load(TACC)


def write(tmp_path, rows=ROWS, name="workload-1.csv"):
    p = tmp_path / name
    p.write_text(HEAD + "\n".join(rows) + "\n")
    return p


def test_each_application_maps_to_its_model_with_the_artifacts_length(tmp_path, table):
    tally = Tally()
    e = {x["id"]: x for x in to_entries(read_jobs(write(tmp_path)), table, tally=tally)}
    assert {k: v["model"] for k, v in e.items()} == {
        "cifar10-0": "ResNet-18", "cifar10-1": "ResNet-18", "ncf-2": "Recommendation", "bert-3": "Transformer",
        "bert-4": "Transformer", "deepspeech2-5": "Transformer", "yolov3-6": "ResNet-50", "imagenet-7": "ResNet-50",
    }  # fmt: skip
    # batch size: the profiled one nearest on a log scale (512 -> 256 at 4 GPUs; 12 -> 16; 48 -> 64; 3200 -> 128)
    assert [e[k]["batch_size"] for k in ("cifar10-0", "cifar10-1", "bert-3", "bert-4", "imagenet-7")] == [
        128, 256, 16, 64, 128]  # fmt: skip
    # alone on one GPU at (the profile nearest) its initial batch size it runs as long as in the artifact
    for k, app in (("cifar10-0", "cifar10"), ("bert-3", "bert"), ("deepspeech2-5", "deepspeech2")):
        assert exclusive_seconds(e[k], table) == pytest.approx(APPS[app].seconds, rel=2e-3)
        assert e[k]["epochs"] == APPS[app].epochs
    # the same work on more GPUs runs faster; arrival is the row's time
    assert exclusive_seconds(e["cifar10-1"], table) < exclusive_seconds(e["cifar10-0"], table) / 2
    assert [x["arrival"] for x in e.values()] == [10, 20, 30, 40, 50, 60, 70, 80]
    # ncf on 4 GPUs: Recommendation is profiled on one GPU only
    assert e["ncf-2"]["gpus"] == 1 and dict(tally.clipped) == {"Recommendation runs on 1 GPU only": 1}


def test_larger_than_the_cluster_is_clipped_keeping_its_work(tmp_path, table):
    jobs = read_jobs(write(tmp_path))
    tally = Tally()
    big = {x["id"]: x for x in to_entries(jobs, table, max_gpus=8, tally=tally)}["imagenet-7"]
    full = {x["id"]: x for x in to_entries(jobs, table)}["imagenet-7"]
    assert big["gpus"] == 8 and full["gpus"] == 16 and tally.clipped["over 8 GPUs"] == 1
    assert big["samples_per_epoch"] == full["samples_per_epoch"]
    assert exclusive_seconds(big, table) == pytest.approx(2 * exclusive_seconds(full, table))


def test_throughputs_for_counts_the_table_lacks_scale_the_largest_profiled(tmp_path, table):
    entries = to_entries(read_jobs(write(tmp_path)), table)
    thr = throughputs_json(entries)
    scaled = ThroughputTable({ast.literal_eval(k): v["null"] for k, v in thr["v100"].items() if "null" in v})
    assert scaled.get("ResNet-50", 128, 16) == pytest.approx(2 * table.get("ResNet-50", 128, 8))
    assert throughputs_json([x for x in entries if x["gpus"] <= 8]) is None
    assert nearest([16, 64], 32) == 64 and nearest([16, 32, 64], 23) == 32


def test_a_count_the_table_lacks_is_the_largest_profiled_count_below_at_that_batch_size_scaled_linearly():
    t = ThroughputTable({("m (batch size 32)", 1): 10.0, ("m (batch size 32)", 2): 18.0, ("m (batch size 64)", 1): 6.0,
                         ("m (batch size 32)", 4): 30.0})
    assert t.scaled("m", 32, 2) == 18.0                       # profiled: itself
    assert t.scaled("m", 32, 3) == pytest.approx(18.0 * 3 / 2)  # from 2, not from 1
    assert t.scaled("m", 32, 16) == pytest.approx(30.0 * 4)
    assert t.scaled("m", 64, 4) == pytest.approx(6.0 * 4)     # batch 64 is profiled on 1 GPU only
    assert t.scaled("m", 128, 4) is None and t.scaled("other", 32, 2) is None


def test_counts_between_the_profiled_ones_take_the_batch_sizes_of_the_count_below(tmp_path, table):
    """Sia's workloads (SOSP '23, Pollux's format) ask 6, 10, 12 and 14 GPUs: a count the profiles lack runs at a
    batch size profiled at the largest count below it, at that count's rate scaled linearly."""
    rows = ["cifar10-0,10,cifar10,6,2048", "cifar10-1,20,cifar10,12,4096", "imagenet-2,30,imagenet,14,3200",
            "cifar10-3,40,cifar10,4,2048"]  # fmt: skip
    e = {x["id"]: x for x in to_entries(read_jobs(write(tmp_path, rows)), table)}
    assert [e[k]["gpus"] for k in e] == [6, 12, 14, 4]
    assert e["cifar10-0"]["batch_size"] in table.batch_sizes("ResNet-18", 4)
    assert e["cifar10-1"]["batch_size"] in table.batch_sizes("ResNet-18", 8)
    assert e["imagenet-2"]["batch_size"] in table.batch_sizes("ResNet-50", 8)
    six, four = exclusive_seconds(e["cifar10-0"], table), exclusive_seconds(e["cifar10-3"], table)
    assert six == pytest.approx(four * 4 / 6)  # the same work at the 4-GPU rate x 6/4
    rows_, tally = load("pollux-workload", tmp_path / "workload-1.csv")
    assert len(rows_) == 4 and not tally.clipped


def test_registered_format_gives_rows_of_the_exclusive_time(tmp_path, table):
    rows, tally = load("pollux-workload", write(tmp_path))
    entries = {x["id"]: x for x in to_entries(read_jobs(tmp_path / "workload-1.csv"), table)}
    assert len(rows) == len(ROWS) and tally.clipped
    for r in rows:
        assert r.runtime == pytest.approx(exclusive_seconds(entries[r.id], table)) and r.gpus == entries[r.id]["gpus"]


@pytest.mark.parametrize(
    "row,problem",
    [
        ("x-1,10,resnet,1,32", ":3: application: unknown 'resnet'"),
        ("x-1,-5,cifar10,1,128", ":3: time: must not be negative"),
        ("x-1,10,cifar10,1.5,128", ":3: num_replicas: not a whole number"),
        ("x-1,10,cifar10,0,128", ":3: num_replicas: not a whole number >= 1"),
        ("x-1,10,cifar10,1,abc", ":3: batch_size: not a number"),
        ("cifar10-0,10,cifar10,1,128", ":3: name: 'cifar10-0' already on line 2"),
        ("x-1,10,cifar10,1", ":3: row: expected 5 comma-separated fields"),
    ],
)
def test_bad_rows_are_refused_with_their_line(tmp_path, row, problem):
    assert_import_refused(tmp_path / "w.csv", "pollux-workload", HEAD + ROWS[0] + "\n" + row + "\n", problem)


def test_a_missing_column_is_refused(tmp_path):
    text = "name,time,application,batch_size\ncifar10-0,10,cifar10,128\n"
    assert_import_refused(tmp_path / "w.csv", "pollux-workload", text, ":1: header: missing column(s) num_replicas")


def test_variants(tmp_path, table):
    data = tmp_path / "data"
    write(tmp_path)
    records = se.make(tmp_path, data, sizes=(16,))
    assert [r["name"] for r in records] == ["pollux_w1_16g"] and "source" not in records[0]  # not the artifact's file
    (spec,) = se.traces(data)[:1]
    trace, thr = se.trace_file(spec, tmp_path)
    jobs = load_workload(trace, ThroughputTable.load(thr), 16)
    assert all(j.gpus_range is None for j in se.variant(jobs, "rigid"))
    assert [j.gpus_range for j in se.variant(jobs, "all")] == [(1, max(8, j.num_gpus)) for j in jobs]
    mix = se.variant(jobs, "mix")
    assert sum(j.gpus_range is not None for j in mix) == len(jobs) // 2
    assert mix == se.variant(jobs, "mix") and mix != se.variant(jobs, "mix", seed=se.MIX_SEED + 1)
    with pytest.raises(ValueError, match="unknown variant"):
        se.variant(jobs, "some")


def test_sias_saturn_workloads_are_made_under_their_own_name_and_source(tmp_path, monkeypatch):
    d = tmp_path / "saturn"
    d.mkdir()
    write(d, ["cifar10-0,10,cifar10,6,2048", "bert-1,20,bert,12,384"])
    (rec,) = se.make(d, tmp_path / "data", sizes=(64,), prefix="saturn")
    assert rec["name"] == "saturn_w1_64g" and rec["gpus"] == 64 and rec["jobs"] == 2 and "source" not in rec
    # a file of the Sia artifact (known by its SHA-256) is named by its repository, commit and path
    sia = replace(sp.SOURCES["saturn_w1"], sha256=sp.sha256(d / "workload-1.csv"))
    monkeypatch.setitem(sp.SOURCES, "saturn_w1", sia)
    (rec,) = se.make(d, tmp_path / "data", sizes=(64,), prefix="saturn")
    assert rec["source"] == {"repo": "siasosp23/artifacts", "commit": sia.commit, "path": sia.path}


def test_a_tiny_elastic_study_runs_caches_and_reports(tmp_path):
    rows = [f"cifar10-{i},{60 * i},cifar10,{1 + 3 * (i % 2)},128" for i in range(6)]
    write(tmp_path, rows, "workload-3.csv")
    data, out = tmp_path / "data", tmp_path / "out"
    se.make(tmp_path, data, sizes=(8,))
    (spec,) = se.traces(data)[:1]
    tmpdir = Path(tempfile.mkdtemp(dir=tmp_path))
    todo = se.runs([spec], others=[])
    assert [(p, v) for _, p, v in todo] == [(p, v) for p in ("shockwave-edf", "pollux") for v in se.VARIANTS]
    got = {(r["policy"], r["variant"]): r for r in se.run_all(todo, tmpdir, workers=1, out=out)}
    assert {k: r["elastic_jobs"] for k, r in got.items() if k[0] == "shockwave-edf"} == {
        ("shockwave-edf", "rigid"): 0, ("shockwave-edf", "all"): 6, ("shockwave-edf", "mix"): 3}  # fmt: skip
    assert all(r["jobs"] == 6 and r["avg_jct"] > 0 for r in got.values())
    path = se.result_path(spec, "shockwave-edf", "all", out)
    before = path.stat().st_mtime_ns
    assert se.run_one(spec, "shockwave-edf", "all", tmpdir, out) == got[("shockwave-edf", "all")]
    assert path.stat().st_mtime_ns == before  # read back, not re-run
    kind, checks = se.targets(spec, 0.5, out)
    assert kind == "light" and [(v, name) for v, name, *_ in checks] == [
        (v, name) for v in ("all", "mix") for name in ("avg JCT <= Pollux's", "worst dyn. FTF < Pollux's")
    ]
    d, p = got[("shockwave-edf", "all")], got[("pollux", "all")]
    x, y = round(d["avg_jct"]), round(p["avg_jct"])
    assert checks[0][2:] == (x, y, x <= y)
    kind, checks = se.targets(spec, 1.5, out)
    rigid = got[("shockwave-edf", "rigid")]
    x, y = round(d["makespan"]), round(rigid["makespan"])
    assert kind == "contended" and checks[0][2:] == (x, y, x <= 1.01 * y)
    doc = tmp_path / "elastic.md"
    doc.write_text("# kept intro\n\n" + se.MARK + "\nold tables\n")
    se.write_report([spec], tmpdir, doc, out)
    text = doc.read_text()
    assert text.startswith("# kept intro") and "old tables" not in text and spec.name in text
