"""`shockwave trace import` of a site's own accounting: `sacct --json` and `sacct -P` as REAL output of Slurm 22.05,
24.11 and 26.05 (lab/tests/data/imports/sacct_*: recorded by this module's `record`, see the README there).

On each version the cluster ran: a 2-GPU job that completed (1), a 1-GPU job that failed (2), a CPU-only job (3), a
3-task array of 1 GPU each (4_0..4_2), a 1-GPU job cancelled while running (5), an 8-GPU job cancelled while pending
(never started, 9) and a 4-GPU job requeued once and then completed (6).  Re-record (root; ~40 s each):

    PYTHONPATH=. .venv/bin/python lab/tests/test_trace_import_sacct.py record lab/tests/data/imports 24.11
"""

from __future__ import annotations

import calendar
import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.imports import Rules, load
from shockwave_lab.imports.entries import to_entries
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.throughputs import ThroughputTable
from slurm_shockwave.loader import InputFileError

DATA = Path(__file__).resolve().parent / "data" / "imports"
VERSIONS = ("22.05", "24.11", "26.05")
KEPT = {"1": 2, "2": 1, "4_0": 1, "4_1": 1, "4_2": 1, "5": 1, "6": 4}  # job -> GPUs
USERS = {"1": ("sw-ann", "teama"), "2": ("sw-bob", "teamb"), "5": ("sw-bob", "teamb"), "6": ("sw-ann", "teama")}


def _by_id(rows):
    return {r.id: r for r in rows}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fmt,suffix", [("sacct-json", "json"), ("sacct", "txt")])
def test_real_sacct_output_of_every_version(version, fmt, suffix):
    rows, tally = load(fmt, DATA / f"sacct_{version}.{suffix}")
    jobs = _by_id(rows)
    assert {j: r.gpus for j, r in jobs.items()} == KEPT
    assert dict(tally.dropped) == {"no GPUs": 1, "never started": 1} and not tally.clipped
    for j, (user, account) in USERS.items():
        assert (jobs[j].user, jobs[j].account) == (user, account)
    assert all(r.runtime > 0 and r.gpu_type is None for r in rows)
    # job 6 was submitted with --requeue: 24.11 and 26.05 record the submit line (sacct --json), 22.05 and -P do not
    said = {"6": True} if fmt == "sacct-json" and version != "22.05" else {}
    assert {j: r.preemptible for j, r in jobs.items() if r.preemptible is not None} == said


@pytest.mark.parametrize("version", ("24.11", "26.05"))
def test_a_real_batch_scripts_no_requeue_makes_its_job_not_preemptible(version):
    """Real `sacct --json --batch-script` output: a job whose script has `#SBATCH --no-requeue`, its command line
    neither flag."""
    rows, _ = load("sacct-json", DATA / f"sacct_{version}_script.json")
    (job,) = rows
    raw = json.loads((DATA / f"sacct_{version}_script.json").read_text())["jobs"][0]
    assert "requeue" not in raw["submit_line"] and "#SBATCH --no-requeue" in raw["script"]
    assert job.preemptible is False and job.user == "sw-ann" and job.gpus == 1


