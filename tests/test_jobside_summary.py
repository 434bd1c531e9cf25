"""Per-job event state: bounded incremental summary, persisted offsets, hints given twice, store layout."""
from __future__ import annotations

import json
import os
import stat
import tracemalloc

import pytest

from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.events import EventReader, EventWriter, ProgressState, summarize, validate
from slurm_shockwave.events.schema import make_record
from slurm_shockwave.events.store import (FileRejected, check_store, ensure_job_dir, job_event_path,
                                          provision_user_dir)
from slurm_shockwave.events.summary import MAX_BATCH_SIZES, MAX_RUNS
from slurm_shockwave.events.tracker import EventTracker

T = 1_700_000_000.0


def ev(kind, epoch=None, bs=32, ts=0.0, restart=0, **kw):
    if kind == "epoch_end":
        kw.update(epoch=epoch, batch_size=bs, duration_s=kw.pop("duration_s", 10.0))
    elif kind == "batch_size_change":
        kw["batch_size"] = bs
    e, reason = validate(make_record(kind, "7", restart, T + ts, **kw))
    assert reason is None, reason
    return e


def test_hostile_epoch_builds_no_history_and_is_ignored():
    st = ProgressState("7", declared={"epochs": 12})
    st.add([ev("epoch_end", 0, ts=1), ev("epoch_end", 9_999_999, ts=2)])
    p = st.progress()
    assert (p.epochs_done, p.ignored, p.bs_runs, p.total_epochs) == (1, 1, ((32, 1),), 12)
    # no declared total at all: bounded by the jump limit, the history stays one run
    st2 = ProgressState("7")
    st2.add([ev("epoch_end", 9_999_999, ts=1)])
    assert st2.progress().epochs_done == 0 and st2.progress().ignored == 1
    st2.add([ev("epoch_end", 5_000, ts=2)])           # a gap of lost lines is filled, run-length encoded
    assert st2.progress().epochs_done == 5_001 and st2.progress().bs_runs == ((32, 5_001),)


def test_memory_per_job_is_bounded_whatever_the_job_writes():
    tracemalloc.start()
    st = ProgressState("7", declared={"epochs": 1_000_000})
    base = tracemalloc.get_traced_memory()[0]
    # alternating batch sizes on every epoch (worst case for run-length encoding) and many distinct sizes
    st.add([ev("epoch_end", i, bs=(32 if i % 2 else 64) + (i % 500), ts=i) for i in range(20_000)])
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    p = st.progress()
    assert len(p.bs_runs) <= MAX_RUNS and p.history_truncated
    assert len(p.epoch_duration_by_bs) <= MAX_BATCH_SIZES
    assert sum(n for _, n in p.bs_runs) == p.epochs_done
    assert grown < 2_000_000, grown                    # bytes: bounded, not ~20k events
    assert len(json.dumps(st.to_dict())) < 100_000


def test_incremental_equals_whole_fold_and_redone_epochs_count_once():
    evs = [ev("start", bs=32, ts=0), ev("epoch_end", 0, 32, 10, total_epochs=4),
           ev("batch_size_change", bs=64, ts=11, old_batch_size=32), ev("epoch_end", 1, 64, 16, duration_s=5),
           ev("exit", ts=17, exit_code=0, reason="preempted (signals: SIGUSR1); requeued"),
           ev("epoch_end", 1, 64, 30, restart=1, duration_s=7), ev("epoch_end", 2, 64, 40, restart=1, duration_s=6)]
    st = ProgressState("7")
    for e in evs:                                       # one event per poll
        st.add([e])
    a, b = st.progress(), summarize(evs)
    assert a == b
    assert a.epochs_done == 3 and a.bs_per_epoch == (32, 64, 64) and a.epochs_by_bs == {32: 1, 64: 3}
    # the restarted run's first epoch (7 s) counts but is not timed (it may have resumed mid-epoch)
    assert a.epoch_duration_by_bs == {32: 10.0, 64: 5.5} and a.busy_seconds(1.0) == 21.0
    restored = ProgressState.from_dict("7", json.loads(json.dumps(st.to_dict())))
    assert restored.progress() == a


def test_the_first_epoch_of_a_resumed_run_is_counted_not_timed():
    """Resumed mid-epoch, a run's first epoch reports only its own part (30 of 100 s): it counts as an epoch done
    but is neither a duration nor a throughput sample; the next epochs of that run are.  A saved state from before
    (two-element entries) restores as all timed."""
    evs = [ev("start", ts=0), ev("epoch_end", 0, ts=100, duration_s=100.0), ev("epoch_end", 1, ts=200, duration_s=100.0),
           ev("start", ts=300, restart=1), ev("epoch_end", 2, ts=340, duration_s=30.0, restart=1, samples=1000),
           ev("epoch_end", 3, ts=440, duration_s=100.0, restart=1),
           ev("start", ts=500, restart=2), ev("epoch_end", 4, bs=64, ts=520, duration_s=10.0, restart=2)]
    p = summarize(evs)
    assert p.epochs_done == 5 and p.epochs_by_bs == {32: 4, 64: 1}
    assert p.epoch_duration_by_bs == {32: 100.0}                   # 64 has no timed epoch yet: not guessed here
    assert p.last_throughput is None
    st = ProgressState("7")
    st.add(evs[:4])
    st.add(evs[4:])
    assert st.progress() == p                                     # incremental, the same
    old = st.to_dict()
    old["dur"] = {"32": [300.0, 3]}
    old["runs"], old["done"] = [[32, 3]], 3
    assert ProgressState.from_dict("7", old).progress().epoch_duration_by_bs == {32: 100.0}


