"""`shockwave trace import` of the public traces (Philly, Helios, Acme, Alibaba PAI 2020, Alibaba spot GPU 2026):
each synthetic file in lab/tests/data/imports/ (written for these tests in the trace's own format: no data of the
traces is committed) holds known jobs, and each becomes a known job (arrival, GPUs, type, run time, user, account,
preemptible) or is counted as dropped/clipped with its reason; bad input is a one-line error naming file, row and
field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import assert_import_refused

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.imports import Row, Rules, Tally, admit, load
from shockwave_lab.imports.entries import to_entries
from shockwave_lab.workload.spec import JobEntry
from shockwave_lab.workload.throughputs import ThroughputTable
from slurm_shockwave.loader import InputFileError

DATA = Path(__file__).resolve().parent / "data" / "imports"


def jobs(fmt, name, rules=None, **kw):
    rows, tally = load(fmt, DATA / name, rules, **kw)
    t0 = min(r.submit for r in rows)
    return {r.id: (r.submit - t0, r.gpus, r.runtime, r.user, r.account, r.gpu_type, r.preemptible) for r in rows}, tally


def test_helios():
    got, tally = jobs("helios", "helios_cluster_log.csv")
    assert got == {
        "1001": (0, 1, 3600, "uAnn", "vcX", None, None),
        "1002": (60, 8, 300, "uBob", "vcY", None, None),  # FAILED ran: start -> end
        "1005": (1139, 64, 7200, "uCid", "vcY", None, None),
        "1007": (3600, 3, 5400, "uDan", "vcZ", None, None),
    }  # TIMEOUT ran
    assert dict(tally.dropped) == {"no GPUs": 1, "never started": 1, "zero run time": 1}
    _, tally = jobs("helios", "helios_cluster_log.csv", Rules(max_gpus=32))
    assert tally.dropped["over 32 GPUs"] == 1
    got, tally = jobs("helios", "helios_cluster_log.csv", Rules(max_gpus=32, over="clip"))
    assert got["1005"][1:3] == (32, 7200) and tally.clipped == {"over 32 GPUs": 1}


def test_acme_seren_and_kalos():
    got, tally = jobs("acme", "acme_trace_seren.csv")
    # zones are honoured: 2023-02-28 16:30 UTC is 2023-03-01 00:30 +08:00, after the first job (00:18:22 +08:00)
    assert got == {
        "5778432": (0, 8, 117, "u5907", None, None, None),
        "5778469": (336, 8, 2693, "u5907", None, None, None),
        "5778470": (698, 16, 7200, "u1111", None, None, None),
    }
    assert dict(tally.dropped) == {"no GPUs": 1}
    got, tally = jobs("acme", "acme_trace_kalos.csv")
    assert got == {
        "dlctk696s0jbvitv": (0, 64, 8, "uf794", None, None, None),
        "dlc1t2ypl09b8qtp": (1664, 64, 70, "uf794", None, None, None),
        "dlcq00000000aaaa": (242, 4, 3600, "u0042", None, None, None),
    }
    assert not tally.dropped


def test_philly_last_attempt_counts():
    got, tally = jobs("philly", "philly_cluster_job_log.json")
    assert got == {
        "application_1506638472019_14199": (0, 8, 7200, "ce2f4c", "ee9e8c", None, None),  # 4+4 GPUs
        "application_1506638472019_14200": (60, 1, 1800, "a1b2c3", "b436b2", None, None),
        "application_1506638472019_14204": (4671, 2, 900, "9f8e7d", "0e4a51", None, None),
    }
    assert dict(tally.dropped) == {"never started": 1, "still running": 1, "no start time logged": 1}


def test_pai_tasks_gpus_types_and_fractions():
    got, tally = jobs("pai", "pai_job_table.csv", tasks=DATA / "pai_task_table.csv")
    assert got == {
        "4b3f04b66a525d2df903eb16": (0, 1, 520, "58540f191766", None, "v100", None),
        "job-ps-worker": (21, 1, 1040, "user2", None, "t4", None),  # ps 0% + 2 x 50%: one GPU
        "job-half": (121, 1, 580, "58540f191766", None, "misc", None),  # 50%: rounded up
        "job-failed": (521, 4, 3400, "user2", None, "p100", None),
    }
    assert dict(tally.dropped) == {
        "no tasks": 1,
        "tasks of unknown jobs": 1,
        "never started": 1,
        "still running": 1,
        "no GPUs": 1,
    }
    assert dict(tally.clipped) == {"fractional GPUs rounded up": 1}
    got, tally = jobs("pai", "pai_job_table.csv", Rules(fractional="drop"), tasks=DATA / "pai_task_table.csv")
    assert "job-half" not in got and tally.dropped["fractional GPUs"] == 1 and not tally.clipped


def test_a_sliver_of_a_gpu_is_rounded_up_to_one_never_to_none():
    # found by fuzzing the importers: 1e-12 GPUs rounded up (less a tolerance for 2.0000000001) gave a job of 0 GPUs
    rows = [Row("tiny", 0.0, 60.0, 1e-12), Row("almost-two", 1.0, 60.0, 2.0000000001), Row("half", 2.0, 60.0, 0.5)]
    tally = Tally()
    assert [(r.id, r.gpus) for r in admit(rows, tally, Rules())] == [("tiny", 1), ("almost-two", 2), ("half", 1)]
    assert dict(tally.clipped) == {"fractional GPUs rounded up": 3}


def test_alibaba_spot_types_organisations_and_preemption():
    got, tally = jobs("alibaba-spot", "alibaba_spot_job_info_df.csv")
    assert got == {
        "239255": (0, 1, 2764799, "13", "13", "a10", False),
        "253689": (0, 1, 15897599, "13", "13", "a10", False),
        "437260": (9589663, 16, 41060, "57", "57", "a100-sxm4-80gb", True),
        "437261": (9589663, 94, 71718, "57", "57", "a100-sxm4-80gb", True),
    }
    assert dict(tally.dropped) == {"no GPUs": 1, "zero run time": 1}


def test_entries_keep_the_measured_run_time():
    """Known job -> known spec entry: ResNet-18 at batch size 32, steps = run time x its throughput there."""
    table = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")
    rows, _ = load("helios", DATA / "helios_cluster_log.csv")
    entries = {e["id"]: e for e in to_entries(rows, table)}
    assert entries["1002"] == {
        "id": "1002",
        "arrival": 60.0,
        "model": "ResNet-18",
        "batch_size": 32,
        "gpus": 8,
        "mode": "static",
        "total_steps": round(300 * table.get("ResNet-18", 32, 8)),
        "user": "uBob",
        "account": "vcY",
    }
    g3 = table.get("ResNet-18", 32, 2) * 3 / 2  # 3 GPUs: not profiled, scaled from 2
    assert entries["1007"]["total_steps"] == round(5400 * g3)
    for e in entries.values():
        thr = table.get("ResNet-18", 32, e["gpus"]) or next(
            table.get("ResNet-18", 32, g0) * e["gpus"] / g0 for g0 in (8, 4, 2, 1) if g0 < e["gpus"]
        )
        assert abs(e["total_steps"] / thr - {r.id: r.runtime for r in rows}[e["id"]]) < 0.5 / thr + 1e-9


SPOT = "job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,duration,job_type\n"
BAD = [
    (
        "helios",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u,vc,NaN,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 19:41:01,3600,0\n",
        ":2: gpu_num: not a finite number",
    ),
    (
        "helios",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u,vc,1000000000,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 19:41:01,3600,0\n",
        ":2: gpu_num: '1000000000' is absurd for a GPU count",
    ),
    (
        "helios",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u,vc,-2,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 19:41:01,3600,0\n",
        ":2: gpu_num: must not be negative",
    ),
    (
        "helios",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 19:41:01,2020-06-09 18:41:01,3600,0\n",
        ":2: end_time: ends before its start_time (-3600 s)",
    ),
    (
        "helios",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 19:41:01,3600,0\n"
        "2,u,vc,1,1,1,COMPL\n",
        ":3: row: expected 12 comma-separated fields, found 7 (a truncated file?)",
    ),
    ("helios", "job_id,user,gpu_num,state\n", ":1: header: missing column(s) submit_time, start_time, end_time, vc"),
    (
        "acme",
        "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time\n"
        "1,u,1,8,1,Other,FAILED,yesterday,2023-03-01 00:18:54+08:00,2023-03-01 00:20:51+08:00,117,32,936\n",
        ":2: submit_time: not a date and time: 'yesterday'",
    ),
    (
        "philly",
        '[{"jobid": "a", "submitted_time": "2017-10-07 01:11:39", "attempts": [{"start_time": '
        '"2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23", "detail": [{"ip": "m1", "gpus": ["g0"]}]}]},'
        ' {"jobid": "b", "submitted_time": "2017-10-07 01:11:39", "attem',
        ":1: bad JSON",
    ),
    (
        "philly",
        '[{"jobid": "a", "submitted_time": "2017-10-07 01:11:39", "attempts": [{"start_time": '
        '"2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23", "detail": [{"ip": "m1", "gpus": "g0"}]}]}]',
        " (job 0): attempts[0].detail: expected a list of {ip, gpus: [...]} objects",
    ),
    ("alibaba-spot", SPOT + "1,13,A10,20,1,1,0,100,Batch\n", ":2: job_type: expected HP or Spot, got 'Batch'"),
    (
        "alibaba-spot",
        SPOT + "1,13,A10,20,8,20000,0,100,Spot\n",
        ":2: gpu_request: 8 x 20000 workers = 160000 GPUs is absurd",
    ),
    ("alibaba-spot", SPOT + "1,13,A10,20,1,1,0,inf,Spot\n", ":2: duration: not a finite number: 'inf'"),
]


@pytest.mark.parametrize("fmt,text,problem", BAD, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD)])
def test_bad_input_is_one_line_naming_file_row_and_field(tmp_path, fmt, text, problem):
    assert_import_refused(tmp_path / "in.txt", fmt, text, problem)


def test_pai_bad_tasks_and_missing_table(tmp_path):
    with pytest.raises(InputFileError, match=r"pai_job_table.csv: --tasks: Alibaba PAI needs the task table"):
        load("pai", DATA / "pai_job_table.csv")
    tasks = tmp_path / "t.csv"
    tasks.write_text("a,worker,1.0,Terminated,10.0,20.0,400.0,10.0,-100.0,V100\n")
    with pytest.raises(InputFileError) as e:
        load("pai", DATA / "pai_job_table.csv", tasks=tasks)
    assert str(e.value) == f"{tasks}:1: plan_gpu: must not be negative, got '-100.0'"


def test_spot_jobs_are_written_preemptible_and_read_back():
    table = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")
    rows, _ = load("alibaba-spot", DATA / "alibaba_spot_job_info_df.csv")
    entries = to_entries(rows, table)
    written = {e["id"]: e.get("preemptible") for e in entries}
    assert written == {"239255": False, "253689": False, "437260": True, "437261": True}
    assert {e["id"]: JobEntry.model_validate(e).preemptible for e in entries} == written
