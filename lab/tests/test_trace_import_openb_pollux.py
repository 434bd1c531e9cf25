"""`shockwave trace import` of the study's public sources (docs/public-traces.md):

* `--format alibaba-openb` (Alibaba GPU trace 2023, ATC '23): a pod is a job; each pod of the synthetic
  lab/tests/data/imports/alibaba_openb_pod_list.csv becomes a known job (arrival from creation_time, run time
  deletion - scheduled, GPUs, type, account = QoS, no user) or is counted as dropped/clipped with its reason;
* `--format pollux-philly` (Philly as the Pollux artifact's simulator/traces/philly.csv): a row is a job; each row of
  the synthetic pollux_philly.csv becomes a known job (arrival from the timestamp, run time `duration`, GPUs,
  account = the virtual cluster, no user) or is counted as dropped with its reason;

and bad input is a one-line error naming file, row and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import assert_import_refused

from shockwave_lab.imports import Rules, load

DATA = Path(__file__).resolve().parent / "data" / "imports"
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"
OPENB = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def jobs(rules=None):
    rows, tally = load("alibaba-openb", DATA / "alibaba_openb_pod_list.csv", rules)
    return {r.id: (r.submit, r.gpus, r.runtime, r.user, r.account, r.gpu_type, r.preemptible) for r in rows}, tally


def test_pods_become_jobs():
    got, tally = jobs()
    assert got == {
        "openb-pod-0000": (100, 1, 3600, None, "LS", None, None),  # Succeeded: deletion - scheduled
        "openb-pod-0001": (160, 1, 1195, None, "BE", None, None),  # 0.22 of a GPU rounded up; deleted while running
        "openb-pod-0002": (400, 8, 540, None, "Burstable", None, None),  # Failed ran until it failed
        "openb-pod-0003": (500, 1, 395, None, "LS", None, None),  # V100M16|V100M32: no single type
        "openb-pod-0004": (600, 2, 4000, None, "LS", "t4", None),
    }
    # 0005 asks for no GPU, 0006 is Pending, 0007 Running at the file's last deletion time, 0008 ran 0 s
    assert dict(tally.dropped) == {"no GPUs": 1, "never started": 1, "still running": 1, "zero run time": 1}
    assert dict(tally.clipped) == {"fractional GPUs rounded up": 1}


def test_fractional_pods_can_be_dropped_and_big_ones_clipped():
    got, tally = jobs(Rules(fractional="drop", max_gpus=4, over="clip"))
    assert "openb-pod-0001" not in got and tally.dropped["fractional GPUs"] == 1
    assert got["openb-pod-0002"][1:3] == (4, 540) and tally.clipped == {"over 4 GPUs": 1}


def test_a_running_pod_before_the_end_ran(tmp_path):
    """Only the pods deleted at the trace's end (the latest deletion_time) were still running."""
    path = tmp_path / "pods.csv"
    path.write_text(OPENB + "p0,1,1,1,1000,,LS,Running,0,90,10\np1,1,1,1,1000,,LS,Succeeded,5,70,6\n")
    rows, tally = load("alibaba-openb", path)
    assert [(r.id, r.runtime) for r in rows] == [("p1", 64)] and dict(tally.dropped) == {"still running": 1}
    path.write_text(OPENB + "p0,1,1,1,1000,,LS,Running,0,50,10\np1,1,1,1,1000,,LS,Succeeded,5,90,6\n")
    rows, tally = load("alibaba-openb", path)
    assert [(r.id, r.runtime) for r in rows] == [("p0", 40), ("p1", 84)] and not tally.dropped


def test_rows_become_jobs_named_by_their_line():
    rows, tally = load("pollux-philly", DATA / "pollux_philly.csv")
    t0 = min(r.submit for r in rows)
    got = {r.id: (r.submit - t0, r.gpus, r.runtime, r.user, r.account) for r in rows}
    assert got == {
        "philly-2": (2932, 1, 66, None, "11cb48"),  # 07:01:55, after the earliest (line 3, 06:13:03)
        "philly-3": (0, 1, 2951, None, "6214e9"),
        "philly-4": (33, 4, 2759, None, "6214e9"),
        "philly-7": (417, 16, 7200, None, "103959"),
        "philly-8": (1017, 8, 600, None, "6214e9"),
        "philly-9": (1917, 2, 1800, None, "11cb48"),
    }
    assert dict(tally.dropped) == {"zero run time": 1, "no GPUs": 1} and not tally.clipped
    assert all(r.gpu_type is None and r.preemptible is None for r in rows)


BAD = [
    (
        "alibaba-openb",
        OPENB + "p,1,1,1,1000,,LS,Evicted,0,10,0\n",
        ":2: pod_phase: expected one of succeeded, failed, running, pending",
    ),
    (
        "alibaba-openb",
        OPENB + "p,1,1,1,1000,,LS,Succeeded,10,20,5\n",
        ":2: scheduled_time: before its creation_time (-5 s)",
    ),
    (
        "alibaba-openb",
        OPENB + "p,1,1,1,1000,,LS,Succeeded,0,5,10\n",
        ":2: deletion_time: ends before its scheduled_time (-5 s)",
    ),
    (
        "alibaba-openb",
        OPENB + "p,1,1,1,1500,,LS,Succeeded,0,5,0\n",
        ":2: gpu_milli: '1500' is absurd for thousandths of a GPU",
    ),
    ("alibaba-openb", OPENB + "p,1,1,1.5,1000,,LS,Succeeded,0,5,0\n", ":2: num_gpu: not a whole number: '1.5'"),
    ("alibaba-openb", OPENB + "p,1,1,1,1000,,LS,Succeeded,nan,5,0\n", ":2: creation_time: not a finite number"),
    (
        "alibaba-openb",
        OPENB + "p,1,1,1,1000,,LS,Succ\n",
        ":2: row: expected 11 comma-separated fields, found 8 (a truncated file?)",
    ),
    (
        "alibaba-openb",
        "name,num_gpu,qos\n",
        ":1: header: missing column(s) gpu_milli, pod_phase, creation_time, deletion_time",
    ),
    (
        "pollux-philly",
        PHILLY + "2017-10-09 07:01:55,66.0,2,66.0,a\n",
        ":2: gpu_time: 66 is not duration x num_gpus (66 x 2)",
    ),
    ("pollux-philly", PHILLY + "2017-10-09 07:01:55,-1,1,0,a\n", ":2: duration: must not be negative"),
    ("pollux-philly", PHILLY + "yesterday,66.0,1,66.0,a\n", ":2: timestamp: not a date and time: 'yesterday'"),
    ("pollux-philly", PHILLY + ",66.0,1,66.0,a\n", ":2: timestamp: missing"),
    ("pollux-philly", PHILLY + "2017-10-09 07:01:55,66.0,0.5,33.0,a\n", ":2: num_gpus: not a whole number: '0.5'"),
    (
        "pollux-philly",
        PHILLY + "2017-10-09 07:01:55,66.0\n",
        ":2: row: expected 5 comma-separated fields, found 2 (a truncated file?)",
    ),
]


@pytest.mark.parametrize("fmt,text,problem", BAD, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD)])
def test_bad_input_is_one_line_naming_file_row_and_field(tmp_path, fmt, text, problem):
    assert_import_refused(tmp_path / "in.csv", fmt, text, problem)
