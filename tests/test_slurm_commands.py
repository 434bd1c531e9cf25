"""The Slurm CLI layer's commands, with a fake runner (argv construction, batching, validation, one-line
errors) and on recorded outputs of each version (``tests/data/slurm/<version>/``). No Slurm needed."""
from __future__ import annotations

import subprocess

import pytest

from slurm_shockwave.slurm import SlurmCLI, SlurmError, SlurmTimeout
from tests.slurm_fixtures import ODD_COMMENT, ODD_NAME
from tests.test_slurm_parse import load, per_version


class FakeRunner:
    """Records argv of every call; answers with ``stdout``/``rc``."""

    def __init__(self, stdout: str = "", rc: int = 0, stderr: str = ""):
        self.calls: list[list[str]] = []
        self.stdout, self.rc, self.stderr = stdout, rc, stderr

    def __call__(self, argv, **kwargs):
        assert isinstance(argv, list) and "shell" not in kwargs
        self.calls.append(argv)
        return subprocess.CompletedProcess(argv, self.rc, self.stdout, self.stderr)


def test_update_is_batched_and_validated():
    fake = FakeRunner()
    cli = SlurmCLI(runner=fake)
    cli.scontrol_update([1, 2, "3_4"], SiteFactor=5000, Nice=-10)
    assert fake.calls == [["scontrol", "update", "JobId=1,2,3_4", "SiteFactor=5000", "Nice=-10"]]
    fake.calls.clear()
    cli.scontrol_update(range(1, 1201), Priority=1)
    # a long list is split into PARALLEL calls run at once (each at most BATCH_SIZE ids), every id exactly once
    assert len(fake.calls) == 4 and all(c[2].count(",") == 299 for c in fake.calls)
    assert sorted(int(x) for c in fake.calls for x in c[2][len("JobId="):].split(",")) == list(range(1, 1201))
    fake.calls.clear()
    cli.scontrol_update(range(1, 5001), Priority=1)
    assert len(fake.calls) == 10 and all(c[2].count(",") == 499 for c in fake.calls)
    with pytest.raises(ValueError):
        cli.scontrol_update(["1;rm -rf /"], Priority=1)
    with pytest.raises(ValueError):
        cli.scontrol_update([1], **{"Priority=1 JobId": 2})
    with pytest.raises(ValueError):
        cli.scontrol_update([1], Comment="a\nb")
    with pytest.raises(ValueError):
        cli.scontrol_update([1])


def test_job_verbs_argv():
    fake = FakeRunner()
    cli = SlurmCLI(runner=fake)
    cli.hold([3, 4]); cli.release([3]); cli.requeue([5]); cli.requeue([5, 6], hold=True)
    cli.signal([7, 8], "USR1"); cli.signal([7], 10, scope="full"); cli.cancel([9, 10])
    cli.hold([])
    assert fake.calls == [
        ["scontrol", "hold", "3,4"], ["scontrol", "release", "3"], ["scontrol", "requeue", "5"],
        ["scontrol", "requeuehold", "5,6"], ["scancel", "--signal=USR1", "--batch", "7", "8"],
        ["scancel", "--signal=10", "--full", "7"], ["scancel", "9", "10"],
    ]
    with pytest.raises(ValueError):
        cli.signal([1], "USR1; reboot")
    with pytest.raises(ValueError):
        cli.signal([1], "USR1", scope="everything")
    with pytest.raises(ValueError):
        cli.cancel([True])


def test_sbatch_argv_keeps_untrusted_strings_whole():
    fake = FakeRunner(stdout="42\n")
    cli = SlurmCLI(env={"SLURM_CONF": "/x/slurm.conf"}, runner=fake)
    job_id = cli.sbatch("/tmp/job.sh", ["-J", ODD_NAME, "--comment", ODD_COMMENT], script_args=["--lr", "0.1"])
    assert job_id == 42
    assert fake.calls == [["sbatch", "--parsable", "-J", ODD_NAME, "--comment", ODD_COMMENT,
                           "/tmp/job.sh", "--lr", "0.1"]]
    with pytest.raises(TypeError):
        cli.sbatch("/tmp/job.sh", "-J x")
    with pytest.raises(TypeError):
        cli.run("squeue --json")


def test_errors_are_one_line_with_command_and_stderr():
    cli = SlurmCLI(runner=FakeRunner(rc=1, stderr="slurm_suspend error: Invalid job id\nspecified\n"))
    with pytest.raises(SlurmError) as info:
        cli.hold([99999])
    msg = str(info.value)
    assert "\n" not in msg and "scontrol hold 99999" in msg and "Invalid job id" in msg
    assert info.value.returncode == 1 and info.value.cmd == ["scontrol", "hold", "99999"]


@per_version
def test_squeue_jobs_raises_on_partial_output(version):
    cli = SlurmCLI(runner=FakeRunner(stdout=load(version, "squeue_mixed.json")[:5000]))
    with pytest.raises(SlurmError):
        cli.squeue_jobs()


@per_version
def test_squeue_jobs_filters_and_site_factor(version):
    outputs = iter([load(version, "squeue_mixed.json"), load(version, "sprio_site.txt")])

    def runner(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, next(outputs), "")

    jobs = SlurmCLI(runner=runner).squeue_jobs(states=["PENDING"], with_site_factor=True)
    assert {j.job_id: j.site_factor for j in jobs} == {4: -50, 6: 5000, 7: None, 8: None}


def test_real_subprocess_timeout_and_failure():
    cli = SlurmCLI(timeout=0.3)
    with pytest.raises(SlurmTimeout) as info:
        cli.run(["sleep", "5"])
    assert "timed out" in str(info.value)
    with pytest.raises(SlurmError):
        cli.run(["false"])
    with pytest.raises(SlurmError):
        cli.run(["/nonexistent/squeue"])


@per_version
def test_sprio_runs_beside_the_queue_read_while_slurm_answers_and_after_it_once_a_read_failed(version):
    import threading
    sprio_started, fail = threading.Event(), {"squeue": False}

    def runner(argv, **kwargs):
        if argv[0] == "sprio":
            sprio_started.set()
            return subprocess.CompletedProcess(argv, 0, load(version, "sprio_site.txt"), "")
        if fail["squeue"]:
            return subprocess.CompletedProcess(argv, 1, "", "Unable to contact slurm controller (connect failure)")
        # the queue read waits for sprio: it only returns when sprio was started beside it
        beside = sprio_started.wait(timeout=5)
        return subprocess.CompletedProcess(argv, 0 if beside else 1, load(version, "squeue_mixed.json"),
                                           "" if beside else "sprio did not run beside the read")
    cli = SlurmCLI(runner=runner)
    cli.answering = True                       # a read has succeeded before
    jobs = cli.squeue_jobs(states=["PENDING"], with_site_factor=True)
    assert {j.job_id: j.site_factor for j in jobs} == {4: -50, 6: 5000, 7: None, 8: None}
    assert cli.answering
    fail["squeue"] = True
    with pytest.raises(SlurmError):
        cli.squeue_jobs(with_site_factor=True)
    assert not cli.answering
    sprio_started.clear()
    with pytest.raises(SlurmError):            # after a failed read: the queue first, sprio only if it answers
        cli.squeue_jobs(with_site_factor=True)
    assert not sprio_started.is_set()
