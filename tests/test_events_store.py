"""Event store: concurrent appends, torn lines, offsets, rejections, file security, hooks."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurm_shockwave.events import (EventReader, EventWriter, FileRejected, JobIdError,
                                    check_job_id, job_event_path, summarize, system_event_path)
from slurm_shockwave.events.schema import MAX_LINE_BYTES, encode_line, make_record
from slurm_shockwave.events.store import ensure_job_dir, open_append

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "prolog_epilog" / "shockwave-hook.sh"
NOBODY = 65534


def _line(kind="epoch_end", job="42", **kw) -> bytes:
    base = dict(epoch=0, batch_size=32, duration_s=1.0) if kind == "epoch_end" else {}
    base.update(kw)
    return encode_line(make_record(kind, job, 0, **base))


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    return root


# ------------------------------------------------------------------ concurrency
def _appender_proc(root: str, proc: int, threads: int, lines: int, barrier) -> None:
    writer = EventWriter(job_event_path(root, "42"), "42", restart=0)
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for i in range(lines):
            pad = "x" * ((proc * 131 + t * 17 + i * 7) % 1000)  # lines of 0.2-1.3 KB
            writer.emit("checkpoint", path=f"/ckpt/{proc}/{t}/{i}/{pad}", reason=f"{proc}:{t}:{i}")

    barrier.wait()
    ths = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()


def test_1000_concurrent_appenders_lose_nothing(store):
    ensure_job_dir(store, "42")
    procs, threads, lines = 8, 125, 4  # 1,000 concurrent appenders, 4,000 lines
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs)
    ps = [ctx.Process(target=_appender_proc, args=(str(store), p, threads, lines, barrier))
          for p in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
        assert p.exitcode == 0
    raw = job_event_path(store, "42").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == procs * threads * lines
    for ln in raw.splitlines():  # no torn / interleaved line
        json.loads(ln)
    reader = EventReader(store)
    evs = []
    while got := reader.poll({"42": os.geteuid()}):   # at most 1 MiB per file per poll
        evs += got["42"]
    assert not reader.rejected
    seen = [e.reason for e in evs]
    assert len(seen) == len(set(seen)) == procs * threads * lines


# ------------------------------------------------------------- torn / offsets
def test_torn_last_line_is_not_consumed_until_complete(store):
    ensure_job_dir(store, "42")
    path = job_event_path(store, "42")
    first, second = _line(epoch=0), _line(epoch=1)
    _append(path, first + second[:10])
    reader = EventReader(store)
    assert [e.epoch for e in reader.poll(["42"])["42"]] == [0]
    assert reader.poll(["42"]) == {}
    assert reader.export_offsets()[f"users/{os.geteuid()}/42/events.jsonl"]["offset"] == len(first)
    _append(path, second[10:])
    assert [e.epoch for e in reader.poll(["42"])["42"]] == [1]
    assert not reader.rejected


def test_offsets_export_import_and_truncation(store):
    ensure_job_dir(store, "42")
    path = job_event_path(store, "42")
    _append(path, _line(epoch=0) + _line(epoch=1))
    r1 = EventReader(store)
    assert len(r1.poll(["42"])["42"]) == 2
    saved = json.loads(json.dumps(r1.export_offsets()))
    _append(path, _line(epoch=2))
    r2 = EventReader(store)
    r2.import_offsets(saved)
    r2.import_offsets({"../x": {"offset": 1}, "42/events.jsonl ": 3})  # ignored
    assert [e.epoch for e in r2.poll(["42"])["42"]] == [2]
    path.write_bytes(_line(epoch=5))  # shrunk: start over, counted
    assert [e.epoch for e in r2.poll(["42"])["42"]] == [5]
    assert r2.rejected["file_truncated"] == 1


# ------------------------------------------------------------------ rejections
BAD_LINES = [
    (b'{"v":1,"kind":"epoch_end"', "bad_json"),
    (b"\xff\xfe", "bad_utf8"),
    (b"[1,2,3]", "not_object"),
    (b'{"v":2,"kind":"start","job":"42","ts":1700000000,"restart":0}', "bad_version"),
    (b'{"v":1,"kind":"explode","job":"42","ts":1700000000,"restart":0}', "unknown_kind"),
    (b'{"v":1,"kind":"start","job":"43","ts":1700000000,"restart":0}', "job_id_mismatch"),
    (b'{"v":1,"kind":"start","job":"../42","ts":1700000000,"restart":0}', "bad_job_id"),
    (b'{"v":1,"kind":"start","job":"42","ts":"now","restart":0}', "bad_type:ts"),
    (b'{"v":1,"kind":"start","job":"42","ts":1e15,"restart":0}', "future_timestamp"),
    (b'{"v":1,"kind":"start","job":"42","ts":1700000000}', "missing:restart"),
    (b'{"v":1,"kind":"epoch_end","job":"42","ts":1700000000,"restart":0,"epoch":-1,'
     b'"batch_size":32,"duration_s":1}', "out_of_range:epoch"),
    (b'{"v":1,"kind":"epoch_end","job":"42","ts":1700000000,"restart":0,"epoch":1,'
     b'"batch_size":0,"duration_s":1}', "out_of_range:batch_size"),
    (b'{"v":1,"kind":"epoch_end","job":"42","ts":1700000000,"restart":0,"epoch":1,'
     b'"batch_size":20000000,"duration_s":1}', "out_of_range:batch_size"),
    (b'{"v":1,"kind":"epoch_end","job":"42","ts":1700000000,"restart":0,"epoch":1,'
     b'"batch_size":"32","duration_s":1}', "bad_type:batch_size"),
    (b'{"v":1,"kind":"epoch_end","job":"42","ts":1700000000,"restart":0,"epoch":1,'
     b'"batch_size":32,"duration_s":NaN}', "non_finite:duration_s"),
    (b'{"v":1,"kind":"epoch_end","job":"42","ts":1700000000,"restart":0,"epoch":1,'
     b'"batch_size":32}', "missing:duration_s"),
    (b'{"v":1,"kind":"epoch_end","job":"42","ts":1700000000,"restart":0,"epoch":1,'
     b'"batch_size":32,"duration_s":1,"throughput":5}', "inconsistent:throughput_untagged"),
    (b'{"v":1,"kind":"requeue","job":"42","ts":1700000000,"restart":1}', "system_kind_in_job_file"),
    (b'{"v":true,"kind":"start","job":"42","ts":1700000000,"restart":0}', "bad_version"),
    (b'{"v":1,"kind":"start","job":"42","ts":1700000000,"restart":true}', "bad_type:restart"),
    (b"[" * 3000 + b"]" * 1000, "bad_json"),
    (b'{"v":1,"kind":"start","job":"42","ts":1700000000,"restart":0,"host":"' + b"h" * 5000
     + b'"}', "oversized"),
]


def test_bad_lines_are_rejected_with_reasons(store):
    ensure_job_dir(store, "42")
    path = job_event_path(store, "42")
    good = _line(epoch=3)
    _append(path, good + b"".join(ln + b"\n" for ln, _ in BAD_LINES) + b"\n" + good)
    reader = EventReader(store)
    evs = reader.poll({"42": os.geteuid()})["42"]
    assert [e.epoch for e in evs] == [3, 3]
    got = reader.rejected_lines["42"]
    assert [r for _, r in got] == [r for _, r in BAD_LINES]
    assert [n for n, _ in got] == list(range(2, 2 + len(BAD_LINES)))
    assert sum(reader.rejected.values()) == len(BAD_LINES)
    job = reader.read_job("42")
    assert len(job.events) == 2 and [r for _, _, r in job.rejected] == [r for _, r in BAD_LINES]


def test_oversized_line_without_newline_is_skipped(store):
    ensure_job_dir(store, "42")
    path = job_event_path(store, "42")
    reader = EventReader(store)
    _append(path, b"x" * (3 * MAX_LINE_BYTES))
    assert reader.poll(["42"]) == {} and reader.rejected["oversized"] == 1
    _append(path, b"y" * 100 + b"\n" + _line(epoch=2))
    assert [e.epoch for e in reader.poll(["42"])["42"]] == [2]
    assert reader.rejected["oversized"] == 1 and reader.rejected_lines["42"] == [(1, "oversized")]
    assert [e.epoch for e in reader.read_job("42").events] == [2]


# --------------------------------------------------------------------- security
def test_file_owned_by_other_user_is_rejected(store):
    ensure_job_dir(store, "42")
    path = job_event_path(store, "42")
    _append(path, _line())
    os.chown(path, NOBODY, NOBODY)
    reader = EventReader(store)
    assert reader.poll({"42": os.geteuid()}) == {}
    assert reader.poll({"42": os.geteuid()}) == {}  # a rejected file is counted once
    assert reader.rejected == {"wrong_owner": 1}
    assert reader.read_job("42", expected_uid=os.geteuid()).rejected == [
        (f"users/{os.geteuid()}/42/events.jsonl", 0, "wrong_owner")]
    assert reader.read_job("42", expected_uid=NOBODY).events == []  # another user's path: absent


def test_symlinks_and_hardlinks_are_rejected(store, tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(_line())
    ensure_job_dir(store, "42")
    os.symlink(target, job_event_path(store, "42"))
    os.symlink(tmp_path, store / "users" / str(os.geteuid()) / "43")  # job directory a symlink
    ensure_job_dir(store, "44")
    os.link(target, job_event_path(store, "44"))
    reader = EventReader(store)
    assert reader.poll(["42", "43", "44"]) == {}
    assert reader.rejected == {"symlink": 2, "hardlinked": 1}
    with pytest.raises(FileRejected):
        open_append(job_event_path(store, "42"))  # writers never follow symlinks
    with pytest.raises(FileRejected):
        ensure_job_dir(store, "43")


def test_fifo_is_rejected_without_blocking(store):
    ensure_job_dir(store, "42")
    os.mkfifo(job_event_path(store, "42"))
    reader = EventReader(store)
    assert reader.poll(["42"]) == {} and reader.rejected == {"not_regular_file": 1}


@pytest.mark.parametrize("bad", ["../42", "42/../../etc", "/etc/passwd", "", "42 ", "4_x",
                                 "_system", "..", "1" * 40])
def test_traversal_job_ids_are_rejected(store, bad):
    with pytest.raises(JobIdError):
        check_job_id(bad)
    with pytest.raises(JobIdError):
        job_event_path(store, bad)
    with pytest.raises(JobIdError):
        EventWriter.for_job(store, bad)
    reader = EventReader(store)
    assert reader.read_job(bad).rejected == [("?", 0, "bad_job_id")]
    assert reader.poll({bad: 0}) == {} and reader.rejected["bad_job_id"] == 1


def test_system_file_trusted_for_system_kinds_only(store):
    sysdir = store / "_system"
    sysdir.mkdir()
    p = system_event_path(store, "42")
    _append(p, encode_line(make_record("prolog_start", "42", 0, host="n1"))
            + _line(epoch=0))
    ensure_job_dir(store, "42")
    _append(job_event_path(store, "42"), _line(epoch=0))
    reader = EventReader(store, system_uids=(os.geteuid(),))
    evs = reader.poll({"42": os.geteuid()})["42"]
    assert [(e.kind, e.origin) for e in evs] == [("prolog_start", "system"), ("epoch_end", "job")]
    assert reader.rejected == {"job_kind_in_system_file": 1}
    os.chown(p, NOBODY, NOBODY)
    assert EventReader(store).read_job("42").rejected == [("_system/42.jsonl", 0, "wrong_owner")]


# ---------------------------------------------------------------------- summary
def test_summarize_requeue_and_resume(store):
    t = 1_700_000_000.0
    rec = [make_record("start", "7", 0, t, batch_size=32, gpus=2, min_batch_size=32,
                       max_batch_size=128),
           make_record("epoch_end", "7", 0, t + 10, epoch=0, batch_size=32, duration_s=10,
                       samples=1000, gpus=2, total_epochs=4),
           make_record("batch_size_change", "7", 0, t + 11, old_batch_size=32, batch_size=64),
           make_record("epoch_end", "7", 0, t + 16, epoch=1, batch_size=64, duration_s=5,
                       samples=1000, gpus=2, throughput=200.0, throughput_bs=64,
                       throughput_gpus=2),
           make_record("checkpoint", "7", 0, t + 17, path="/c/7.pkl", epoch=1),
           make_record("exit", "7", 0, t + 18, exit_code=0),
           make_record("requeue", "7", 1, t + 19),
           make_record("prolog_start", "7", 1, t + 30),
           make_record("epoch_end", "7", 1, t + 40, epoch=2, batch_size=64, duration_s=7,
                       total_epochs=4)]
    from slurm_shockwave.events import validate
    evs = [validate(r)[0] for r in rec]
    p = summarize(evs)
    assert (p.epochs_done, p.total_epochs, p.batch_size, p.restarts) == (3, 4, 64, 1)
    assert p.bs_per_epoch == (32, 64, 64)
    assert p.epoch_duration_by_bs == {32: 10.0, 64: 5.0}      # the resumed run's first epoch is not timed
    assert (p.last_throughput, p.last_throughput_bs, p.last_throughput_gpus, p.last_throughput_run) == (200.0, 64, 2, 0)
    assert (p.min_batch_size, p.max_batch_size, p.gpus) == (32, 128, 2)
    assert p.last_checkpoint_path == "/c/7.pkl" and p.running and not p.finished
    evs.append(validate(make_record("epoch_end", "7", 1, t + 47, epoch=3, batch_size=64,
                                    duration_s=7))[0])
    evs.append(validate(make_record("exit", "7", 1, t + 48, exit_code=0))[0])
    done = summarize(reversed(evs))
    assert done.finished and not done.running and done.remaining_epochs == 0
    assert summarize([]).epochs_done == 0


# ------------------------------------------------------------------------ hooks
def _hook(store: Path, **env: str) -> None:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SHOCKWAVE_STORE": str(store),
            "SHOCKWAVE_HOOK_PYTHON": sys.executable}
    subprocess.run([str(HOOK)], env={**base, **env}, check=True, timeout=20)


def test_hook_writes_reader_compatible_events(store):
    common = {"SLURM_JOB_ID": "42", "SLURM_JOB_COMMENT": "shockwave", "SLURMD_NODENAME": "n1"}
    _hook(store, SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_GPUS="0,1", **common)
    _hook(store, SLURM_SCRIPT_CONTEXT="epilog_slurmctld", SLURM_JOB_ID="42",
          SLURM_JOB_RESTART_COUNT="1", SLURM_JOB_EXIT_CODE2="0:15")
    _hook(store, SLURM_SCRIPT_CONTEXT="epilog_slurmd", SLURM_JOB_RESTART_COUNT="1",
          SLURM_JOB_EXIT_CODE="256", **common)
    _hook(store, SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_ID="43",
          SLURM_JOB_COMMENT="other")  # unmanaged job: nothing
    _hook(store, SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_ID="../x", **{
        k: v for k, v in common.items() if k != "SLURM_JOB_ID"})  # bad id: nothing, exit 0
    job = EventReader(store).read_job("42")
    assert not job.rejected
    assert [(e.kind, e.restart, e.exit_code, e.signal) for e in job.events] == [
        ("prolog_start", 0, None, None), ("epilog_end", 1, 0, 15), ("requeue", 1, None, None),
        ("epilog_end", 1, 1, None)]
    assert job.events[0].gpus == 2 and job.events[0].host == "n1"
    assert sorted(os.listdir(store / "_system")) == ["42.jsonl"]
    assert summarize(job.events).restarts == 1


def test_the_installed_hook_uses_the_shared_layout_next_to_it(store, tmp_path):
    """Installed as prolog_epilog/README.md says (its `install` lines, into a temporary hooks directory): the
    hook reads the package's layout.py from its copy there; without it, it records nothing and says why."""
    import re
    import shutil
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    readme = (REPO / "prolog_epilog" / "README.md").read_text()
    for mode, sources, target in re.findall(r"^install -m (\d+) (.+?) /opt/shockwave/hooks/(\S*)", readme, re.M):
        for src in sources.split():
            dest = hooks / (target or Path(src).name)
            shutil.copy2(REPO / src, dest)
            os.chmod(dest, int(mode, 8))
    assert {"shockwave_layout.py", "shockwave_hints.py", "shockwave_hook.py"} <= {p.name for p in hooks.iterdir()}
    hook, log = hooks / "shockwave-hook.sh", tmp_path / "hook.log"
    env = {"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_COMMENT": "shockwave", "SHOCKWAVE_HOOK_LOG": str(log)}
    subprocess.run([str(hook)], env={**os.environ, "SHOCKWAVE_STORE": str(store), "SHOCKWAVE_HOOK_PYTHON":
                                     sys.executable, "SLURM_JOB_ID": "44", **env}, check=True, timeout=20)
    assert [e.kind for e in EventReader(store).read_job("44").events] == ["prolog_start"]
    (hooks / "shockwave_layout.py").unlink()
    subprocess.run([str(hook)], env={**os.environ, "SHOCKWAVE_STORE": str(store), "SHOCKWAVE_HOOK_PYTHON":
                                     sys.executable, "SLURM_JOB_ID": "45", **env}, check=True, timeout=20)
    assert not (store / "_system" / "45.jsonl").exists() and "shockwave_layout.py" in log.read_text()


