"""How shockwave-run ends a run (slurm_shockwave/wrapper/outcome.py): finished from the declared epochs, requeued
after the checkpoint request, and requeued, not failed, when the program fails after saving on the request."""
from __future__ import annotations

import os
import signal
import sys
import textwrap

from tests.test_wrapper import _env, _events, _popen, _run, _wait_file


def test_finished_is_decided_from_the_declared_epochs():
    """Not from the presence of a checkpoint event: epochs left after exit 0 are never 'finished'."""
    import signal as _signal

    from slurm_shockwave.events.summary import JobProgress
    from slurm_shockwave.wrapper.outcome import decide
    usr1, term = int(_signal.SIGUSR1), int(_signal.SIGTERM)
    two_of_12 = JobProgress(epochs_done=2, total_epochs=12)
    assert decide(0, two_of_12, [usr1], usr1, False, None).action == "requeue"     # no checkpoint event: still
    assert decide(0, two_of_12, [term], usr1, False, None).action == "slurm_requeues"
    assert decide(0, two_of_12, [], usr1, False, None).action == "ended_early"
    # a non-zero exit fails the job, unless the work was saved on the request first (gloo's abort at exit)
    assert decide(1, two_of_12, [usr1], usr1, True, None).action == "requeue"
    assert decide(1, JobProgress(epochs_done=2), [usr1], usr1, True, None).action == "requeue"
    assert decide(3, two_of_12, [usr1], usr1, False, None).action == "failed"     # no checkpoint after the signal
    assert decide(3, two_of_12, [], usr1, True, None).action == "failed"          # no request
    assert decide(3, two_of_12, [term], usr1, True, None).action == "failed"      # Slurm's TERM: not our request
    assert decide(3, JobProgress(epochs_done=12, total_epochs=12), [usr1], usr1, True, None).action == "failed"
    assert decide(0, JobProgress(epochs_done=12, total_epochs=12), [usr1], usr1, False, None).action == "finished"
    # no total reported: the comment's epochs= hint decides; with neither, only a checkpoint after the signal
    assert decide(0, JobProgress(epochs_done=2), [usr1], usr1, False, 12).action == "requeue"
    assert decide(0, JobProgress(epochs_done=2), [], usr1, False, 12).action == "ended_early"
    assert decide(0, JobProgress(epochs_done=0), [], usr1, False, 12).action == "finished"   # reports nothing
    assert decide(0, JobProgress(epochs_done=2), [usr1], usr1, True, None).action == "requeue"
    assert decide(0, JobProgress(epochs_done=2), [usr1], usr1, False, None).action == "finished"


SAVES_THEN_FAILS = textwrap.dedent("""
    import pathlib, sys, time
    from slurm_shockwave.wrapper import Training
    class S:
        def state_dict(self): return {"x": 1}
        def load_state_dict(self, s): pass
    run = Training(S(), 5)
    for epoch in run.epochs():
        pathlib.Path(sys.argv[1]).touch()
        while not run.should_checkpoint():
            time.sleep(0.02)
        break                     # saved here, on the request
    sys.exit(1)                   # then failed on the way out, as a gloo rank that aborts at exit
""")


def test_a_run_that_fails_after_saving_on_the_request_is_requeued_not_failed(tmp_path):
    """torch's gloo sometimes aborts a rank at exit (torchrun exits 1) after the checkpoint was written: the job is
    requeued once (the work is saved), not left FAILED; the same exit without the request stays a failure."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\nexit 0\n')
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = _env(tmp_path, SLURM_JOB_ID="78", PATH=f"{bin_dir}:{os.environ['PATH']}")
    ready = tmp_path / "ready"
    p = _popen(tmp_path, ["--", sys.executable, "-c", SAVES_THEN_FAILS, str(ready)], env)
    _wait_file(ready)
    p.send_signal(signal.SIGUSR1)
    p.communicate(timeout=60)
    assert (tmp_path / "calls").read_text().split("\n") == ["requeue 78", ""]
    evs = _events(tmp_path, "78")
    assert [e.kind for e in evs if e.kind != "resume"] == ["start", "signal", "checkpoint", "exit"]
    assert "requeued" in evs[-1].reason and "exit 1 after its checkpoint" in evs[-1].reason
    # without the request the same exit is a failure: nothing requeued
    r = _run(tmp_path, ["--", sys.executable, "-c", "import sys; sys.exit(1)"], _env(tmp_path, SLURM_JOB_ID="79",
                                                                                     PATH=env["PATH"]))
    assert r.returncode == 1 and (tmp_path / "calls").read_text().count("requeue") == 1


def test_scontrol_ended_by_slurms_sigterm_means_the_requeue_is_under_way():
    """Slurm's requeue sends SIGTERM to every process of the run, scontrol too when it has not exited yet (CI-like
    run: 'requeue failed: exit -15; then SIGTERM from Slurm' for a job that was requeued): that is success."""
    import subprocess as sp

    from slurm_shockwave.wrapper.outcome import requeue_with_retry

    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return sp.CompletedProcess(cmd, -15, "", "")

    assert requeue_with_retry("5", None, run=run, sleep=lambda s: None) == (True, "")
    assert calls == [["scontrol", "requeue", "5"]]
    failed = requeue_with_retry("5", None, run=lambda cmd, **kw: sp.CompletedProcess(cmd, 1, "", "Invalid job id"),
                                sleep=lambda s: None)
    assert failed == (False, "Invalid job id")
