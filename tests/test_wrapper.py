"""shockwave-run, the training API, CheckpointManager and the torch helpers (no Slurm needed)."""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader, decode_line, summarize
from slurm_shockwave.wrapper.api import Reporter
from slurm_shockwave.wrapper.checkpoint import CheckpointManager
from slurm_shockwave.wrapper.torch_helpers import AccordionDetector, GNSEstimator

REPO = Path(__file__).resolve().parents[1]
RUN = [sys.executable, "-m", "slurm_shockwave.wrapper.cli"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SHOCKWAVE_"))}
    env.update(SHOCKWAVE_STORE=str(tmp_path / "store"), PYTHONPATH=str(REPO), SHOCKWAVE_REQUEUE_RETRY_S="0",
               **extra)
    return env


def _run(cwd: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(RUN + args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def _popen(cwd: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(RUN + args, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)


def _events(tmp_path: Path, job: str):
    job_ev = EventReader(tmp_path / "store").read_job(job, expected_uid=os.geteuid())
    assert not job_ev.rejected
    return job_ev.events


def _wait_file(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_start_exit_events_and_exit_code(tmp_path):
    names = ["SHOCKWAVE_JOB_ID", "SHOCKWAVE_RESTART_COUNT", "SHOCKWAVE_EVENT_FILE",
             "SHOCKWAVE_CHECKPOINT_DIR"]
    child = f"import os,sys; print(*[os.environ[k] for k in {names!r}]); sys.exit(3)"
    env = _env(tmp_path, SLURM_JOB_ID="1234", SLURM_RESTART_COUNT="2", CUDA_VISIBLE_DEVICES="0,1")
    r = _run(tmp_path, ["--checkpoint-dir", str(tmp_path / "ck"), "--", sys.executable, "-c",
                        child], env)
    assert r.returncode == 3, r.stderr
    assert r.stdout.split() == ["1234", "2", str(tmp_path / f"store/users/{os.geteuid()}/1234/events.jsonl"),
                                str(tmp_path / "ck")]
    evs = _events(tmp_path, "1234")
    assert [(e.kind, e.restart) for e in evs] == [("start", 2), ("exit", 2)]
    assert evs[0].gpus == 2 and evs[1].exit_code == 3 and evs[1].reason == "failed"


def test_local_id_and_signal_death(tmp_path):
    r = _run(tmp_path, ["--", sys.executable, "-c",
                        "import os,signal; os.kill(os.getpid(), signal.SIGKILL)"], _env(tmp_path))
    assert r.returncode == 128 + 9
    (job,) = os.listdir(tmp_path / "store" / "users" / str(os.geteuid()))
    assert job.startswith("local-")
    assert [(e.kind, e.exit_code, e.signal) for e in _events(tmp_path, job)][-1] == ("exit", -9, 9)


@pytest.mark.parametrize("argv,msg", [
    ([], "no command given"),
    (["--signal", "BOGUS", "--", "true"], "unknown signal"),
])
def test_bad_usage_is_a_clear_error(tmp_path, argv, msg):
    r = _run(tmp_path, argv, _env(tmp_path))
    assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_slurm_job_id_is_rejected(tmp_path):
    r = _run(tmp_path, ["--", "true"], _env(tmp_path, SLURM_JOB_ID="../../etc"))
    assert r.returncode == 2 and "invalid job id" in r.stderr
    assert not (tmp_path / "store").exists()


CHILD_WAITS_FOR_CHECKPOINT = textwrap.dedent("""
    import sys, time, pathlib
    from slurm_shockwave.wrapper import api
    api.get_reporter()                     # installs the handlers
    pathlib.Path(sys.argv[1]).touch()      # ready
    t = time.time()
    while not api.should_checkpoint() and time.time() - t < 20:
        time.sleep(0.01)
    print("ckpt", api.should_checkpoint(), "exit", api.should_exit())
    api.checkpointed("/tmp/ck.pkl", epoch=0)
""")


@pytest.mark.parametrize("sig,should_exit", [(signal.SIGUSR1, False), (signal.SIGTERM, True)])
def test_signal_forwarded_and_checkpoint_requested(tmp_path, sig, should_exit):
    ready = tmp_path / "ready"
    p = _popen(tmp_path, ["--", sys.executable, "-c", CHILD_WAITS_FOR_CHECKPOINT, str(ready)],
               _env(tmp_path, SLURM_JOB_ID="77"))
    _wait_file(ready)
    p.send_signal(sig)
    out, _ = p.communicate(timeout=30)
    # USR1 + checkpoint: the job stopped early and asks to be requeued; there is no Slurm here, so the requeue
    # fails and the wrapper exits 1 (never "completed" with work left).  SIGTERM: Slurm itself ends/requeues it.
    assert p.returncode == (0 if should_exit else 1)
    assert out.split() == ["ckpt", "True", "exit", str(should_exit)]
    evs = _events(tmp_path, "77")
    assert [e.kind for e in evs] == ["start", "signal", "checkpoint", "exit"]
    assert evs[1].signal == int(sig)
    assert evs[-1].reason.startswith("preempted" if should_exit else "ended early: 0 epochs, requeue failed")


def test_early_signal_before_api_is_not_lost(tmp_path):
    """USR1 before the child installed its handler: not killed, request still seen."""
    child = textwrap.dedent("""
        import time; time.sleep(1.5)
        from slurm_shockwave.wrapper import api
        print(api.should_checkpoint())
    """)
    p = _popen(tmp_path, ["--", sys.executable, "-c", child], _env(tmp_path, SLURM_JOB_ID="78"))
    _wait_file(tmp_path / "store" / "users" / str(os.geteuid()) / "78" / "events.jsonl")
    time.sleep(0.2)
    p.send_signal(signal.SIGUSR1)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and out.strip() == "True"


def test_event_failures_never_crash_training(tmp_path, capsys):
    (tmp_path / "store").write_text("not a directory")
    r = _run(tmp_path, ["--", sys.executable, "-c",
                        "from slurm_shockwave.wrapper import api; "
                        "print(api.report_epoch(0, 32, 100, 1.0)); raise SystemExit(5)"],
             _env(tmp_path, SLURM_JOB_ID="79"))
    assert r.returncode == 5 and r.stdout.strip() == "False"
    # one line says why, and the program is not told about a store it cannot write to (no warning per event)
    assert r.stderr.count("shockwave:") == 1 and "this job runs unreported" in r.stderr, r.stderr
    rep = Reporter(tmp_path / "nodir" / "x.jsonl", "80", 0, install_handlers=False, env={})
    assert rep.enabled and rep.report_epoch(0, 32, 100, 1.0) is False  # directory missing
    assert rep.report_epoch(-1, 0, 1, 1.0) is False                     # invalid values
    assert "could not record epoch_end" in capsys.readouterr().err
    off = Reporter(install_handlers=False, env={})
    assert not off.enabled and off.report_batch_size_change(32, 64) is False


def test_reporter_fields(tmp_path):
    rep = Reporter(tmp_path / "e.jsonl", "81", 1, gpus=4, install_handlers=False, env={})
    rep.configure(total_epochs=10, samples_per_epoch=1000, min_batch_size=32, max_batch_size=256)
    assert rep.report_epoch(0, 64, 1000, 2.0, gns=12.5)
    assert rep.report_batch_size_change(64, 128, "gns", epoch=1)
    lines = (tmp_path / "e.jsonl").read_bytes().splitlines()  # not in a store: decode directly
    e0, e1 = (decode_line(ln, "81")[0] for ln in lines)
    assert (e0.throughput, e0.throughput_bs, e0.throughput_gpus, e0.restart) == (500.0, 64, 4, 1)
    assert (e0.total_epochs, e0.gns, e1.old_batch_size, e1.batch_size) == (10, 12.5, 64, 128)


# ------------------------------------------------------------------- checkpoints
def test_checkpoint_save_load_atomic(tmp_path, monkeypatch):
    cm = CheckpointManager(tmp_path / "ck")
    assert cm.load() is None and cm.resume_epoch() == 0
    cm.save({"w": [1, 2, 3]}, epochs_done=2)
    assert CheckpointManager(tmp_path / "ck").load() == {"w": [1, 2, 3]}
    assert CheckpointManager(tmp_path / "ck").resume_epoch() == 2

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(pickle, "dump", boom)
    with pytest.raises(OSError):
        cm.save({"w": "new"}, epochs_done=3)
    monkeypatch.undo()
    fresh = CheckpointManager(tmp_path / "ck")
    assert fresh.load() == {"w": [1, 2, 3]} and fresh.resume_epoch() == 2  # old one intact
    cm.save({"w": "third"}, epochs_done=3)
    assert [p.name for p in (tmp_path / "ck").iterdir() if p.name.endswith(".tmp")] == []
    (tmp_path / "ck" / "checkpoint.pkl").write_bytes(b"garbage")  # corrupt: previous one used
    assert CheckpointManager(tmp_path / "ck").load() == {"w": [1, 2, 3]}


def test_stale_checkpoint_of_reused_job_id_is_ignored(tmp_path, monkeypatch):
    for k in ("SLURM_RESTART_COUNT", "SHOCKWAVE_RESTART_COUNT", "SHOCKWAVE_RUN_START"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SHOCKWAVE_JOB_ID", "5")
    CheckpointManager(tmp_path).save({"old": True}, epochs_done=7)
    monkeypatch.setenv("SHOCKWAVE_RUN_START", str(time.time() + 1))  # a later first run of "5"
    assert CheckpointManager(tmp_path).load() is None
    assert CheckpointManager(tmp_path).resume_epoch() == 0
    monkeypatch.setenv("SHOCKWAVE_RESTART_COUNT", "1")  # a requeued run: resume
    assert CheckpointManager(tmp_path).resume_epoch() == 7
    monkeypatch.setenv("SHOCKWAVE_RESTART_COUNT", "0")
    monkeypatch.setenv("SHOCKWAVE_JOB_ID", "6")  # another job's checkpoint dir: deliberate resume
    assert CheckpointManager(tmp_path).load() == {"old": True}


def test_checkpoint_records_event(tmp_path):
    rep = Reporter(tmp_path / "e.jsonl", "82", 0, install_handlers=False, env={})
    CheckpointManager(tmp_path / "ck", reporter=rep).save({"a": 1}, epochs_done=4)
    ev = decode_line((tmp_path / "e.jsonl").read_bytes().strip(), "82")[0]
    assert ev.kind == "checkpoint" and ev.epoch == 3 and ev.path.endswith("checkpoint.pkl")


# ------------------------------------------------------------------ torch helpers
def test_gns_estimator_recovers_known_noise_scale():
    g2, trace = 4.0, 400.0  # B_noise = 100
    est = GNSEstimator(ema=0.9, min_updates=3)
    for _ in range(5):
        est.update(g2 + trace / 8, 8, g2 + trace / 64, 64)
    assert est.gns == pytest.approx(100.0)
    assert est.suggest(32) == 64 and est.suggest(128) == 128 and est.suggest(64, max_bs=100) == 64

    class Rec:
        calls: list = []

        def report_batch_size_change(self, *a):
            self.calls.append(a)
    rec = Rec()
    assert est.decide(32, rec, epoch=3) == 64 and rec.calls == [(32, 64, "gns=100.0", 3)]
    noisy = GNSEstimator(min_updates=1)
    noisy.update(1.0, 8, 2.0, 64)  # big-batch norm larger than small: |G|^2 ok, tr(S) < 0
    assert noisy.gns is None and noisy.suggest(32) == 32


def test_gns_on_tiny_torch_model():
    torch = pytest.importorskip("torch")
    from slurm_shockwave.wrapper.torch_helpers import measure_step
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    data = torch.randn(1024, 8)
    labels = (data[:, 0] + 0.5 * data[:, 1] > 0).long()  # learnable: a real gradient signal
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    est = GNSEstimator(ema=0.8, min_updates=5)
    for step in range(10):
        x, y = data[step * 64:(step + 1) * 64], labels[step * 64:(step + 1) * 64]
        loss, s_sq, s_bs, b_sq, b_bs = measure_step(model, loss_fn, x, y, micro_batches=4)
        est.update(s_sq, s_bs, b_sq, b_bs)
        if step < 9:
            opt.step()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss_fn(model(x), y).backward()  # the full-batch gradient is left in .grad
    for g, p in zip(got, model.parameters()):
        assert torch.allclose(g, p.grad, atol=1e-6)
    assert (s_bs, b_bs) == (16, 64) and s_sq > b_sq > 0
    assert est.gns is not None and est.gns > 0


def test_accordion_detector_switches_regimes():
    det = AccordionDetector(32, 256, threshold=0.5, interval=2)
    calls = []

    class Rec:
        def report_batch_size_change(self, *a):
            calls.append(a)
    bs = 32
    for epoch, norm in enumerate([10, 10, 3, 3, 2.9, 2.9, 1.0, 1.0]):
        det.observe(norm)
        det.end_epoch(epoch)
        bs = det.decide(bs, Rec(), epoch + 1)
    assert [c[:2] for c in calls] == [(32, 256), (256, 32)]
    assert det.critical and det.last_ratio == pytest.approx(1 - 1.0 / 2.9)


def test_train_cnn_resumes_exactly_after_preemption(tmp_path):
    pytest.importorskip("torch")
    args = ["--mode", "gns", "--gns-schedule", "fallback", "--epochs", "4", "--samples", "256",
            "--batch-size", "16", "--max-batch-size", "64", "--step-sleep", "0.02"]
    train = [sys.executable, str(REPO / "job_templates" / "train_cnn.py")] + args
    env = _env(tmp_path, SLURM_JOB_ID="90", SHOCKWAVE_CHECKPOINT_DIR=str(tmp_path / "ck"))
    p = _popen(tmp_path, ["--"] + train, env)
    evfile = tmp_path / "store" / "users" / str(os.geteuid()) / "90" / "events.jsonl"
    deadline = time.monotonic() + 60
    while b'"epoch":0' not in (evfile.read_bytes() if evfile.exists() else b""):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    time.sleep(0.3)  # mid epoch 1
    p.send_signal(signal.SIGUSR1)
    out1, _ = p.communicate(timeout=60)
    assert p.returncode == 1 and "checkpoint on signal" in out1   # no Slurm to requeue it: not COMPLETED
    r = _run(tmp_path, ["--"] + train, {**env, "SLURM_RESTART_COUNT": "1"})
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    evs = _events(tmp_path, "90")
    epochs = [e.epoch for e in evs if e.kind == "epoch_end"]
    assert sorted(epochs) == epochs == [0, 1, 2, 3]  # none lost, none repeated
    prog = summarize(evs)
    assert prog.finished and prog.restarts == 1 and prog.bs_per_epoch == (16, 32, 64, 64)
    assert [(e.old_batch_size, e.batch_size) for e in evs if e.kind == "batch_size_change"] == [
        (16, 32), (32, 64)]
    # the interrupted+resumed run ends with exactly the weights of an uninterrupted run
    env2 = _env(tmp_path, SLURM_JOB_ID="91", SHOCKWAVE_CHECKPOINT_DIR=str(tmp_path / "ck2"))
    assert _run(tmp_path, ["--"] + train, env2).returncode == 0
    import torch
    a = CheckpointManager(tmp_path / "ck").load()["model"]
    b = CheckpointManager(tmp_path / "ck2").load()["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_requeue_is_retried_with_backoff_until_the_job_time_runs_out():
    from slurm_shockwave.wrapper.outcome import requeue_with_retry
    now = [1000.0]
    calls, sleeps = [], []

    def run(argv, **kw):
        calls.append(argv)
        ok = len(calls) >= 4
        return subprocess.CompletedProcess(argv, 0 if ok else 1, "", "" if ok else
                                           "Unable to contact slurm controller (connect failure)")

    def sleep(s):
        sleeps.append(s)
        now[0] += s
    ok, err = requeue_with_retry("55", 2000.0, run=run, sleep=sleep, clock=lambda: now[0])
    assert ok and err == "" and len(calls) == 4 and sleeps == [1, 2, 4]
    assert calls[0] == ["scontrol", "requeue", "55"]
    calls.clear(), sleeps.clear()
    now[0] = 1000.0
    never = lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "Unable to contact slurm controller")
    ok, err = requeue_with_retry("55", 1100.0, run=never, sleep=sleep, clock=lambda: now[0])
    assert not ok and "Unable to contact" in err
    assert now[0] <= 1100.0 - 5 and sum(sleeps) >= 60            # kept trying until just before the end time
    now[0] = 1000.0
    bad = lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "scontrol: error: Invalid job id specified")
    assert requeue_with_retry("55", None, run=bad, sleep=sleep, clock=lambda: now[0])[0] is False
    assert now[0] == 1000.0                                        # a permanent error is not retried
    pending = lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "Job is pending execution")
    assert requeue_with_retry("55", None, run=pending, sleep=sleep, clock=lambda: now[0]) == (True, "")
    ok, err = requeue_with_retry("55", 5000.0, run=never, sleep=sleep, clock=lambda: now[0], stop=lambda: True)
    assert not ok and "SIGTERM" in err and now[0] == 1000.0        # Slurm is ending the job: stop retrying


def test_checkpoint_signal_after_the_last_epoch_is_not_a_failure(tmp_path):
    import signal as _signal
    import types

    from slurm_shockwave.events.writer import EventWriter
    from slurm_shockwave.wrapper.cli import Runner

    w = EventWriter.for_job(tmp_path, "201")
    w.emit("epoch_end", epoch=0, batch_size=8, duration_s=1.0, total_epochs=1)
    ctx = types.SimpleNamespace(store=str(tmp_path), job_id="201", restart=0, in_slurm=False, event_file=None)
    r = Runner(ctx, ["true"], _signal.SIGUSR1)
    assert r._all_epochs_reported()
    w2 = EventWriter.for_job(tmp_path, "202")
    w2.emit("epoch_end", epoch=0, batch_size=8, duration_s=1.0, total_epochs=3)
    ctx2 = types.SimpleNamespace(store=str(tmp_path), job_id="202", restart=0, in_slurm=False, event_file=None)
    assert not Runner(ctx2, ["true"], _signal.SIGUSR1)._all_epochs_reported()