def test_ended_early_and_hint_conflicts_are_in_the_summary():
    st = ProgressState("7", declared={"epochs": 12, "bs": 32, "max_bs": 256})
    st.add([ev("start", ts=0), ev("epoch_end", 0, 64, 5, total_epochs=10, max_batch_size=512),
            ev("epoch_end", 1, 64, 6),
            ev("exit", ts=7, exit_code=1, reason="ended early: 2/10 epochs, requeue failed: timed out")])
    p = st.progress()
    assert p.ended_early and not p.finished and p.exit_reason.startswith("ended early: 2/10")
    assert p.hint_conflicts == {"epochs": {"hint": 12, "reported": 10}, "bs": {"hint": 32, "reported": 64},
                                "max_bs": {"hint": 256, "reported": 512}}
    assert p.total_epochs == 10                        # the job's own report wins over the comment
    st.add([ev("requeue", ts=8, restart=1)])
    assert not st.progress().ended_early               # requeued after all: not "ended early"


def test_tracker_persists_offsets_and_summaries(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    w = EventWriter.for_job(root, "5")
    for i in range(3):
        w.emit("epoch_end", epoch=i, batch_size=32, duration_s=2.0, total_epochs=10)
    state = StateStore(tmp_path / "state.sqlite")
    uid = os.geteuid()
    t1 = EventTracker(EventReader(root), state)
    assert t1.poll({"5": uid}) == ["5"] and t1.progress("5").epochs_done == 3
    w.emit("epoch_end", epoch=3, batch_size=64, duration_s=1.0)
    reader2 = EventReader(root)                         # a restarted controller
    t2 = EventTracker(reader2, StateStore(tmp_path / "state.sqlite"))
    assert t2.poll({"5": uid}) == ["5"]
    assert reader2.accepted == 1                        # only the new line was read
    p = t2.progress("5")
    assert p.epochs_done == 4 and p.bs_runs == ((32, 3), (64, 1))
    assert t2.poll({}) == [] and "5" not in t2.jobs and reader2.export_offsets() == {}
    final = t2.outcome("5")                             # the last summary of a job that left the queue
    assert final.epochs_done == 4


def test_store_paths_cannot_be_claimed_for_another_user(tmp_path):
    """The layout: only root creates users/<uid>; a user-created directory elsewhere is never used."""
    root = tmp_path / "shared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    (root / "_system").mkdir(mode=0o755)
    assert check_store(root) == []
    d = provision_user_dir(root, 4242, 4242)
    assert d.stat().st_uid == 4242 and stat.S_IMODE(d.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "users").stat().st_mode) == 0o755 and (root / "users").stat().st_uid == 0
    # events of uid 4242 are read from users/4242 only; a legacy dir made by someone else is ignored
    os.mkdir(root / "77")
    p = job_event_path(root, "77", 4242)
    os.mkdir(p.parent)
    os.chown(p.parent, 4242, 4242)
    p.write_bytes(json.dumps(make_record("epoch_end", "77", 0, T, epoch=0, batch_size=8,
                                         duration_s=1.0)).encode() + b"\n")
    os.chown(p, 4242, 4242)
    got = EventReader(root).read_job("77", expected_uid=4242)
    assert [e.kind for e in got.events] == ["epoch_end"] and not got.rejected
    # a users/<uid> directory owned by someone else (an admin mistake) is refused by reader and writer
    bad = root / "users" / str(os.geteuid())
    bad.mkdir()
    os.chown(bad, 4242, 4242)
    with pytest.raises(FileRejected):
        ensure_job_dir(root, "78")
    os.chmod(root, 0o1777)
    assert any("writable by others" in line for line in check_store(root))


def test_events_command_on_a_job_without_events_says_so_and_fails(tmp_path):
    from click.testing import CliRunner

    from slurm_shockwave.cli.main import cli
    root = tmp_path / "store"
    root.mkdir()
    r = CliRunner().invoke(cli, ["events", "999", "--store", str(root)])
    assert r.exit_code == 1 and "no events for job 999" in r.output and "\n" == r.output[-1]
    assert len(r.output.strip().splitlines()) == 1
    EventWriter.for_job(root, "998").emit("epoch_end", epoch=0, batch_size=8, duration_s=1.0)
    ok = CliRunner().invoke(cli, ["events", "998", "--store", str(root), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)["events"][0]["kind"] == "epoch_end"


def test_a_backlog_is_read_over_several_rounds_within_the_line_budget(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    for j in range(10):
        w = EventWriter.for_job(root, str(j))
        for i in range(30):
            w.emit("epoch_end", epoch=i, batch_size=8, duration_s=1.0, total_epochs=30)
    reader = EventReader(root)
    t = EventTracker(reader, None, max_lines_per_round=100)
    uids = {str(j): os.geteuid() for j in range(10)}
    rounds = 0
    while not all(t.progress(str(j)).epochs_done == 30 for j in range(10)):
        before = reader.accepted
        t.poll(uids)
        rounds += 1
        assert reader.accepted - before <= 100 + 30          # the budget, plus at most one job's batch
        assert rounds < 10
    assert rounds == 3 and reader.accepted == 300
