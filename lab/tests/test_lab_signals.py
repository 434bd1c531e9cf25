"""SIGTERM, SIGINT and SIGHUP to `shockwave replay`, `shockwave cluster up` and `shockwave demo` at a random point
stop every process the command started (issue 32 item 6: `timeout`, a CI runner or systemd used to leave
slurmctld, the slurmds, slurmdbd, MariaDB and munged running).

Each case runs the real command as a subprocess in its own session with ``TMPDIR`` set to a fresh directory: the
replay's directory is made there, so every process it starts inherits that directory in its environment (the
daemons and jobs also in their command line, cwd or SLURM_CONF). The signal goes to the command's pid (SIGTERM,
SIGHUP: what `timeout`, systemd or a closed terminal send) or to its whole process group (SIGINT: a terminal's
Ctrl-C), after a seeded random delay inside a phase: ``start`` (the cluster's start-up: MariaDB, slurmdbd,
munged, slurmctld, the slurmds), ``run`` (cluster up, controller and jobs running). Within 30 s of the signal the
command must have exited and no process whose cwd, command line or environment points into the directory may be
left. ``SHOCKWAVE_SIGNAL_SEED`` picks other delays (the seed is in each case's failure message)."""
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import dispositions
from tests.slurm_fixtures import make_root

pytestmark = pytest.mark.slurm

SEED = int(os.environ.get("SHOCKWAVE_SIGNAL_SEED", "32"))
#: within this long after the signal the command has exited and nothing it started is left (the issue's bound)
BOUND_S = 30.0
#: the shortest replay: the first 3 jobs of test_replay_slurm's CI trace on 2 nodes x 4 GPUs, 2 users
#: (accounting: MariaDB + slurmdbd), at time scale 60 (2 s rounds)
REPLAY_ARGS = ["--gpus", "8", "--nodes", "2", "--users", "2", "--first", "3", "--time-scale", "60"]


@pytest.fixture(scope="module")
def installed():
    if os.geteuid() != 0:
        pytest.skip("starting Slurm needs root")
    from shockwave_lab.localcluster import SlurmUnavailable, ensure_installed
    try:
        ensure_installed(accounting=True)
    except SlurmUnavailable as e:
        pytest.skip(f"Slurm cannot be installed here: {e}")


@pytest.fixture(scope="module")
def trace(installed):
    from shockwave_lab.data_files import experiment_paths
    from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text
    from shockwave_lab.workload.throughputs import ThroughputTable
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    ci = GeneratorOptions(jobs=12, seed=5, interarrival=120, min_hours=0.1, max_hours=0.5,
                          gpu_mix=(0.5, 0.35, 0.15, 0.0), max_gpus=4)          # test_replay_slurm.CI_TRACE
    path = make_root("shockwave-signals-trace-") / "ci.trace"
    path.write_text(trace_text(generate(ci, ThroughputTable.load(thr))))
    return str(path), str(thr)


def _own_ancestry() -> set:
    chain, pid = set(), os.getpid()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return chain


def _processes_of(directory: Path) -> dict:
    """{pid: description} of the live processes (not zombies) whose cwd, command line or environment holds
    `directory` (the test process and its ancestors aside)."""
    key, found, mine = str(directory).encode(), {}, _own_ancestry()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        base = f"/proc/{entry}"
        try:
            stat = Path(f"{base}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                continue
            cmdline = Path(f"{base}/cmdline").read_bytes()
            cwd = os.readlink(f"{base}/cwd").encode()
            environ = Path(f"{base}/environ").read_bytes()
        except (OSError, IndexError):
            continue
        if key in cmdline or cwd.startswith(key) or key in environ:
            found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:160]
    return found


def _wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def _send(proc: subprocess.Popen, sig: int) -> None:
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)            # a terminal's Ctrl-C reaches the whole foreground group
    else:
        os.kill(proc.pid, sig)


