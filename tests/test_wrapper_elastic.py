"""Elastic GPU counts (issue 34, part 4, the job side): a job restarted on another GPU count keeps its global batch
size and its sample position; the wrapper tells the program its count and the previous one.

No Slurm needed: torchrun --standalone with gloo on CPU under shockwave-run (a fake scontrol, tests/integration_runs).
"""

from __future__ import annotations

import ast
import collections
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader
from slurm_shockwave.wrapper import api
from tests.integration_runs import BIN, job_env, lines, run

N, GLOBAL_BS, EPOCHS, STOP_STEPS = 48, 8, 2, 3  # 6 steps an epoch; the first run stops after its 3rd step

ELASTIC = textwrap.dedent("""
    import os, sys, time
    import torch
    from slurm_shockwave.wrapper import Training
    launched = "RANK" in os.environ
    if launched:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    model = torch.nn.parallel.DistributedDataParallel(net) if launched else net
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.randn(48, 4, generator=torch.Generator().manual_seed(1))

    class Job:
        def state_dict(self):
            return {"model": net.state_dict(), "opt": opt.state_dict()}
        def load_state_dict(self, s):
            net.load_state_dict(s["model"]); opt.load_state_dict(s["opt"])

    run = Training(Job(), total_epochs=2, samples_per_epoch=48, batch_size=8)
    world, rank = run.rank.world_size, run.rank.rank
    out = open(f"{sys.argv[1]}.rank{rank}", "w")
    def say(*words):
        out.write(" ".join(map(str, words)) + "\\n"); out.flush()
    say("env", os.environ.get("SHOCKWAVE_GPUS"), os.environ.get("SHOCKWAVE_PREVIOUS_GPUS", "-"))
    say("run", world, run.batch_size, run.per_rank_batch(), run.previous_world_size, run.samples, run.epoch_samples)
    request = os.environ.get("SHOCKWAVE_CHECKPOINT_REQUEST_FILE", "")
    for epoch in run.epochs():
        order = torch.randperm(48, generator=torch.Generator().manual_seed(100 + epoch))
        for part in run.batches():
            idx = order[part.start:part.stop]
            loss = model(data[idx]).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            say("step", epoch, run.step, run.epoch_samples, idx.tolist())
            if rank == 0 and sys.argv[2:] and run.step + 1 == int(sys.argv[2]):
                with open(sys.argv[3], "a") as log:
                    log.write("waiting\\n")
                deadline = time.monotonic() + 30   # stays in this step until the wrapper got the signal
                while not os.path.exists(request) and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(0.6)                        # past the request file's 0.5 s poll interval
    say("end", run.stopped_early, run.step, run.samples, [round(float(w), 6) for w in net.weight.flatten()])
    if launched:  # the DDP wrapper gone before the group (else a gloo rank may abort at exit: docs/frameworks.md)
        import gc
        del model
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
""")


def _said(path) -> dict[str, list[list[str]]]:
    out = collections.defaultdict(list)
    for ln in lines(Path(path)):
        word, _, rest = ln.partition(" ")
        out[word].append(rest.split(" ", 3))
    return out


def _steps(said: dict[str, list[list[str]]]) -> list[tuple[int, int, list[int]]]:
    """(epoch, position of the step's global batch in the epoch, the sample indices this rank took)."""
    return [(int(s[0]), int(s[2]), ast.literal_eval(s[3])) for s in said["step"]]


