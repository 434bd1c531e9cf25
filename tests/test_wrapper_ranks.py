"""Multi-process jobs (issue 33): ranks, one checkpoint writer, the request reaching every rank behind torchrun.

No Slurm needed: the 2-process run is torchrun --standalone with gloo on CPU under shockwave-run.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader
from slurm_shockwave.wrapper import Training, cli, ranks
from slurm_shockwave.wrapper.api import Reporter
from slurm_shockwave.wrapper.checkpoint import CheckpointManager

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SHOCKWAVE_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    env.update(SHOCKWAVE_STORE=str(tmp_path / "store"), PYTHONPATH=str(REPO), SHOCKWAVE_REQUEUE_RETRY_S="0",
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", **extra)
    return env


# ------------------------------------------------------------------ (a) rank detection per launcher
@pytest.mark.parametrize("env,want", [
    ({}, (0, 0, 1)),                                                               # plain python
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}, (0, 0, 1)),  # plain one-task sbatch job
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}, (3, 1, 4)),               # torchrun, accelerate launch
    ({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"}, (5, 1, 8)),  # srun, one task per GPU
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4"},
     (1, 1, 4)),                                                                   # srun torchrun: torch's rank wins
    ({"RANK": "x", "WORLD_SIZE": "2", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, (1, 0, 2)),  # bad RANK: skipped
    ({"RANK": "2", "WORLD_SIZE": "2"}, (0, 0, 1)),                                 # out of range: ignored
])
def test_rank_detection(env, want):
    r = ranks.detect(env)
    assert (r.rank, r.local_rank, r.world_size) == want and r.leader == (want[0] == 0)


def test_only_rank_0_reports_and_torch_is_not_imported(tmp_path):
    env = {"SHOCKWAVE_JOB_ID": "301", "RANK": "1", "WORLD_SIZE": "2"}
    assert not Reporter(tmp_path / "e.jsonl", install_handlers=False, env=env).emit("start")
    assert Reporter(tmp_path / "e.jsonl", install_handlers=False, env={**env, "RANK": "0"}).emit("start")
    assert ranks.agree(True) and not ranks.agree(False)
    code = ("import sys; from slurm_shockwave.wrapper import Training, cli\n"
            "class S:\n    def state_dict(self): return {}\n    def load_state_dict(self, s): pass\n"
            f"r = Training(S(), 2, checkpoint_dir={str(tmp_path / 'ck')!r})\n"
            "assert [e for e in r.epochs() if not r.should_checkpoint()] == [0, 1]\n"
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_checkpoint_signal_goes_only_to_a_child_that_catches_it_and_is_not_a_launcher():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert not cli._catches(sleeper.pid, signal.SIGUSR1)               # it would die of it
        prev = signal.signal(signal.SIGUSR1, lambda *a: None)
        try:
            assert cli._catches(os.getpid(), signal.SIGUSR1)
        finally:
            signal.signal(signal.SIGUSR1, prev)
        for cmd, takes in [(["python", "train.py"], True), (["torchrun", "--nproc_per_node=2", "t.py"], False),
                           (["/usr/bin/srun", "python", "t.py"], False),
                           (["python", "-m", "torch.distributed.run", "t.py"], False)]:
            r = cli.Runner(None, cmd, signal.SIGUSR1)  # type: ignore[arg-type]
            r.child = types.SimpleNamespace(pid=os.getpid())  # a child that catches USR1
            signal.signal(signal.SIGUSR1, lambda *a: None)
            try:
                assert r._child_takes(signal.SIGUSR1) is takes, cmd
                assert r._child_takes(signal.SIGUSR2) is False  # USR2 not caught: it would die of it
            finally:
                signal.signal(signal.SIGUSR1, prev)
    finally:
        sleeper.kill()
        sleeper.wait()


# ------------------------------------------------------------------ (c) the old race: two ranks saving
SAVER = textwrap.dedent("""
    import sys, time
    from slurm_shockwave.wrapper import CheckpointManager, Training
    time.sleep(max(0.0, float(sys.argv[4]) - time.time()))   # both ranks start saving at once
    class S:
        def state_dict(self): return {"blob": b"x" * 200_000, "rank": sys.argv[2]}
        def load_state_dict(self, s): self.loaded = s
    s = S()
    if sys.argv[3] == "manager":       # the lower level: both really write the same file
        cm = CheckpointManager(sys.argv[1])
        for i in range(150):
            cm.save(s.state_dict(), epochs_done=i)
    else:
        run = Training(s, 5, checkpoint_dir=sys.argv[1], per_rank=sys.argv[3] == "per_rank")
        for i in range(150):
            run.save(i)
