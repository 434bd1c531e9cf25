"""The test suite's own teardown on a signal (the root conftest.py): SIGTERM or SIGHUP to a pytest run ends it as
Ctrl-C does, so the fixtures stop the Slurm clusters the tests started (a CI run stopped by SIGTERM had left two
test clusters' daemons running).  No Slurm: a child pytest run of a test whose fixture starts a process."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import dispositions

#: within this long after the signal the child run has exited
BOUND_S = 30.0


CHILD_TEST = '''import os, signal, subprocess, time
from pathlib import Path
import pytest
OUT = Path(os.environ["SUITE_SIGNAL_OUT"])


@pytest.fixture
def daemon():
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (OUT / "daemon.pid").write_text(str(proc.pid))
    yield proc
    (OUT / "finalizing").write_text("")
    time.sleep(1.0)                                  # a second signal arrives now
    proc.kill()
    proc.wait()
    (OUT / "finalized").write_text("")


def test_long(daemon):
    (OUT / "running").write_text("")
    time.sleep(120)
'''


def _appears(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if path.exists():
            return True
        time.sleep(0.05)
    return path.exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("hook,workers,sig", [(True, 0, signal.SIGTERM), (True, 1, signal.SIGTERM),
                                              (True, 0, signal.SIGHUP), (False, 0, signal.SIGTERM)])
def test_a_signal_to_the_test_run_finalizes_its_fixtures(tmp_path, hook, workers, sig):
    """No Slurm: SIGTERM or SIGHUP to a pytest run with the suite's root conftest (to its pid, or to its process
    group with an xdist worker, as a CI runner or `kill -- -PGID` does) ends it as Ctrl-C does: the running test's
    fixture is finalized (the process it started is stopped) and a second signal during that teardown is ignored;
    exit status 2 (interrupted).  Without the hook (the control) the run dies at once and the process is left."""
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "test_child.py").write_text(CHILD_TEST)
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
            *(["-p", "conftest"] if hook else []), *(["-n", str(workers)] if workers else []),
            str(tmp_path / "test_child.py")]
    env = {**os.environ, "SUITE_SIGNAL_OUT": str(out), "PYTHONPATH": str(root)}
    env.pop("CI", None)
    # the child starts with SIGTERM, SIGHUP and SIGINT at their defaults, as from a terminal (this suite may run
    # under nohup, whose ignored SIGHUP the hook would keep ignored, by the POSIX convention)
    proc = subprocess.Popen(argv, cwd=root, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=dispositions())
    daemon = None
    try:
        assert _appears(out / "running", proc), proc.communicate(timeout=30)[0]
        daemon = int((out / "daemon.pid").read_text())
        send = (lambda s: os.killpg(proc.pid, s)) if workers else (lambda s: os.kill(proc.pid, s))
        send(sig)
        if hook:
            assert _appears(out / "finalizing", proc, 30.0)
            send(sig)                                    # amid the teardown: ignored
        text = proc.communicate(timeout=BOUND_S)[0]
        if hook:
            assert proc.returncode == 2 and (out / "finalized").exists() and not _alive(daemon), text
        else:
            assert proc.returncode == -sig and not (out / "finalized").exists() and _alive(daemon), text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if daemon is not None and _alive(daemon):
            os.kill(daemon, signal.SIGKILL)
