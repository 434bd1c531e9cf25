"""`shockwave trace import` end to end through click: the job spec it writes (read back by the simulator's own
reader), the one summary line, the options (--max-gpus/--over, --fractional, --adaptation-mix, --no-gpu-types,
--throughputs-out), one-line errors with exit status 2 and no traceback, and an imported file run by
`shockwave simulate` (untyped and typed clusters)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.workload.spec import read_spec
from shockwave_lab.workload.throughputs import ThroughputTable
from slurm_shockwave.cli.main import cli

DATA = Path(__file__).resolve().parent / "data" / "imports"
TACC = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")


def run(*args):
    return CliRunner().invoke(cli, ["trace", "import", *map(str, args)])


def test_writes_a_job_spec_and_one_summary_line(tmp_path):
    out = tmp_path / "jobs.jsonl"
    r = run("--format", "sacct-json", DATA / "sacct_24.11.json", "--out", out)
    assert r.exit_code == 0, r.output
    assert r.stderr == f"imported 7 jobs from {DATA / 'sacct_24.11.json'} (dropped: 1 no GPUs, 1 never started)\n"
    assert r.stdout == ""
    jobs = read_spec(out, num_gpus=8, throughputs=TACC)  # what simulate reads
    assert [j.job_id for j in jobs] == ["1", "2", "4_0", "4_1", "4_2", "5", "6"]
    assert {j.user for j in jobs} == {"sw-ann", "sw-bob"} and {j.account for j in jobs} == {"teama", "teamb"}
    for j in jobs:  # alone, its measured run time
        assert j.mode == "static" and (j.model, j.initial_bs) == ("ResNet-18", 32)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert {e["id"]: e["preemptible"] for e in rows if "preemptible" in e} == {"6": True}  # its submit line's --requeue
    to_stdout = run("--format", "sacct-json", DATA / "sacct_24.11.json")
    assert to_stdout.stdout == out.read_text()


def test_limits_fractions_and_types(tmp_path):
    r = run("--format", "helios", DATA / "helios_cluster_log.csv", "--max-gpus", 8, "--over", "clip")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == (
        f"imported 4 jobs from {DATA / 'helios_cluster_log.csv'} (dropped: 1 no GPUs, "
        "1 never started, 1 zero run time; clipped: 1 over 8 GPUs)"
    )
    assert {e["id"]: e["gpus"] for e in map(json.loads, r.stdout.splitlines())}["1005"] == 8
    pai = ["--format", "pai", DATA / "pai_job_table.csv", "--tasks", DATA / "pai_task_table.csv"]
    r = run(*pai, "--fractional", "drop", "--no-gpu-types")
    assert "1 fractional GPUs" in r.stderr and "clipped" not in r.stderr
    assert all("gpu_type" not in e for e in map(json.loads, r.stdout.splitlines()))
    r = run(*pai)
    assert {e["id"]: e.get("gpu_type") for e in map(json.loads, r.stdout.splitlines())} == {
        "4b3f04b66a525d2df903eb16": "v100",
        "job-ps-worker": "t4",
        "job-half": "misc",
        "job-failed": "p100",
    }


def test_adaptation_mix_is_a_seeded_draw(tmp_path):
    lines = ["job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type"]
    lines += [f"{i},{i % 7},A10,4,1,1,{i * 10},{600 + i},{'Spot' if i % 2 else 'HP'}" for i in range(400)]
    (tmp_path / "jobs.csv").write_text("\n".join(lines) + "\n")

    def modes(mix, seed):
        r = run("--format", "alibaba-spot", tmp_path / "jobs.csv", "--adaptation-mix", mix, "--seed", seed)
        assert r.exit_code == 0, r.output
        return [e["mode"] for e in map(json.loads, r.stdout.splitlines())]

    a = modes("static=0.5,gns=0.3,accordion=0.2", 1)
    assert a == modes("static=0.5,gns=0.3,accordion=0.2", 1) != modes("static=0.5,gns=0.3,accordion=0.2", 2)
    n = Counter(a)
    assert 160 < n["static"] < 240 and 80 < n["gns"] < 160 and 40 < n["accordion"] < 120  # 200 / 120 / 80
    assert set(modes("gns=1", 0)) == {"gns"} and set(modes("static=1", 0)) == {"static"}


def test_errors_are_one_line_with_status_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "7,u,vc,1e9,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 19:41:01,3600,0\n"
    )
    cases = [
        (["--format", "helios", bad], f"{bad}:2: gpu_num: '1e9' is absurd for a GPU count (at most 100000)"),
        (["--format", "helios", tmp_path / "nope.csv"], f"{tmp_path / 'nope.csv'}: file not found"),
        (
            ["--format", "helios", bad, "--adaptation-mix", "static=0.5,gns=0.6"],
            "--adaptation-mix: shares must sum to 1, got 1.1 in 'static=0.5,gns=0.6'",
        ),
        (
            ["--format", "helios", bad, "--adaptation-mix", "fast=1"],
            "--adaptation-mix: expected MODE=SHARE,... with modes static, gns, accordion and shares in [0, 1], "
            "got 'fast=1'",
        ),
        (
            ["--format", "helios", DATA / "helios_cluster_log.csv", "--out", tmp_path / "x.json"],
            f"--out must end in .jsonl (the job spec's JSON Lines), got '{tmp_path / 'x.json'}'",
        ),
        (["--format", "helios", DATA / "helios_cluster_log.csv", "--tasks", bad], "--tasks is for --format pai only"),
        (
            ["--format", "acme", DATA / "acme_trace_kalos.csv", "--max-gpus", 2],
            f"imported 0 jobs from {DATA / 'acme_trace_kalos.csv'} (dropped: 3 over 2 GPUs): no jobs left to write",
        ),
    ]
    for args, message in cases:
        r = run(*args)
        assert r.exit_code == 2, (args, r.output)
        assert r.stderr.startswith(f"Error: {message}") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.output and r.stdout == ""


def test_imported_files_run_in_simulate(tmp_path):
    # untyped: Helios with a 3- and a 64-GPU job (counts the bundled table lacks: --throughputs-out has them)
    out, thr = tmp_path / "helios.jsonl", tmp_path / "thr.json"
    r = run(
        "--format",
        "helios",
        DATA / "helios_cluster_log.csv",
        "--out",
        out,
        "--throughputs-out",
        thr,
        "--adaptation-mix",
        "static=0.5,gns=0.5",
        "--seed",
        3,
    )
    assert r.exit_code == 0, r.output
    assert "note:" not in r.stderr
    lacking = run("--format", "helios", DATA / "helios_cluster_log.csv")
    assert lacking.stderr.splitlines()[1].startswith("note: ") and "no throughput at 3, 64 GPUs" in lacking.stderr
    res = tmp_path / "res.json"
    s = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--trace",
            str(out),
            "--throughputs",
            str(thr),
            "--gpus",
            "64",
            "--policy",
            "fifo",
            "--json",
            "-o",
            str(res),
        ],
    )
    assert s.exit_code == 0, s.output
    detail = {j["job_id"]: j for j in json.loads(res.read_text())["results"]["fifo"]["jobs_detail"]}
    assert set(detail) == {"1001", "1002", "1005", "1007"} and all(j["finish"] > j["arrival"] for j in detail.values())
    modes = {e["id"]: e["mode"] for e in map(json.loads, out.read_text().splitlines())}
    assert modes == {"1001": "static", "1002": "gns", "1005": "static", "1007": "gns"}  # seed 3's draw
    assert {j: d["gpus"] for j, d in detail.items()} == {"1001": 1, "1002": 8, "1005": 64, "1007": 3}
    assert abs(detail["1001"]["jct"] - 3600) < 1  # alone from t=0: its measured run time (Helios: 1 h)
    # typed: Alibaba PAI's jobs on a cluster of their GPU types
    out, thr = tmp_path / "pai.jsonl", tmp_path / "pai_thr.json"
    r = run(
        "--format",
        "pai",
        DATA / "pai_job_table.csv",
        "--tasks",
        DATA / "pai_task_table.csv",
        "--out",
        out,
        "--throughputs-out",
        thr,
    )
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(thr.read_text())) == ["misc", "p100", "t4", "v100"]
    s = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--trace",
            str(out),
            "--throughputs",
            str(thr),
            "--gpus",
            "v100:1,t4:1,misc:1,p100:4",
            "--policy",
            "fifo",
            "--json",
            "-o",
            str(res),
        ],
    )
    assert s.exit_code == 0, s.output
    detail = {j["job_id"]: j for j in json.loads(res.read_text())["results"]["fifo"]["jobs_detail"]}
    assert abs(detail["4b3f04b66a525d2df903eb16"]["jct"] - 520) < 1  # alone on its v100: its tasks' span