def test_two_ranks_checkpoint_mid_epoch_resume_on_one_with_the_same_global_batch_and_position(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(ELASTIC)
    job, wait_log, said = "93401", tmp_path / "wait.log", tmp_path / "said"
    wrapper = [str(BIN / "shockwave-run"), "--"]
    env = job_env(tmp_path, job, SLURM_GPUS_ON_NODE="2")
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2"]
    args = [str(tmp_path / "train.py"), f"{said}1"]
    rc, _, err = run(
        [*wrapper, *torchrun, *args, str(STOP_STEPS), str(wait_log)], env, tmp_path, str(tmp_path), wait_log, after=1
    )
    assert rc == 0 and "Traceback" not in err, err[-3000:]  # checkpointed on the signal, requeued (fake scontrol)
    assert [c for c in lines(tmp_path / "slurm_calls.log") if c.startswith("scontrol")] == [f"scontrol requeue {job}"]
    env2 = {**env, "SLURM_RESTART_COUNT": "1", "SLURM_GPUS_ON_NODE": "1"}  # the controller's new count: 1 GPU
    rc, _, err = run([*wrapper, sys.executable, str(tmp_path / "train.py"), f"{said}2"], env2, tmp_path, str(tmp_path))
    assert rc == 0 and "Traceback" not in err, err[-3000:]

    r0, r1, r2 = _said(f"{said}1.rank0"), _said(f"{said}1.rank1"), _said(f"{said}2.rank0")
    assert r0["env"] == r1["env"] == [["2", "-"]] and r2["env"] == [["1", "2"]]  # the wrapper's counts
    assert r0["run"] == [["2", "8", "4", "None 0 0"]] and r2["run"] == [["1", "8", "8", f"2 {STOP_STEPS * 8} 24"]]
    assert r0["end"][0][:3] == r1["end"][0][:3] == ["True", str(STOP_STEPS), str(STOP_STEPS * GLOBAL_BS)]
    assert r2["end"][0][:3] == ["False", str(EPOCHS * N // GLOBAL_BS), str(EPOCHS * N)]
    # every step: the same global batch, split 4 + 4 on two ranks, then 8 on one; positions continue exactly
    first, second, resumed = _steps(r0), _steps(r1), _steps(r2)
    assert [len(i) for *_, i in first + second] == [4] * 2 * STOP_STEPS and {len(i) for *_, i in resumed} == {8}
    assert [p for _, p, _ in first] == [p for _, p, _ in second] == [0, 8, 16]
    assert [p for _, p, _ in resumed] == [24, 32, 40, 0, 8, 16, 24, 32, 40]
    seen = collections.Counter((epoch, i) for epoch, _, idx in first + second + resumed for i in idx)
    assert seen == collections.Counter({(e, i): 1 for e in range(EPOCHS) for i in range(N)})  # none twice, none left

    # the same training as one uninterrupted process at the same global batch (DDP averages 4 + 4 = one 8)
    ref = subprocess.run(
        [sys.executable, str(tmp_path / "train.py"), f"{said}ref"],
        cwd=tmp_path,
        env={**env, "SLURM_JOB_ID": "93402", "SHOCKWAVE_CHECKPOINT_DIR": str(tmp_path / "ck_ref")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    want, got = (ast.literal_eval(_said(f"{said}ref.rank0")["end"][0][3]), ast.literal_eval(r2["end"][0][3]))
    assert got == pytest.approx(want, abs=1e-5)

    evs = EventReader(tmp_path / "store").read_job(job).events
    assert [(e.restart, e.gpus) for e in evs if e.kind == "start"] == [(0, 2), (1, 1)]
    ends = [(e.epoch, e.batch_size, e.samples, e.gpus, e.throughput_gpus) for e in evs if e.kind == "epoch_end"]
    assert ends == [(0, 8, N - STOP_STEPS * GLOBAL_BS, 1, 1), (1, 8, N, 1, 1)]  # measured on 1 GPU, tagged so


NOT_DIVIDING = textwrap.dedent("""
    from slurm_shockwave.wrapper import Training
    class S:
        def state_dict(self): return {}
        def load_state_dict(self, s): pass
    run = Training(S(), total_epochs=2, samples_per_epoch=30, batch_size=8)
    for epoch in run.epochs():
        for part in run.batches():
            raise SystemExit("trained at a batch that is not the global one")
""")


def test_a_count_that_does_not_divide_the_global_batch_fails_once_with_its_reason(tmp_path):
    job = "93403"
    env = job_env(tmp_path, job, RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", SLURM_GPUS_ON_NODE="3")
    rc, _, err = run(
        [str(BIN / "shockwave-run"), "--", sys.executable, "-c", NOT_DIVIDING], env, tmp_path, "93403-never"
    )
    assert rc == 1 and "BatchSizeError: elastic: the global batch does not divide" in err, err[-3000:]
    assert "global batch size 8 over 3 ranks" in err
    assert not [c for c in lines(tmp_path / "slurm_calls.log") if c.startswith("scontrol requeue")]  # no crash loop
    exits = [e for e in EventReader(tmp_path / "store").read_job(job).events if e.kind == "exit"]
    assert [(e.source, e.exit_code) for e in exits] == [("api", 1), ("wrapper", 1)]
    assert exits[-1].reason.startswith(api.BAD_BATCH) and exits[-1].reason.endswith("(exit 1)")  # the controller's line


def test_per_rank_batch_divides_or_says_why(tmp_path):
    rep = api.Reporter(tmp_path / "e.jsonl", "93404", 0, install_handlers=False, env={"WORLD_SIZE": "4", "RANK": "0"})
    assert [rep.per_rank_batch(64), rep.per_rank_batch(64, 2), rep.per_rank_batch(64, 2, accumulate=4)] == [16, 32, 8]
    for bad in ((6,), (64, 3), (2, 1, 4)):
        with pytest.raises(api.BatchSizeError, match="does not divide"):
            rep.per_rank_batch(*bad)
    exits = [json.loads(ln) for ln in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["exit_code"], e["reason"][:40]) for e in exits] == [("exit", 1, api.BAD_BATCH[:40])] * 3


# ------------------------------------------------------------------ the integrations: per-device batch on a new count
def _tiny_data(n: int = 32):
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, generator=g))


def test_lightning_per_device_batch_follows_the_world_size_and_a_wrong_loader_stops_before_its_first_step(tmp_path):
    pl = pytest.importorskip("lightning.pytorch", reason="lightning is not installed in this venv")
    import torch
    from torch.utils.data import DataLoader

    from slurm_shockwave.wrapper.integrations.lightning import ShockwaveCallback, per_device_batch_size

    def trainer(devices: int, **kw):
        return pl.Trainer(
            accelerator="cpu",
            devices=devices,
            strategy="ddp" if devices > 1 else "auto",
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path,
            **kw,
        )

    assert [per_device_batch_size(16, trainer(d)) for d in (2, 1)] == [8, 16]  # the world size halves: x2
    assert per_device_batch_size(16, trainer(2, accumulate_grad_batches=2)) == 4  # accumulation kept
    with pytest.raises(api.BatchSizeError, match="global batch size 16 over 3 ranks"):
        per_device_batch_size(16, trainer(3))

    class M(pl.LightningModule):
        def __init__(self, per_device):
            super().__init__()
            self.lin, self.per_device, self.steps = torch.nn.Linear(4, 1), per_device, 0

        def training_step(self, batch, i):
            self.steps += 1
            return (self.lin(batch[0]).squeeze(-1) - batch[1]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            return DataLoader(_tiny_data(), batch_size=self.per_device or per_device_batch_size(16, self.trainer))

    rep = api.Reporter(tmp_path / "e.jsonl", "93405", 0, install_handlers=False, env={})
    wrong, right = M(8), M(None)
    with pytest.raises(ValueError, match="per-device batch size 8 x 1 devices x 1 accumulation steps is not the glo"):
        trainer(1, callbacks=[ShockwaveCallback(tmp_path / "ck", reporter=rep, batch_size=16)]).fit(wrong)
    assert wrong.steps == 0
    trainer(1, callbacks=[ShockwaveCallback(tmp_path / "ck", reporter=rep, batch_size=16)]).fit(right)
    ends = [json.loads(ln) for ln in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert right.steps == 2 and [(e["batch_size"], e["samples"]) for e in ends if e["kind"] == "epoch_end"] == [
        (16, 32)
    ]


def test_huggingface_per_device_batch_follows_the_world_size_and_wrong_arguments_stop_at_train_begin(
    tmp_path, monkeypatch
):
    pytest.importorskip("transformers", reason="transformers is not installed in this venv")
    import torch
    from transformers import Trainer, TrainingArguments

    from slurm_shockwave.wrapper.integrations.huggingface import ShockwaveCallback, per_device_batch_size

    for world, want in (("2", [8, 4]), ("1", [16, 8])):
        monkeypatch.setenv("WORLD_SIZE", world)
        monkeypatch.setenv("RANK", "0")
        assert [per_device_batch_size(16), per_device_batch_size(16, 2)] == want
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(api.BatchSizeError, match="global batch size 16 over 3 ranks"):
        per_device_batch_size(16)
    for var in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(var)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            return {"loss": (self.lin(x).squeeze(-1) - labels).pow(2).mean()}

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.data = _tiny_data()

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            x, y = self.data[i]
            return {"x": x, "labels": y}

    rep = api.Reporter(tmp_path / "e.jsonl", "93406", 0, install_handlers=False, env={})
    for per_device, gas, wrong in ((8, 1, True), (per_device_batch_size(16, 2), 2, False)):
        args = TrainingArguments(
            output_dir=str(tmp_path / f"out{gas}"),
            num_train_epochs=1,
            use_cpu=True,
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=gas,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            learning_rate=0.01,
        )
        t = Trainer(
            model=Tiny(), args=args, train_dataset=Data(), callbacks=[ShockwaveCallback(reporter=rep, batch_size=16)]
        )
        if wrong:
            with pytest.raises(ValueError, match="per-device batch size 8 x 1 devices x 1 accumulation steps"):
                t.train()
            assert t.state.global_step == 0
        else:
            t.train()
            assert t.state.global_step == 2
    ends = [json.loads(ln) for ln in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [(e["batch_size"], e["samples"]) for e in ends if e["kind"] == "epoch_end"] == [(16, 32)]


def test_accelerate_per_device_batch_follows_the_world_size_and_a_wrong_loader_stops_before_its_first_step(tmp_path):
    pytest.importorskip("accelerate", reason="accelerate is not installed in this venv")
    import types

    import torch
    from accelerate import Accelerator

    from slurm_shockwave.wrapper.integrations.accelerate import ShockwaveAccelerate, per_device_batch_size

    def two(split: bool):  # what a 2-process accelerator says (an Accelerator is one per process)
        return types.SimpleNamespace(num_processes=2, gradient_accumulation_steps=2, split_batches=split)

    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    assert [per_device_batch_size(16, two(False)), per_device_batch_size(16, acc)] == [4, 8]  # on 1 process: x2
    assert per_device_batch_size(16, two(True)) == 8  # Accelerate splits each batch over the processes itself
    with pytest.raises(api.BatchSizeError, match="global batch size 16 over 3 ranks x 2 accumulation steps"):
        per_device_batch_size(16, types.SimpleNamespace(num_processes=3, gradient_accumulation_steps=2))

    rep = api.Reporter(tmp_path / "e.jsonl", "93407", 0, install_handlers=False, env={})
    for per_device, wrong in ((4, True), (per_device_batch_size(16, acc), False)):
        loader = acc.prepare(torch.utils.data.DataLoader(_tiny_data(), batch_size=per_device))
        sw = ShockwaveAccelerate(acc, total_epochs=1, checkpoint_dir=tmp_path / "ck", batch_size=16, reporter=rep)
        if wrong:
            with pytest.raises(ValueError, match="per-device batch size 4 x 1 devices x 2 accumulation steps"):
                next(iter(sw.batches(loader, 0)))
        else:
            assert sum(len(b[0]) for b in sw.batches(loader, 0)) == 32
    ends = [json.loads(ln) for ln in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [(e["batch_size"], e["samples"]) for e in ends if e["kind"] == "epoch_end"] == [(16, 32)]
    # a prepared scheduler steps once per process at each optimizer step: its schedule would follow the count
    opt = torch.optim.SGD(torch.nn.Linear(4, 1).parameters(), lr=0.1)
    acc.prepare(torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))
    with pytest.raises(ValueError, match="step_scheduler_with_optimizer=False"):
        next(iter(sw.batches(loader, 0)))
    acc.step_scheduler_with_optimizer = False
    assert sum(len(b[0]) for b in sw.batches(loader, 0)) == 32