""")


@pytest.mark.parametrize("mode", ["manager", "training", "per_rank"])
def test_two_ranks_saving_at_once_never_crash(tmp_path, monkeypatch, mode):
    ck = tmp_path / "ck"
    at = str(time.time() + 1.5)
    procs = [subprocess.Popen([sys.executable, "-c", SAVER, str(ck), str(r), mode, at], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**_env(tmp_path), "RANK": str(r), "WORLD_SIZE": "2", "SHOCKWAVE_STORE": ""})
             for r in (0, 1)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    names = sorted(os.listdir(ck))
    if mode == "per_rank":
        assert names == ["checkpoint.rank0.pkl", "checkpoint.rank0.prev.pkl", "checkpoint.rank1.pkl",
                         "checkpoint.rank1.prev.pkl"]
    else:
        assert names == ["checkpoint.pkl", "checkpoint.prev.pkl"]          # no temp file left
        assert CheckpointManager(ck).load()["rank"] in (("0",) if mode == "training" else ("0", "1"))
    if mode != "manager":  # every rank resumes: from rank 0's checkpoint, or (per_rank) from its own
        for r in (0, 1):
            monkeypatch.setenv("RANK", str(r))
            monkeypatch.setenv("WORLD_SIZE", "2")
            s = Loaded()
            run = Training(s, 200, checkpoint_dir=str(ck), per_rank=mode == "per_rank",
                           reporter=Reporter(install_handlers=False, env={}))
            assert (run.start_epoch, s.state["rank"]) == (149, str(r) if mode == "per_rank" else "0")


class Loaded:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        self.state = state


# ------------------------------------------------------------------ (b) torchrun, 2 ranks, gloo on CPU
TRAIN = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    if os.environ.get("BLIND_RANK") == os.environ["RANK"]:   # this rank never sees the request file itself
        os.environ.pop("SHOCKWAVE_CHECKPOINT_REQUEST_FILE")
    from slurm_shockwave.wrapper import Training
    def say(msg):  # one write: the ranks share the pipe
        os.write(1, f"rank{rank} {msg}\\n".encode())
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    STEPS, BS = 25, 8

    class Job:
        step = 0
        def state_dict(self):
            return {"model": model.module.state_dict(), "opt": opt.state_dict(), "step": self.step, "rank": rank}
        def load_state_dict(self, s):
            model.module.load_state_dict(s["model"]); opt.load_state_dict(s["opt"]); self.step = s["step"]

    job = Job()
    run = Training(job, total_epochs=4, samples_per_epoch=STEPS * BS * world, batch_size=BS, save_every=100)
    say(f"resume {run.start_epoch} {job.step}")
    stop = None
    for epoch in run.epochs():
        first = job.step
        data = torch.randn(STEPS, BS, 4, generator=torch.Generator().manual_seed(epoch * 10 + rank))
        while job.step < STEPS:
            loss = model(data[job.step]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            job.step += 1
            time.sleep(float(os.environ.get("STEP_S", "0")))
            if run.should_checkpoint() and job.step < STEPS:
                break
        if job.step < STEPS:
            stop = (epoch, job.step)
            break
        run.report(samples=(STEPS - first) * BS * world)
        job.step = 0
        stop = (epoch + 1, 0)
    if run.stopped_early:
        say(f"stop {stop[0]} {stop[1]}")
    w = model.module.weight.detach().flatten().tolist() + model.module.bias.detach().tolist()
    say(f"weights {w!r}")
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)   # gloo may abort a rank in its exit-time destructors ("terminate called without an active exception")
""")


def _lines(out: str, word: str) -> dict[str, str]:
    return {ln.split()[0]: " ".join(ln.split()[2:]) for ln in out.splitlines() if ln.split()[1:2] == [word]}