def test_a_job_submitted_with_no_requeue_is_imported_as_not_preemptible(tmp_path):
    data = json.loads((DATA / "sacct_26.05.json").read_text())
    for j in data["jobs"]:
        if j["job_id"] == 6:      # both runs of the requeued job, as sacct -D lists them
            j["submit_line"] = j["submit_line"].replace("--requeue", "--no-requeue")
        if j["job_id"] == 1:      # after the script: the script's own argument, not sbatch's
            j["submit_line"] += " --no-requeue"
        if j["job_id"] == 2:      # in the batch script (kept with AccountingStoreFlags=job_script)
            j["script"] = "#!/bin/sh\n#SBATCH --no-requeue\nsleep 2; exit 3\n"
    (tmp_path / "s.json").write_text(json.dumps(data))
    rows, _ = load("sacct-json", tmp_path / "s.json")
    jobs = _by_id(rows)
    assert jobs["6"].preemptible is False and jobs["1"].preemptible is None and jobs["2"].preemptible is False
    spec = {e["id"]: e for e in to_entries(rows, ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json"))}
    assert spec["6"]["preemptible"] is False and "preemptible" not in spec["1"]


def _text_runs(version):
    """{job id: [(state, submit, start, end), ...]} straight from the text file, to check the mapping against."""
    lines = (DATA / f"sacct_{version}.txt").read_text().splitlines()
    head = lines[0].split("|")
    out = {}
    for ln in lines[1:]:
        c = dict(zip(head, ln.split("|"), strict=True))
        out.setdefault(c["JobID"], []).append(c)
    return out


def _t(stamp):
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


@pytest.mark.parametrize("version", VERSIONS)
def test_requeued_job_arrives_at_its_first_submit_and_runs_its_last_run(version):
    runs = _text_runs(version)["6"]
    assert [r["State"] for r in runs] == ["REQUEUED", "COMPLETED"]  # sacct -D shows both runs
    assert runs[1]["Submit"] > runs[0]["Submit"]  # Slurm resets Submit at the requeue
    for fmt, suffix in (("sacct-json", "json"), ("sacct", "txt")):
        job = _by_id(load(fmt, DATA / f"sacct_{version}.{suffix}")[0])["6"]
        first = min(_by_id(load(fmt, DATA / f"sacct_{version}.{suffix}")[0]).values(), key=lambda r: r.submit)
        assert job.submit - first.submit == _t(runs[0]["Submit"]) - _t(_text_runs(version)["1"][0]["Submit"])
        assert job.runtime == _t(runs[1]["End"]) - _t(runs[1]["Start"])  # the run that finished


@pytest.mark.parametrize("version", VERSIONS)
def test_json_and_text_give_the_same_jobs(version):
    a = _by_id(load("sacct-json", DATA / f"sacct_{version}.json")[0])
    b = _by_id(load("sacct", DATA / f"sacct_{version}.txt")[0])
    assert a.keys() == b.keys()
    t0a, t0b = min(r.submit for r in a.values()), min(r.submit for r in b.values())
    for j in a:
        assert (a[j].gpus, a[j].runtime, a[j].user, a[j].account) == (b[j].gpus, b[j].runtime, b[j].user, b[j].account)
        assert a[j].submit - t0a == b[j].submit - t0b


def test_without_duplicates_a_requeued_job_arrives_at_its_requeue(tmp_path):
    data = json.loads((DATA / "sacct_24.11.json").read_text())
    data["jobs"] = [j for j in data["jobs"] if "REQUEUED" not in j["state"]["current"]]
    (tmp_path / "s.json").write_text(json.dumps(data))
    job = _by_id(load("sacct-json", tmp_path / "s.json")[0])["6"]
    last = next(j for j in data["jobs"] if j["job_id"] == 6)
    assert job.submit == last["time"]["submission"] and job.runtime == last["time"]["end"] - last["time"]["start"]


def test_steps_are_counted_and_limits_clip_or_drop():
    rows, tally = load("sacct", DATA / "sacct_22.05_steps.txt")
    assert len(rows) == 7 and tally.dropped["job steps"] == 8
    rows, tally = load("sacct", DATA / "sacct_22.05.txt", Rules(max_gpus=2))
    assert "6" not in _by_id(rows) and tally.dropped["over 2 GPUs"] == 1
    rows, tally = load("sacct", DATA / "sacct_22.05.txt", Rules(max_gpus=2, over="clip"))
    assert _by_id(rows)["6"].gpus == 2 and tally.clipped["over 2 GPUs"] == 1
    assert (
        tally.summary(len(rows), "f") == "imported 7 jobs from f (dropped: 1 no GPUs, 1 never started; "
        "clipped: 1 over 2 GPUs)"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_each_job_keeps_the_time_limit_slurm_recorded(version):
    """The recorded clusters' partition gives every job a year (525,600 min; `time.limit`, a number on 22.05 and
    {set, infinite, number} later).  Slurm records the requeued job 6 without a limit (22.05: none on both runs;
    24.11: infinite on both; 26.05: a year on the requeued run, infinite on the last: the earlier run's is kept).
    The text files were recorded without the Timelimit column: no limit."""
    jobs = _by_id(load("sacct-json", DATA / f"sacct_{version}.json")[0])
    year = 525_600 * 60.0
    assert {j: r.limit for j, r in jobs.items()} == {j: year for j in KEPT} | {"6": year if version == "26.05" else None}
    assert {r.limit for r in load("sacct", DATA / f"sacct_{version}.txt")[0]} == {None}


@pytest.mark.parametrize(
    "limit,seconds",
    [("01:30:00", 5400.0), ("2-00:00:00", 172800.0), ("45:00", 2700.0), ("90", 5400.0), ("1-12", 129600.0),
     ("UNLIMITED", None), ("Partition_Limit", None), ("00:00:00", None)],
)  # fmt: skip
def test_text_timelimit_column_in_sbatch_forms(tmp_path, limit, seconds):
    lines = (DATA / "sacct_24.11.txt").read_text().splitlines()
    path = tmp_path / "t.txt"
    path.write_text("\n".join([lines[0] + "|Timelimit"] + [ln + "|" + limit for ln in lines[1:]]) + "\n")
    rows, _tally = load("sacct", path)
    assert rows and {r.limit for r in rows} == {seconds}


@pytest.mark.parametrize(
    "limit,json_limit", [("-1:00", -5), ("1:2:3:4", "x"), ("10 hours", float("nan")), ("9" * 60, 10**9)]
)
def test_a_bad_time_limit_is_an_error_naming_the_row(tmp_path, limit, json_limit):
    lines = (DATA / "sacct_24.11.txt").read_text().splitlines()
    path = tmp_path / "t.txt"
    path.write_text("\n".join([lines[0] + "|Timelimit"] + [ln + "|01:00:00" for ln in lines[1:]]) + "\n")
    text = path.read_text().splitlines()
    text[2] = text[2].rsplit("|", 1)[0] + "|" + limit
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(WorkloadError, match=r"t\.txt:3: Timelimit"):
        load("sacct", path)
    with pytest.raises(WorkloadError, match=r"job 1.*time\.limit"):
        load("sacct-json", _json_with(tmp_path, lambda j: j["time"].update(limit={"set": True, "number": json_limit})))


def _json_with(tmp_path, change):
    data = json.loads((DATA / "sacct_26.05.json").read_text())
    change(data["jobs"][1])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


def _gres(job):
    return next(t for t in job["tres"]["allocated"] if t["type"] == "gres")


@pytest.mark.parametrize(
    "change,field,problem",
    [
        (lambda j: _gres(j).update(count=10**9), "tres.allocated", "absurd"),
        (lambda j: _gres(j).update(count=float("nan")), "tres.allocated", "not a finite number"),
        (lambda j: j["time"].update(submission=-5), "time.submission", "must not be negative"),
        (lambda j: j["time"].update(end=j["time"]["start"] - 10), "time.end", "ends before its time.start"),
        (lambda j: j["time"].pop("start"), "time.start", "missing"),
        (lambda j: j["state"].update(current=[3]), "state.current", "expected a state name"),
        # a nested object that is not one (found by fuzzing: they raised AttributeError)
        (lambda j: j.update(array=7), "array", "expected an object, got int"),
        (lambda j: j.update(het="x"), "het", "expected an object, got str"),
        (lambda j: j.update(tres=[1]), "tres", "expected an object, got list"),
        (lambda j: j.update(submit_line=["sbatch"]), "submit_line", "expected a string, got list"),
        (lambda j: j.update(script=7), "script", "expected a string, got int"),
    ],
)
def test_bad_json_names_the_job_and_field(tmp_path, change, field, problem):
    path = _json_with(tmp_path, change)
    with pytest.raises(WorkloadError) as e:
        load("sacct-json", path)
    msg = str(e.value)
    assert msg.startswith(f"{path} (job 1): {field}") and problem in msg and "\n" not in msg


def test_truncated_files_are_errors_naming_the_line(tmp_path):
    text = (DATA / "sacct_22.05.json").read_text()
    (tmp_path / "t.json").write_text(text[: len(text) // 2])
    with pytest.raises(InputFileError) as e:
        load("sacct-json", tmp_path / "t.json")
    assert f"{tmp_path / 't.json'}:" in str(e.value) and "bad JSON" in str(e.value)
    lines = (DATA / "sacct_22.05.txt").read_text().splitlines()
    (tmp_path / "t.txt").write_text("\n".join([*lines[:-1], lines[-1][:40]]) + "\n")
    with pytest.raises(WorkloadError) as e:
        load("sacct", tmp_path / "t.txt")
    assert str(e.value).startswith(f"{tmp_path / 't.txt'}:{len(lines)}: row: expected 14 |-separated fields")
    (tmp_path / "h.txt").write_text("JobID|State|Submit\n1|COMPLETED|2026-01-01T00:00:00\n")
    with pytest.raises(WorkloadError, match=r"h.txt:1: header: missing column\(s\) Start, End, AllocTRES"):
        load("sacct", tmp_path / "h.txt")


# ---------------------------------------------------------------------- recorder (root; not a test)
SINCE = "2020-01-01T00:00:00"
FIELDS = "JobID,JobIDRaw,JobName,User,Account,Partition,State,ExitCode,Submit,Start,End,Elapsed,AllocTRES,ReqTRES"


def record(out: Path, version: str | None = None) -> None:
    """Run the jobs above on a fresh 1-node, 8-GPU cluster of `version` with real accounting and save
    `sacct --json -a -D` (each job's `steps` emptied: not read, and most of the bytes) and `sacct -P -X -D` as
    sacct_<version>.json/.txt (and, on 22.05, the steps too: sacct_22.05_steps.txt)."""
    from tests.share_fixtures import accounting_cluster, sbatch_as, workdir
    from tests.slurm_fixtures import make_root, settle_after_requeue, wait_for

    root = make_root("shockwave-record-sacct-")
    with accounting_cluster(root, version, nodes=1, gpus_per_node=8, cpus_per_node=16) as c:
        cli, work = c.cli, workdir(root)

        def sub(user, *args):
            return sbatch_as(c, user, work, *args)

        def state(j):
            jobs = cli.squeue_jobs(job_ids=[j])
            return jobs[0] if jobs else None

        sub("sw-ann", "-J", "completes", "--gres=gpu:2", "--wrap", "sleep 3")
        sub("sw-bob", "-J", "fails", "--gres=gpu:1", "--wrap", "sleep 2; exit 3")
        sub("sw-bob", "-J", "cpu-only", "--wrap", "sleep 1")
        sub("sw-ann", "-J", "array", "--array=0-2", "--gres=gpu:1", "--wrap", "sleep 2")
        running = sub("sw-bob", "-J", "cancelled-running", "--gres=gpu:1", "--wrap", "sleep 300")
        req = sub("sw-ann", "-J", "requeued", "--requeue", "--gres=gpu:4", "--wrap", "sleep 6")
        wait_for(lambda: all(state(j) and state(j).running for j in (req, running)), timeout=60, what="running")
        pending = sub("sw-ann", "-J", "never-started", "--gres=gpu:8", "--wrap", "sleep 300")
        wait_for(lambda: state(pending) and state(pending).state == "PENDING", timeout=30, what="8-GPU job pending")
        time.sleep(2)
        cli.requeue([req])
        wait_for(lambda: state(req) and state(req).state == "PENDING", timeout=30, what="requeued job pending")
        settle_after_requeue()
        cli.scontrol_update([req], StartTime="now")
        cli.cancel([running, pending])

        def done():
            text = cli.run(["sacct", "-a", "-X", "-n", "-P", "-S", SINCE, "-o", "JobID,State"]).stdout
            rows = [ln.split("|") for ln in text.splitlines() if ln]
            return len(rows) >= 9 and all(s.split()[0] in ("COMPLETED", "FAILED", "CANCELLED") for _, s in rows)

        wait_for(done, timeout=120, interval=1, what="sacct to show every job finished")
        v = c.slurm_version[:5]
        data = json.loads(cli.run(["sacct", "--json", "-a", "-D", "-S", SINCE]).stdout)
        for job in data["jobs"]:
            job["steps"] = []
        (out / f"sacct_{v}.json").write_text(json.dumps(data, indent=1) + "\n")
        text = cli.run(["sacct", "-a", "-P", "-X", "-D", "-S", SINCE, "-o", FIELDS]).stdout
        (out / f"sacct_{v}.txt").write_text(text)
        if v == "22.05":
            steps = cli.run(["sacct", "-a", "-P", "-S", SINCE, "-o", FIELDS]).stdout
            (out / "sacct_22.05_steps.txt").write_text(steps)
    shutil.rmtree(root, ignore_errors=True)


def record_script(out: Path, version: str) -> None:
    """One job whose batch script says `#SBATCH --no-requeue`, on a cluster that keeps job scripts
    (`AccountingStoreFlags=job_script`): `sacct --json -a --batch-script -j ID` (sacct refuses `--batch-script`
    without `-j`) as sacct_<version>_script.json (its `steps` emptied)."""
    from tests.share_fixtures import accounting_cluster, sbatch_as, workdir
    from tests.slurm_fixtures import make_root, wait_for

    root = make_root("shockwave-record-sacct-script-")
    conf = ["AccountingStoreFlags=job_script"]
    with accounting_cluster(root, version, nodes=1, gpus_per_node=2, cpus_per_node=4, extra_conf=conf) as c:
        work = workdir(root)
        script = work / "job.sh"
        script.write_text("#!/bin/sh\n#SBATCH --no-requeue\n#SBATCH -J scripted\nsleep 1\n")
        script.chmod(0o755)
        j = sbatch_as(c, "sw-ann", work, "--gres=gpu:1", str(script))
        wait_for(lambda: c.cli.run(["sacct", "-a", "-X", "-n", "-P", "-j", str(j), "-o", "State"]).stdout.startswith(
            "COMPLETED"), timeout=120, interval=1, what="the job completed")
        data = json.loads(c.cli.run(["sacct", "--json", "-a", "--batch-script", "-j", str(j)]).stdout)
        for job in data["jobs"]:
            job["steps"] = []
        (out / f"sacct_{c.slurm_version[:5]}_script.json").write_text(json.dumps(data, indent=1) + "\n")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] in ("record", "record-script"):
        (record if sys.argv[1] == "record" else record_script)(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else None)
    else:
        sys.exit("usage: PYTHONPATH=. python lab/tests/test_trace_import_sacct.py record|record-script DIR [VERSION]")