def _interrupt(argv: list, sig: int, phase: str, delay: float, marker, what: str, again: int | None = None,
               done_before=None) -> bool:
    """Run `argv` with TMPDIR in a fresh directory, wait for `marker(directory, log)` (the phase's start), then
    `delay` s, send `sig` (and `again` 0.3 s later, amid the teardown); assert that within BOUND_S of the signal
    it exited and left no process behind. With `done_before(directory, log)` true after it exited, the command
    had finished its work before the signal came: then that is undone by `done_before` and False returned."""
    directory = make_root("shockwave-signals-")
    directory.chmod(0o1777)                 # like /tmp: jobs of the replay's users write their TMPDIR here
    log = directory / "command.log"
    with open(log, "wb") as out:   # signals at their defaults, as a terminal starts a command (tests.helpers)
        proc = subprocess.Popen(argv, env={**os.environ, "TMPDIR": str(directory), "PYTHONUNBUFFERED": "1"},
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(directory), preexec_fn=dispositions())
    case = f"{what}, {signal.Signals(sig).name} {delay:.2f} s into phase {phase!r} (seed {SEED})"
    try:
        reached = _wait_for(lambda: proc.poll() is not None or marker(directory, log), 120, interval=0.005)
        assert reached and proc.poll() is None, \
            f"{case}: the command ended before phase {phase!r}: rc={proc.returncode}\n{log.read_text()[-3000:]}"
        time.sleep(delay)
        assert proc.poll() is None, f"{case}: the command ended before the signal\n{log.read_text()[-3000:]}"
        signalled = time.monotonic()
        _send(proc, sig)
        if again is not None:
            time.sleep(0.3)
            if proc.poll() is None:
                _send(proc, again)
        try:
            proc.wait(BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{case}: still running {BOUND_S:.0f} s after the signal\n{log.read_text()[-3000:]}")
        if done_before is not None and done_before(directory, log):
            print(f"{case}: the command had finished before the signal")
            return False
        left_at_exit = _processes_of(directory)
        gone = _wait_for(lambda: not _processes_of(directory), max(0.0, signalled + BOUND_S - time.monotonic()))
        took = time.monotonic() - signalled
        assert gone, (f"{case}: processes left {took:.0f} s after the signal (at exit: {left_at_exit}): "
                      f"{_processes_of(directory)}\n{log.read_text()[-3000:]}")
        assert proc.returncode != 0, f"{case}: exit status 0 after a signal\n{log.read_text()[-2000:]}"
        print(f"{case}: exited rc={proc.returncode}, nothing left {took:.1f} s after the signal")
        return True
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _processes_of(directory):             # a failed case must not leave a cluster running
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _cluster_starting(directory: Path, _log: Path) -> bool:
    """The replay's cluster wrote its state file: its daemons are being started."""
    return any(directory.glob("shockwave-replay-*/slurm/cluster.json"))


def _cluster_up(_directory: Path, log: Path) -> bool:
    return b"cluster up:" in log.read_bytes()


#: phase -> (its start, the spread of the random delay after it): "early": python's start-up, the trace's
#: simulation, before any process is started; "start": the cluster's daemons starting (~2-3 s here)
PHASES = {"early": (lambda _d, _l: True, 1.5), "start": (_cluster_starting, 2.5), "run": (_cluster_up, 3.0)}


def _replay_argv(trace) -> list:
    path, thr = trace
    return [sys.executable, "-m", "slurm_shockwave", "replay", "--trace", path, "--throughputs", thr, *REPLAY_ARGS]


@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_to_replay_stops_every_process_it_started(trace, signame, phase):
    marker, spread = PHASES[phase]
    delay = random.Random(f"{SEED}-replay-{signame}-{phase}").uniform(0.0, spread)
    _interrupt(_replay_argv(trace), getattr(signal, signame), phase, delay, marker, "shockwave replay")


def test_a_second_signal_does_not_cut_the_teardown_short(trace):
    """SIGTERM, then a terminal's Ctrl-C 0.3 s later, while the first one's teardown runs."""
    delay = random.Random(f"{SEED}-replay-twice").uniform(0.0, 3.0)
    _interrupt(_replay_argv(trace), signal.SIGTERM, "run", delay, _cluster_up, "shockwave replay (twice)",
               again=signal.SIGINT)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_while_cluster_up_starts_leaves_nothing_running(installed, signame):
    """`cluster up` leaves a cluster running on purpose once it has returned; interrupted while it starts the
    daemons (no accounting: munged, slurmctld, 2 slurmds; ~0.2 s) it leaves nothing. The signal comes right
    after the state file or a daemon's pid file appears (drawn at random); should the start have finished all the same
    (the command printed the cluster), `cluster down` must stop it all and the case is tried again."""
    rng = random.Random(f"{SEED}-cluster-{signame}")
    argv = [sys.executable, "-m", "slurm_shockwave", "cluster", "up", "--root", "c", "--nodes", "2"]

    def finished(directory: Path, log: Path) -> bool:
        if b"cluster up under" not in log.read_bytes():
            return False
        down = subprocess.run([sys.executable, "-m", "slurm_shockwave", "cluster", "down", "--root",
                               str(directory / "c")], capture_output=True, text=True, timeout=60)
        assert down.returncode == 0 and not _processes_of(directory), down.stdout + down.stderr
        return True

    for _attempt in range(3):
        pid_file = rng.choice(["cluster.json", "run/slurmctld.pid", "run/slurmd.node1.pid"])
        delay = rng.uniform(0.0, 0.03)

        def starting(directory: Path, _log: Path, pid_file=pid_file) -> bool:
            return (directory / "c" / pid_file).exists()

        if _interrupt(argv, getattr(signal, signame), f"start, at {pid_file}", delay, starting,
                      "shockwave cluster up", done_before=finished):
            return
    pytest.fail("each time the cluster had started before the signal came: the case tested nothing")


def test_sigterm_to_the_short_demo_stops_every_process_it_started(installed):
    """The demo runs through the replay: SIGTERM while its first replay's cluster is up and jobs run."""
    delay = random.Random(f"{SEED}-demo").uniform(0.0, 3.0)
    _interrupt([sys.executable, "-m", "slurm_shockwave", "demo", "--short", "--shockwave-only"], signal.SIGTERM,
               "run", delay, _cluster_up, "shockwave demo --short")


def test_the_teardown_handlers_raise_once_hold_back_while_shielded_and_restore():
    """No Slurm: inside orderly_teardown SIGTERM raises Terminated (exit 143) once, a signal inside shielded() is
    raised when the block ends, a second signal during the teardown is ignored, the old handlers come back.  In a
    subprocess: this test session's own handlers (the root conftest) would own the nested contexts."""
    code = """if True:
        import os, signal, time
        from shockwave_lab.localcluster import signals as S
        before = signal.getsignal(signal.SIGTERM)
        steps = []
        try:
            with S.orderly_teardown():
                with S.orderly_teardown():                    # nested: the outer one owns the handlers
                    try:
                        with S.shielded():
                            os.kill(os.getpid(), signal.SIGTERM)
                            time.sleep(0.05)
                            steps.append("shielded block ran to its end")
                    finally:
                        os.kill(os.getpid(), signal.SIGHUP)   # amid the teardown: ignored
                        time.sleep(0.05)
                        steps.append("teardown ran to its end")
        except S.Terminated as e:
            print("stopped:", e.code, flush=True)
        print(*steps, sep="\\n")
        print("restored:", signal.getsignal(signal.SIGTERM) is before and not S.active())
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["stopped: 143", "shielded block ran to its end", "teardown ran to its end",
                                     "restored: True"], r.stdout


def test_a_signal_ignored_when_the_command_starts_stays_ignored():
    """No Slurm: a command started under `nohup` (SIGHUP ignored) or in the background of a script (SIGINT ignored)
    keeps ignoring that signal inside orderly_teardown, while SIGTERM still stops it; the old handlers come back."""
    code = """if True:
        import os, signal, sys, time
        from shockwave_lab.localcluster import signals as S
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            with S.orderly_teardown():
                for sig in (signal.SIGHUP, signal.SIGINT):
                    os.kill(os.getpid(), sig)
                    time.sleep(0.05)
                    print("went on after", signal.Signals(sig).name, flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                print("went on after SIGTERM", flush=True)
        except S.Terminated as e:
            print("stopped:", e, flush=True)
        print("restored:", signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, signal.getsignal(signal.SIGINT)
              is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["went on after SIGHUP", "went on after SIGINT", "stopped: stopped by SIGTERM",
                                     "restored: True True True"], r.stdout


