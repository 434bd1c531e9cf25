"""Users in generated traces and in the metrics (issue 24): `shockwave trace generate --users N --splitter K`, the
user and account carried to each job's record, each user's GPU share while every user had work, per-user worst
dynamic FTF, the per-user tables of simulate, the report and the study."""
import json

import pytest
from click.testing import CliRunner

from slurm_shockwave.backends.base import JobRecord
from slurm_shockwave.cli.main import cli
from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.metrics import compute, group_shares
from shockwave_lab.report import make_report
from shockwave_lab.simulate import run_simulation
from shockwave_lab.workload.generate import GeneratorOptions, generate
from shockwave_lab.workload.spec import read_spec
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.users import with_users

THR = THROUGHPUTS / "tacc_throughputs.json"
TABLE = ThroughputTable.load(THR)


def rec(i, user, a, f, account="", gpus=1):
    return JobRecord(i, user, gpus, a, f, isolated_runtime=f - a, account=account)


def test_users_round_robin_and_a_splitter():
    jobs = generate(GeneratorOptions(jobs=9, seed=4), TABLE)
    entries = with_users(jobs, 3, seed=4, splitter=4, accounts=2)
    by_user = {}
    for e in entries:
        by_user.setdefault(e["user"], []).append(e)
    assert sorted(by_user) == ["splitter", "u2", "u3"]
    assert len(by_user["u2"]) == len(by_user["u3"]) == 3 and len(by_user["splitter"]) == 12
    assert [e["id"] for e in entries] == list(range(len(entries)))
    for k, original in enumerate(jobs[0::3]):             # jobs 0, 3, 6 are the splitter's, each as 4 jobs
        parts = [e for e in by_user["splitter"] if e["arrival"] == int(original.arrival)]
        assert len(parts) == 4 and {e["total_steps"] for e in parts} == {round(original.total_steps / 4)}
    assert {e["account"] for e in by_user["u2"]} == {"a2"} and {e["account"] for e in by_user["u3"]} == {"a1"}
    assert [e["user"] for e in with_users(jobs, 3)][:3] == ["u1", "u2", "u3"]
    shuffled = [e["user"] for e in with_users(jobs, 3, seed=4, assign="random")]
    assert shuffled == [e["user"] for e in with_users(jobs, 3, seed=4, assign="random")] != ["u1", "u2", "u3"] * 3


def test_trace_generate_with_users_writes_a_job_spec(tmp_path):
    r = CliRunner().invoke(cli, ["trace", "generate", "--jobs", "8", "--seed", "2", "--gpus", "8", "--users", "2",
                                 "--splitter", "3", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    path, = tmp_path.iterdir()
    assert path.name.endswith("_users2_split3.jsonl")
    jobs = read_spec(path, num_gpus=8, throughputs=TABLE)
    assert {j.user for j in jobs} == {"splitter", "u2"} and len(jobs) == 4 * 3 + 4
    plain = CliRunner().invoke(cli, ["trace", "generate", "--jobs", "8", "--seed", "2", "--gpus", "8"])
    assert "user" not in plain.output and len(plain.output.splitlines()) == 8      # a .trace: no users
    bad = CliRunner().invoke(cli, ["trace", "generate", "--jobs", "8", "--splitter", "3"])
    assert bad.exit_code == 2 and "--users" in bad.output


def test_user_shares_while_every_user_has_work():
    # a runs over [0, 100), b over [50, 200): both have work over [50, 100) only
    records = [rec(0, "a", 0, 100), rec(1, "b", 50, 200)]
    usage = [(0, 0, 100, 2), (1, 50, 200, 1)]
    shares, window, fair = group_shares(records, usage, lambda r: r.user, 2)
    assert window == 50 and shares == pytest.approx({"a": 2 / 3, "b": 1 / 3}) and fair == {"a": 0.5, "b": 0.5}
    assert group_shares(records[:1], usage, lambda r: r.user) == ({}, 0.0, {})
    m = compute("p", records, 2, usage=usage)
    assert m.user_gpu_share == pytest.approx({"a": 2 / 3, "b": 1 / 3}) and m.user_share_min == pytest.approx(2 / 3)
    # on 4 GPUs b's 1-GPU job is entitled to 1 GPU, a's 4-GPU job to the other 3
    big = [rec(0, "a", 0, 100, gpus=4), rec(1, "b", 50, 200)]
    assert compute("p", big, 4, usage=usage).user_fair_share == pytest.approx({"a": 0.75, "b": 0.25})
    assert set(m.user_ftf_dynamic_worst) == {"a", "b"} and m.account_gpu_share == m.user_gpu_share
    same_account = [rec(0, "a", 0, 100, "x"), rec(1, "b", 50, 200, "x")]
    assert compute("p", same_account, 2, usage=usage).account_gpu_share == {}


@pytest.fixture(scope="module")
def splitter_spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("users") / "users.jsonl"
    entries = with_users(generate(GeneratorOptions(jobs=24, seed=5, interarrival=20, max_gpus=4), TABLE), 3,
                         seed=5, splitter=4, accounts=2)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_a_policy_fair_between_jobs_gives_the_splitter_more(splitter_spec, tmp_path):
    gavel = run_simulation(splitter_spec, THR, 4, "max_min_fairness")
    m = gavel.metrics
    assert set(m.user_gpu_share) == {"splitter", "u2", "u3"} and sum(m.user_gpu_share.values()) == pytest.approx(1)
    assert m.user_gpu_share["splitter"] > m.user_fair_share["splitter"] and m.user_share_min < 1
    assert set(m.account_gpu_share) == {"a1", "a2"}
    detail = gavel.to_json()["jobs_detail"]
    assert {d["user"] for d in detail} == {"splitter", "u2", "u3"} and {d["account"] for d in detail} == {"a1", "a2"}
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(splitter_spec), "--gpus", "4", "--policy",
                                 "max_min_fairness", "-o", str(out), "--no-progress"])
    assert r.exit_code == 0 and "Per user" in r.output and "splitter" in r.output
    html = tmp_path / "r.html"
    make_report([out], html)
    assert "<h2>Per user</h2>" in html.read_text() and "<h2>Per account</h2>" in html.read_text()


def test_study_tables_per_user_only_with_users():
    from shockwave_lab.bench.study_het import typed_targets, users_tables
    from shockwave_lab.bench.study_traces import TYPED, USERS
    row = {"user_gpu_share": {"splitter": 0.4, "u2": 0.3, "u3": 0.3}, "user_ftf_dynamic_worst": {"splitter": 1.0},
           "user_fair_share": {"splitter": 0.3}, "user_share_min": 0.9}
    lines = users_tables([(USERS[0], {"shockwave-edf": row, "max_min_fairness": None}),
                          (USERS[1], {"shockwave-edf": {"user_gpu_share": {}}})])
    assert sum(line.startswith("### ") for line in lines) == 1
    assert any("40.0% (30.0%) / 1.00" in line and "0.900" in line for line in lines)
    run = {"makespan": 100.0, "makespan_over_lb": 1.1, "lower_bound": 90.0, "ftf_dynamic_worst": 2.0,
           "ftf_dynamic_p95": 1.5}
    table, met = typed_targets([(TYPED[0], {"shockwave-edf": run, "max_min_fairness_het": {**run, "makespan": 120.0}})])
    assert met == {"makespan < Gavel-het": [1, 1], "worst dyn. FTF < Gavel-het": [0, 1]}