def test_hook_always_exits_zero(tmp_path):
    _hook(tmp_path / "missing", SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_ID="1",
          SLURM_JOB_COMMENT="shockwave")
    bad = tmp_path / "s"
    bad.mkdir()
    (bad / "_system").mkdir(mode=0o777)
    os.chmod(bad / "_system", 0o777)  # writable by others: refused, still exit 0
    _hook(bad, SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_ID="1",
          SLURM_JOB_COMMENT="shockwave")
    assert os.listdir(bad / "_system") == []
    r = subprocess.run([str(HOOK)], env={"PATH": "/nonexistent"}, timeout=20)
    assert r.returncode == 0
    t0 = time.monotonic()
    _hook(bad, SLURM_SCRIPT_CONTEXT="epilog_slurmd", SLURM_JOB_ID="1")
    assert time.monotonic() - t0 < 5


def test_prolog_hook_creates_the_users_directory_as_root(store):
    if os.geteuid() != 0:
        pytest.skip("the prolog runs as root")
    (store / "_system").mkdir(mode=0o755)
    _hook(store, SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_ID="61", SLURM_JOB_UID="4242",
          SLURM_JOB_GID="4242", SLURM_JOB_COMMENT="shockwave epochs=3")
    d = store / "users" / "4242"
    assert d.is_dir() and d.stat().st_uid == 4242 and (d.stat().st_mode & 0o777) == 0o755
    assert (store / "users").stat().st_uid == 0
    # a users/ directory a user made (store root left 1777 by mistake) is refused: nothing created in it
    other = store.parent / "store2"
    other.mkdir()
    (other / "_system").mkdir(mode=0o755)
    (other / "users").mkdir(mode=0o777)
    os.chmod(other / "users", 0o777)
    _hook(other, SLURM_SCRIPT_CONTEXT="prolog_slurmd", SLURM_JOB_ID="62", SLURM_JOB_UID="4242",
          SLURM_JOB_COMMENT="shockwave")
    assert not (other / "users" / "4242").exists()