def test_torchrun_two_ranks_stop_together_and_resume_with_nothing_lost(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAIN)
    job = "93301"
    cmd = [str(BIN / "shockwave-run"), "--no-requeue-on-signal", "--", str(BIN / "torchrun"), "--standalone",
           "--nproc_per_node=2", str(tmp_path / "train.py")]
    env = _env(tmp_path, SLURM_JOB_ID=job, SHOCKWAVE_CHECKPOINT_DIR=str(tmp_path / "ck"), STEP_S="0.03",
               BLIND_RANK="1")
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobdir = tmp_path / "store" / "users" / str(os.geteuid()) / job
    deadline = time.monotonic() + 60
    while b'"epoch":0' not in ((jobdir / "events.jsonl").read_bytes() if (jobdir / "events.jsonl").exists() else b""):
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.02)
    time.sleep(0.2)                                  # mid epoch 1
    p.send_signal(signal.SIGUSR1)
    out1, err1 = p.communicate(timeout=60)
    stops = _lines(out1, "stop")
    assert p.returncode == 1 and re.search(r"the program exited 0 after [0-3]/4 epochs", err1), err1[-3000:]
    # torchrun exited 0; the wrapper did not record COMPLETED with work left
    assert set(stops) == {"rank0", "rank1"} and stops["rank0"] == stops["rank1"], out1   # the same step
    assert "Traceback" not in err1 and "ChildFailedError" not in err1, err1[-3000:]
    assert sorted(os.listdir(tmp_path / "ck")) == ["checkpoint.pkl"]         # one file, written once
    assert CheckpointManager(tmp_path / "ck").load()["rank"] == 0              # by rank 0
    assert not (jobdir / cli.REQUEST_NAME).exists()
    stop_epoch, stop_step = map(int, stops["rank0"].split())

    out2 = subprocess.run(cmd, cwd=tmp_path, env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True,
                          text=True, timeout=60)
    assert out2.returncode == 0, out2.stderr[-3000:]
    resumed = _lines(out2.stdout, "resume")
    assert resumed == {"rank0": f"{stop_epoch} {stop_step}", "rank1": f"{stop_epoch} {stop_step}"}, out2.stdout

    evs = EventReader(tmp_path / "store").read_job(job, expected_uid=os.geteuid()).events
    ends = [(e.epoch, e.samples, e.restart) for e in evs if e.kind == "epoch_end"]
    assert [e[0] for e in ends] == [0, 1, 2, 3]                                  # each epoch reported once
    assert all(n == (25 - (stop_step if ep == stop_epoch else 0)) * 16 for ep, n, _ in ends)  # the rest of the steps
    assert [e.restart for e in evs if e.kind == "checkpoint"] == [0, 1]        # rank 0 only: one per run
    assert [e.kind for e in evs if e.kind in ("start", "exit")] == ["start", "exit", "start", "exit"]

    # nothing lost or repeated: the same weights as an uninterrupted run, on both ranks
    env3 = {**env, "SLURM_JOB_ID": "93302", "SHOCKWAVE_CHECKPOINT_DIR": str(tmp_path / "ck3"), "STEP_S": "0"}
    out3 = subprocess.run(cmd, cwd=tmp_path, env=env3, capture_output=True, text=True, timeout=60)
    assert out3.returncode == 0, out3.stderr[-3000:]
    want = _lines(out3.stdout, "weights")
    assert _lines(out2.stdout, "weights") == want and want["rank0"] == want["rank1"]


# ------------------------------------------------------------------ step-level resume (issue 33)
def test_steps_resume_at_the_exact_next_step_with_resume_and_checkpoint_events(tmp_path, monkeypatch):
    from slurm_shockwave.events.schema import decode_line
    from slurm_shockwave.wrapper import api

    class Obj:
        def __init__(self):
            self.done = []

        def state_dict(self):
            return {"done": list(self.done)}

        def load_state_dict(self, s):
            self.done = s["done"]

    def one_run(restart, stop_after):
        monkeypatch.setenv("SHOCKWAVE_RESTART_COUNT", str(restart))
        api.Reporter.clear_checkpoint_request()
        rep = Reporter(tmp_path / "e.jsonl", "401", restart, install_handlers=False, env={})
        obj = Obj()
        run = Training(obj, 3, steps_per_epoch=5, samples_per_epoch=50, checkpoint_dir=str(tmp_path / "ck"),
                       reporter=rep)
        for epoch in run.epochs():
            for i in run.steps(5):
                obj.done.append((epoch, i))
                if len(obj.done) == stop_after:
                    rep.request_checkpoint()           # the request arrives during this step
        return run, obj

    run, obj = one_run(0, 7)                           # stops after step 7 (epoch 1, step 2): mid-epoch
    assert run.stopped_early and (run.step, run.epoch_step) == (7, 2)
    run, obj = one_run(1, 12)
    assert run.start_step == 7 and run.stopped_early and run.step == 12
    run, obj = one_run(2, -1)
    assert not run.stopped_early and run.step == 15
    assert obj.done == [(e, i) for e in range(3) for i in range(5)]        # every step once, in order
    evs = [decode_line(line, "401")[0] for line in (tmp_path / "e.jsonl").read_bytes().splitlines()]
    assert [(e.restart, e.step, e.epoch) for e in evs if e.kind == "resume"] == [(0, 0, 0), (1, 7, 1), (2, 12, 2)]
    ck = [(e.restart, e.step) for e in evs if e.kind == "checkpoint"]
    assert ck == [(0, 5), (0, 7), (1, 10), (1, 12), (2, 15)]
    api.Reporter.clear_checkpoint_request()


