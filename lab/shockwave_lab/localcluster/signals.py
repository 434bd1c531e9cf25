"""SIGTERM, SIGHUP and SIGINT as an orderly teardown while the lab has processes running.

``timeout``, a CI runner or systemd end a command with SIGTERM, a closed terminal with SIGHUP, Ctrl-C with
SIGINT. Python's default for the first two ends the process at once, without running ``finally`` blocks, which
left slurmctld, the slurmds, slurmdbd, MariaDB and munged running (issue 32). Inside :func:`orderly_teardown`
(entered by ``shockwave replay``, ``demo`` (through the replay), ``cluster up`` and :meth:`Replay.run
<shockwave_lab.replay.run.Replay.run>`):

* the first of these signals raises :class:`Terminated` (a ``SystemExit`` with code 128 + the signal; SIGINT
  raises ``KeyboardInterrupt`` as usual) in the main thread, so every ``with`` / ``finally`` on the way up stops
  what it started, by pid;
* any later signal is reported on stderr and otherwise ignored: the teardown runs to its end (each of its steps
  is bounded in time: SIGTERM, then SIGKILL after a few seconds);
* inside :func:`shielded` (a block that starts a process and records its pid, or stops processes) a signal is
  held back and raised when the block ends, so a process is never started without being recorded, and a
  teardown is never cut in half;
* on leaving, the previous handlers are put back; a signal held back and not raised yet is raised then.

A signal that is ignored when the outermost context is entered stays ignored (the POSIX convention): ``nohup``
ignores SIGHUP, and a non-interactive shell starts a background command (``cmd &``) with SIGINT ignored, so that
neither a closed terminal nor a Ctrl-C meant for the foreground stops it.

``orderly_teardown(interrupt=True)`` raises ``KeyboardInterrupt`` for every signal: the test suite's mode (the
root ``conftest.py``), as pytest ends a run on that exception and finalizes its fixtures, which stop the clusters
the tests started; a ``SystemExit`` inside a test would be reported as that test's failure and the run would go on.

Nesting is allowed (the outermost context owns the handlers). Outside the main thread, or when the handlers
are not ours, both contexts do nothing.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Terminated(SystemExit):
    """Raised in the main thread by SIGTERM or SIGHUP inside :func:`orderly_teardown`; exit status 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


class _State:
    depth = 0                 # nesting of orderly_teardown
    saved: dict = {}          # the handlers before the outermost orderly_teardown
    shield = 0                # nesting of shielded
    held: int | None = None   # a signal received inside shielded, not raised yet
    raised = False            # the exception of a signal was raised: later ones are ignored
    interrupt = False         # every signal raises KeyboardInterrupt (the outermost context's choice)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _say(msg: str) -> None:
    try:                      # the terminal may be gone (SIGHUP)
        os.write(2, f"shockwave: {msg}\n".encode())
    except OSError:
        pass


def _exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT or _State.interrupt else Terminated(signum)


def _handler(signum: int, _frame) -> None:
    name = signal.Signals(signum).name
    if _State.raised or _State.held is not None:
        _say(f"{name}: already stopping every process the lab started, please wait")
        return
    if _State.shield:
        _State.held = signum
        return
    _State.raised = True
    _say(f"{name}: stopping every process the lab started")
    raise _exception(signum)


def active() -> bool:
    """Are the teardown handlers installed?"""
    return _State.depth > 0


def stopping() -> bool:
    """Has a signal been received inside :func:`orderly_teardown`?"""
    return _State.raised or _State.held is not None


@contextmanager
def orderly_teardown(interrupt: bool = False) -> Iterator[None]:
    """SIGTERM/SIGHUP/SIGINT raise (once) in the main thread while inside; previous handlers restored after.
    ``interrupt``: each raises ``KeyboardInterrupt`` (else SIGTERM and SIGHUP raise :class:`Terminated`)."""
    if not _main_thread():
        yield
        return
    if _State.depth == 0:
        _State.saved = {s: signal.getsignal(s) for s in SIGNALS}
        _State.held, _State.raised, _State.shield, _State.interrupt = None, False, 0, interrupt
        for s in SIGNALS:
            if _State.saved[s] is not signal.SIG_IGN:  # nohup's SIGHUP, a background job's SIGINT: left ignored
                signal.signal(s, _handler)
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        if _State.depth == 0:
            held, raised = _State.held, _State.raised
            for s, h in _State.saved.items():
                signal.signal(s, h if h is not None else signal.SIG_DFL)
            _State.saved, _State.held, _State.raised = {}, None, False
            exc = _exception(held) if held is not None and not raised else None
            _State.interrupt = False
            if exc is not None:
                raise exc


@contextmanager
def shielded() -> Iterator[None]:
    """Hold a signal back until the block ends (then raise it, unless an exception already leaves the block)."""
    if not _main_thread() or _State.depth == 0:
        yield
        return
    _State.shield += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _State.shield -= 1
        if _State.shield == 0 and _State.held is not None and not _State.raised and not failed:
            signum = _State.held
            _State.raised = True
            _say(f"{signal.Signals(signum).name}: stopping every process the lab started")
            raise _exception(signum)


def kill_group(proc: "subprocess.Popen") -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session``) unless it was reaped, and reap it."""
    if proc.returncode is None:           # not reaped: its pid (the group's id) is still ours
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def run_group(argv: list[str], *, timeout: float | None = None, capture_output: bool = False,
              **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` in a new session whose whole process group is killed if anything interrupts it (a
    signal, the timeout): for commands that fork helpers of their own (mariadb-install-db, apt-get, debootstrap)."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    proc = None
    try:
        with shielded():
            proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        if proc is not None:
            with shielded():
                kill_group(proc)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
