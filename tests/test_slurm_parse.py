"""Pure tests of the Slurm CLI layer on outputs recorded from real Slurm 22.05.8, 24.11.5 and
26.05.5 clusters (``tests/data/slurm/<version>/``, made by ``python -m tests.slurm_fixtures
record tests/data/slurm/<version> <version>``): every test on recorded data runs on each
version (argv construction: test_slurm_commands.py). No Slurm needed."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from slurm_shockwave.slurm import (SlurmCLI, SlurmError, filter_jobs, parse_gpu_count, parse_sbatch_parsable,
                                   parse_sinfo_json, parse_sprio_site, parse_squeue_json)
from tests.slurm_fixtures import ODD_COMMENT, ODD_NAME

DATA = Path(__file__).parent / "data" / "slurm"
VERSIONS = sorted(p.name for p in DATA.iterdir() if p.is_dir() and (p / "squeue_mixed.json").exists())
per_version = pytest.mark.parametrize("version", VERSIONS)


def load(version: str, name: str) -> str:
    return (DATA / version / name).read_text()


def by_name(version: str, name: str) -> dict:
    return {j.name: j for j in parse_squeue_json(load(version, name))}


def test_all_three_versions_recorded():
    assert {"22.05", "24.11", "26.05"} <= set(VERSIONS)
    for v in VERSIONS:
        assert load(v, "VERSION").split()[-1].startswith(v)


# ---------------------------------------------------------------------- squeue --json
@per_version
def test_empty_queue(version):
    assert parse_squeue_json(load(version, "squeue_empty.json")) == []


@per_version
def test_mixed_queue_states_and_reasons(version):
    jobs = by_name(version, "squeue_mixed.json")
    assert len(jobs) == 9
    assert (jobs["run-a"].state, jobs["run-a"].state_reason) == ("RUNNING", "None")
    assert jobs["pend-2node"].state == "PENDING" and not jobs["pend-2node"].held
    assert (jobs["fails"].state, jobs["fails"].state_reason) == ("FAILED", "NonZeroExitCode")
    assert jobs["fails"].finished and not jobs["run-a"].finished
    assert [j.job_id for j in parse_squeue_json(load(version, "squeue_mixed.json"))] == list(range(1, 10))


@per_version
def test_gpu_requests(version):
    jobs = by_name(version, "squeue_mixed.json")
    assert (jobs["run-a"].gpus, jobs["run-a"].gpus_per_node) == (2, 2)        # --gres=gpu:2
    assert (jobs["run-c-perjob"].gpus, jobs["run-c-perjob"].gpus_per_node) == (2, None)  # --gpus=2
    two_node = jobs["pend-2node"]                                              # -N 2 --gres=gpu:4
    assert (two_node.gpus, two_node.gpus_per_node, two_node.num_nodes) == (8, 4, 2)
    assert jobs["fails"].gpus == 0
    assert jobs["run-a"].gres_detail == ("gpu:2(IDX:0-1)",)


@per_version
def test_held_jobs(version):
    jobs = by_name(version, "squeue_mixed.json")
    admin, user = jobs["held-admin"], jobs["held-user"]
    assert (admin.held, admin.priority, admin.state_reason) == (True, 0, "JobHeldAdmin")
    assert (user.held, user.priority, user.state_reason) == (True, 0, "JobHeldUser")
    running_held = jobs["run-c-perjob"]  # hold on a running job: keeps running, priority 0
    assert running_held.running and running_held.held and running_held.priority == 0
    assert not jobs["run-a"].held


@per_version
def test_nice_wraparound_and_site_priority(version):
    jobs = by_name(version, "squeue_mixed.json")
    site = jobs["pend-site"]           # SiteFactor=5000 Nice=-999 -> printed as 4294966297
    assert site.nice == -999
    assert site.priority == 5999
    assert site.site_factor is None    # not in any version's squeue JSON; see sprio
    assert jobs["run-a"].nice == 0     # null in 22.05's JSON, 0 later
    raw = json.loads(load(version, "squeue_mixed.json"))
    raw_nice = {j["name"]: j["nice"] for j in raw["jobs"]}["pend-site"]
    assert raw_nice == (4294966297 if version == "22.05" else -999)   # 22.05 prints uint32
    assert jobs["pend-2node"].priority == 1  # SiteFactor=-50: multifactor floor is 1


@per_version
def test_fields_users_comment_requeue_paths(version):
    jobs = by_name(version, "squeue_mixed.json")
    a = jobs["run-a"]
    assert (a.user, a.partition, a.comment, a.requeue) == ("root", "gpu", "shockwave:a", True)
    if version == "22.05":   # the host's Slurm; through a chroot (newer versions) only root submits
        assert jobs["run-b-user"].user == "swjobuser" and jobs["run-b-user"].user_id != 0
    else:
        assert jobs["run-b-user"].user == "root" and jobs["run-b-user"].user_id == 0
    assert jobs["run-c-perjob"].requeue is False            # --no-requeue
    # 22.05 and 26.05 print the pattern, 24.11 expands %j
    assert a.std_out.endswith(("/work/out.%j", f"/work/out.{a.job_id}")) and a.working_dir.endswith("/work")
    assert a.submit_time and a.start_time and a.start_time >= a.submit_time
    assert jobs["held-user"].eligible_time is None          # submitted with -H: never eligible yet


@per_version
def test_odd_name_and_comment_survive(version):
    odd = [j for j in parse_squeue_json(load(version, "squeue_mixed.json")) if j.job_id == 5][0]
    assert odd.name == ODD_NAME
    assert odd.comment == ODD_COMMENT
    assert odd.state == "COMPLETED"


@per_version
def test_requeued_and_requeuehold(version):
    jobs = by_name(version, "squeue_requeued.json")
    a, b = jobs["run-a"], jobs["run-b-user"]
    assert (a.state, a.state_reason, a.restart_count, a.held) == ("PENDING", "BeginTime", 1, False)
    assert a.eligible_time is not None
    # requeuehold, even by root, is a *user* hold
    assert (b.state, b.state_reason, b.restart_count, b.held) == ("PENDING", "JobHeldUser", 1, True)
    restarted = by_name(version, "squeue_restarted.json")["run-a"]
    assert (restarted.state, restarted.restart_count) == ("RUNNING", 1)
    assert restarted.gres_detail and restarted.gpus == 2


@per_version
def test_finished_jobs_are_not_held(version):
    jobs = parse_squeue_json(load(version, "squeue_finished.json"))
    assert all(j.finished for j in jobs)
    assert not any(j.held for j in jobs)
    assert {j.state for j in jobs} == {"CANCELLED", "COMPLETED", "FAILED"}


@per_version
def test_filter_jobs(version):
    jobs = parse_squeue_json(load(version, "squeue_mixed.json"))
    assert [j.job_id for j in filter_jobs(jobs, job_ids=[2, 7])] == [2, 7]
    assert {j.state for j in filter_jobs(jobs, states=["pending"])} == {"PENDING"}
    assert filter_jobs(jobs, job_ids=[], states=None) == []


@pytest.mark.parametrize("text", [
    "", "not json", '{"jobs": [', "[]", '{"meta": {}}', '{"jobs": {}}',
    '{"errors": [{"error": "boom", "errno": 1}], "jobs": []}',
])
def test_wholly_unreadable_squeue_output_raises(text):
    with pytest.raises(SlurmError):
        parse_squeue_json(text)


@pytest.mark.parametrize("record", [{"name": "no id"}, {"job_id": "7"}, {"job_id": -3}, "junk", None])
def test_record_without_readable_id_is_skipped_with_warning(record, caplog):
    good = json.loads(load("24.11", "squeue_mixed.json"))["jobs"][0]
    text = json.dumps({"errors": [], "jobs": [record, good]})
    jobs = parse_squeue_json(text)
    assert [j.job_id for j in jobs] == [good["job_id"]] and jobs[0].problem is None
    assert any(r.levelname == "WARNING" for r in caplog.records)


@per_version
def test_unreadable_record_yields_job_with_problem(version):
    data = json.loads(load(version, "squeue_mixed.json"))
    data["jobs"][3]["priority"] = "high"                          # one bad record
    data["jobs"][5]["job_state"] = 42
    jobs = parse_squeue_json(json.dumps(data))
    assert len(jobs) == 9                                          # the round still sees every job
    bad = {j.job_id: j for j in jobs if j.problem}
    assert set(bad) == {4, 6}
    assert "priority" in bad[4].problem and "job_state" in bad[6].problem and "\n" not in bad[4].problem
    assert bad[4].name == "pend-2node" and bad[4].state == "UNKNOWN" and not bad[4].held
    assert all(j.problem is None for j in jobs if j.job_id not in bad)


@per_version
def test_unknown_field_and_version_warn_once_but_parse(version, caplog):
    from slurm_shockwave.slurm import shapes
    shapes._warned.clear()
    data = json.loads(load(version, "squeue_mixed.json"))
    for job in data["jobs"]:
        job["brand_new_field_x"] = {"a": 1}
    key = "Slurm" if version == "22.05" else "slurm"
    data["meta"][key]["release"] = "99.11.0"
    jobs = parse_squeue_json(json.dumps(data))
    assert len(jobs) == 9 and not any(j.problem for j in jobs)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("brand_new_field_x" in w for w in warnings) == 1    # named, once
    assert sum("99.11.0" in w and "not a tested version" in w for w in warnings) == 1


@pytest.mark.parametrize("value,state,flags", [
    ("RUNNING", "RUNNING", ()), (["PENDING"], "PENDING", ()),
    (["REQUEUED", "PENDING"], "PENDING", ("REQUEUED",)),            # base state, not the first item
    (["RUNNING", "COMPLETING"], "COMPLETING", ("RUNNING",)),     # as 22.05's string; base kept
    (["COMPLETED", "COMPLETING"], "COMPLETING", ("COMPLETED",)),
    (["RUNNING", "CONFIGURING"], "CONFIGURING", ("RUNNING",)),
    (["PENDING", "REQUEUE_HOLD"], "PENDING", ("REQUEUE_HOLD",)),
    (["SIGNALING", "RUNNING"], "RUNNING", ("SIGNALING",)),
])
def test_job_state_shapes(value, state, flags):
    from slurm_shockwave.slurm.shapes import job_state_of
    assert job_state_of(value) == (state, flags)


def test_number_shapes():
    from slurm_shockwave.slurm.shapes import JobRecord
    base = {"job_id": 5, "job_state": ["PENDING"]}
    rec = JobRecord.model_validate({**base, "priority": {"set": True, "infinite": False, "number": 7},
                                    "time_limit": {"set": False, "infinite": True, "number": 0},
                                    "submit_time": {"set": True, "infinite": False, "number": 1700000000}})
    assert (rec.priority, rec.time_limit, rec.submit_time) == (7, None, 1700000000)
    assert JobRecord.model_validate({**base, "priority": 3, "time_limit": None}).priority == 3
    for bad in ({"set": True, "number": "x"}, {"set": True, "number": 1.5}, True, "3",
                {"set": True, "number": float("nan")}, {"weird": 1}):
        with pytest.raises(Exception):
            JobRecord.model_validate({**base, "priority": bad})


@per_version
def test_admin_comment_read_back(version):
    jobs = by_name(version, "squeue_mixed.json")
    assert jobs["held-admin"].admin_comment == "shockwave: deferred, planned at 14:32"
    assert jobs["run-a"].admin_comment == ""


@per_version
def test_newer_sinfo_without_node_list_says_so(version):
    text = load(version, "sinfo_idle.json")
    if version == "22.05":
        assert [n.name for n in parse_sinfo_json(text)] == ["node1", "node2"]
    else:
        with pytest.raises(SlurmError, match="scontrol show nodes"):
            parse_sinfo_json(text)


@per_version
def test_cli_learns_node_source_from_version(version):
    outputs = {"squeue": load(version, "squeue_mixed.json"), "sinfo": load(version, "sinfo_busy.json"),
               "scontrol": load(version, "nodes_busy.json")}
    calls = []

    def runner(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, outputs[argv[0].rsplit("/", 1)[-1]], "")

    cli = SlurmCLI(runner=runner, bin_dir="/opt/slurm/bin")
    assert len(cli.sinfo_nodes()) == 2 and len(cli.sinfo_nodes()) == 2
    cli.squeue_jobs()
    assert cli.slurm_version == version
    expected_nodes = ["/opt/slurm/bin/sinfo", "--json"] if version == "22.05" else \
        ["/opt/slurm/bin/scontrol", "show", "nodes", "--json"]
    assert calls[-2] == expected_nodes and calls[-1][:2] == ["/opt/slurm/bin/squeue", "--json"]
    assert cli.node_source == ("sinfo" if version == "22.05" else "scontrol")


@per_version
def test_truncated_recording_raises_not_partial(version):
    text = load(version, "squeue_mixed.json")
    for cut in (len(text) // 3, len(text) // 2, len(text) - 5):
        with pytest.raises(SlurmError):
            parse_squeue_json(text[:cut])


# ---------------------------------------------------------------------- sinfo / sprio / sbatch
@per_version
def test_sinfo_idle_and_busy(version):
    idle = parse_sinfo_json(load(version, "nodes_idle.json"))   # what SlurmCLI.sinfo_nodes reads
    assert [n.name for n in idle] == ["node1", "node2"]
    assert all(n.state == "idle" and n.gpus == 4 and n.gpus_used == 0 and n.available for n in idle)
    assert all(n.address == "127.0.0.1" and n.partitions == ("gpu",) for n in idle)
    busy = {n.name: n for n in parse_sinfo_json(load(version, "nodes_busy.json"))}
    assert {n.state for n in busy.values()} == {"mixed"}
    assert sum(n.gpus_used for n in busy.values()) == 6
    assert sum(n.gpus_free for n in busy.values()) == 2


@pytest.mark.parametrize("text", ["", "{", '{"nodes": [{"state": "idle"}]}', '{"errors": ["x"], "nodes": []}'])
def test_bad_sinfo_raises(text):
    with pytest.raises(SlurmError):
        parse_sinfo_json(text)


@per_version
def test_sprio_site_factors(version):
    assert parse_sprio_site(load(version, "sprio_site.txt")) == {4: -50, 6: 5000}
    assert parse_sprio_site("") == {}
    with pytest.raises(SlurmError):
        parse_sprio_site("4 5000\n")


def test_sbatch_parsable():
    assert parse_sbatch_parsable("12\n") == 12
    assert parse_sbatch_parsable("13;cluster\n") == 13
    with pytest.raises(SlurmError):
        parse_sbatch_parsable("sbatch: error: nope")


@pytest.mark.parametrize("spec,count", [
    ("gres:gpu:2", 2), ("gpu:2", 2), ("gpu", 1), ("gres/gpu=4", 4), ("gres/gpu:4", 4),
    ("gres:gpu:a100:2", 2), ("gres/gpu=4,gres/gpu:a100=4", 4),
    ("gpu:a100:2(IDX:0,2),gpu:v100:1", 3), ("gpu:(null):3(IDX:0-2)", 3),
    ("cpu=1,mem=16000M,node=1,billing=1,gres/gpu=2", 2),
    ("cpu=1,mem=1G", None), ("", None), (None, None), ("(null)", None), ("gres:mps:100", None),
])
def test_parse_gpu_count(spec, count):
    assert parse_gpu_count(spec) == count