RANKS_DISAGREE = textwrap.dedent("""
    import os, sys
    import torch.distributed as dist
    from slurm_shockwave.wrapper import Training
    from slurm_shockwave.wrapper.checkpoint import CheckpointManager
    dist.init_process_group("gloo")
    r = dist.get_rank()
    class S:
        def state_dict(self): return {}
        def load_state_dict(self, s): pass
    if os.environ.get("WRITE"):
        CheckpointManager(sys.argv[1], name=f"checkpoint.rank{r}").save({}, epochs_done=1, step=10 + r, epoch_step=r)
    else:
        try:
            Training(S(), 3, steps_per_epoch=10, checkpoint_dir=sys.argv[1], per_rank=True)
        except RuntimeError as e:
            print(f"rank{r} refused: {e}", flush=True)
    dist.destroy_process_group()
    os._exit(0)   # gloo may abort a rank in its exit-time destructors ("terminate called without an active exception")
""")


def test_ranks_that_restored_different_steps_refuse_on_every_rank(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "t.py").write_text(RANKS_DISAGREE)
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", str(tmp_path / "t.py"), str(tmp_path / "ck")]
    env = {**_env(tmp_path), "SHOCKWAVE_STORE": ""}
    assert subprocess.run(cmd, env={**env, "WRITE": "1"}, capture_output=True, timeout=60).returncode == 0
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60).stdout
    refusals = sorted(re.findall(r"(rank\d) refused: the ranks restored different checkpoints \(([^)]*)\)", out))
    assert [r for r, _ in refusals] == ["rank0", "rank1"], out  # found wherever the two ranks' lines interleave
    assert all(w == "epoch, step, step in epoch from [1, 10, 0] to [1, 11, 1]; this rank 0: [1, 10, 0]"
               or w.endswith("this rank 1: [1, 11, 1]") for _, w in refusals), out


GNS = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    from slurm_shockwave.wrapper.torch_helpers import measure_step_distributed
    dist.init_process_group("gloo")
    r, w = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(1))
    y = torch.randn(8, 2, generator=torch.Generator().manual_seed(2))
    loss, s_sq, s_bs, b_sq, b_bs = measure_step_distributed(ddp, torch.nn.functional.mse_loss, x[r*4:(r+1)*4],
                                                            y[r*4:(r+1)*4])
    g = [p.grad.clone() for p in net.parameters()]
    ref = torch.nn.Linear(3, 2); ref.load_state_dict(net.state_dict())   # one process, the same data
    small = []
    for k in range(w):
        ref.zero_grad(); torch.nn.functional.mse_loss(ref(x[k*4:(k+1)*4]), y[k*4:(k+1)*4]).backward()
        small.append(sum(float(p.grad.pow(2).sum()) for p in ref.parameters()))
    ref.zero_grad(); torch.nn.functional.mse_loss(ref(x), y).backward()
    big = sum(float(p.grad.pow(2).sum()) for p in ref.parameters())
    assert (s_bs, b_bs) == (4, 8), (s_bs, b_bs)
    assert abs(s_sq - sum(small) / w) < 1e-6 and abs(b_sq - big) < 1e-6, (s_sq, small, b_sq, big)
    assert all(torch.allclose(a, p.grad) for a, p in zip(g, ref.parameters()))   # the averaged gradient is left
    sys.stdout.write(f"rank{r} ok\\n"); sys.stdout.flush()   # one write: the ranks share the pipe
    dist.destroy_process_group()
    os._exit(0)   # gloo may abort a rank in its exit-time destructors ("terminate called without an active exception")
""")


def test_gns_across_ranks_uses_local_and_all_reduced_gradients(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "g.py").write_text(GNS)
    r = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", str(tmp_path / "g.py")],
                       env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    got = sorted(re.findall(r"rank\d ok", r.stdout))
    assert r.returncode == 0 and got == ["rank0 ok", "rank1 ok"], r.stderr[-3000:]
