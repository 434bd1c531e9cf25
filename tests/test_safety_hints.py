"""Item 1 without Slurm: the one marker rule, the strict hint validator, and a round that survives hostile
job data (recorded squeue/sinfo outputs behind SlurmCLI's runner, with hostile jobs added)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.slurm.hints import HintError, is_marked, parse_hints
from slurm_shockwave.slurm import SlurmCLI

DATA = Path(__file__).parent / "data" / "slurm"
HOOK = Path(__file__).resolve().parents[1] / "prolog_epilog" / "shockwave_hook.py"


@pytest.mark.parametrize("comment, marked", [
    ("shockwave", True), ("shockwave epochs=3", True), ("Shockwave epochs=3", True), ("SHOCKWAVE", True),
    ("shockwave\nepochs=3", True), ("shockwave\tepochs=3", True), ("  shockwave,epochs=3", True),
    ("shockwave:epochs=3", True), ("shockwave;x=1", True), ("\nshockwave", True),
    ("shockwaves", False), ("shockwave_x", False), ("not shockwave", False), ("", False), (None, False),
    ("shock wave", False), ("my shockwave job", False),
])
def test_one_marker_rule(comment, marked):
    assert is_marked(comment, "shockwave") is marked


def test_the_hook_uses_the_same_rule():
    """The prolog/epilog hook loads hints.is_marked (its own copy next to it, or the source checkout)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("hook_under_test", HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    rule = hook.load_is_marked()
    assert rule is not None
    for comment in ("Shockwave\nepochs=3", "shockwave,epochs=3", "not shockwave", "shockwaves", "x"):
        assert rule(comment, "shockwave") is is_marked(comment, "shockwave")
        env = {"SLURM_JOB_COMMENT": comment}
        assert hook.is_managed(env, {}, "/nonexistent", "1", "/nonexistent/1.jsonl") is is_marked(comment, "shockwave")


@pytest.mark.parametrize("comment, expected", [
    ("shockwave epochs=30 bs=32 min_bs=16 max_bs=256 samples=4096 epoch_s=12.5 gpus=2",
     {"epochs": 30, "bs": 32, "min_bs": 16, "max_bs": 256, "samples": 4096, "epoch_s": 12.5, "gpus": 2}),
    ("shockwave,epochs=30,bs=32", {"epochs": 30, "bs": 32}),
    ("shockwave\nepochs=1000000", {"epochs": 10**6}),
    ("shockwave bs=16777216", {"bs": 2**24}),
    ("shockwave", {}),
])
def test_valid_hints(comment, expected):
    assert parse_hints(comment, "shockwave", max_gpus=8).as_dict() == expected


@pytest.mark.parametrize("comment, needle", [
    ("shockwave epochs=²", "epochs"), ("shockwave epochs=٣", "epochs"), ("shockwave bs=３２", "bs"),
    ("shockwave epochs=0", "epochs"), ("shockwave epochs=1000001", "epochs"), ("shockwave bs=16777217", "bs"),
    ("shockwave epochs=-3", "epochs"), ("shockwave epochs=3.5", "epochs"), ("shockwave epochs=", "epochs"),
    ("shockwave epoch_s=nan", "epoch_s"), ("shockwave epoch_s=inf", "epoch_s"), ("shockwave epoch_s=1e999", "epoch_s"),
    ("shockwave epoch_s=0", "epoch_s"), ("shockwave gpus=9", "gpus"), ("shockwave gpus=0", "gpus"),
    ("shockwave bs=64 max_bs=32", "max_bs"), ("shockwave min_bs=64 max_bs=32", "min_bs"),
    ("shockwave epochs=3 epochs=4", "twice"), ("shockwave foo=1", "unknown"), ("shockwave resnet", "key=value"),
    ("shockwave epochs=" + "9" * 5000, "epochs"),
    ("shockwave speedup=2x", "speedup"), ("shockwave speedup=0x1", "speedup"), ("shockwave speedup=2x0", "speedup"),
    ("shockwave speedup=2x1/2x3", "speedup"), ("shockwave speedup=16x2", "speedup"), ("shockwave speedup=2xnan", "speedup"),
    ("shockwave speedup=2x1e9", "speedup"), ("shockwave speedup=²x1", "speedup"), ("shockwave speedup=2x1/", "speedup"),
    ("shockwave speedup=2x1 speedup=4x2", "twice"), ("shockwave speedup=" + "/".join(["2x1"] * 17), "speedup"),
])
def test_invalid_hints_are_one_line_errors(comment, needle):
    with pytest.raises(HintError) as e:
        parse_hints(comment, "shockwave", max_gpus=8)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and len(msg) < 200


def test_unmarked_comment_has_no_hints():
    assert parse_hints("epochs=²", "shockwave") is None


class Recorded:
    """squeue --json from a recording, with extra jobs; sinfo/sprio recorded; every scontrol recorded."""

    def __init__(self, extra_jobs):
        self.extra = extra_jobs
        self.calls = []

    def __call__(self, argv, **kw):
        self.calls.append(list(argv))
        if argv[0] == "squeue":
            d = json.loads((DATA / "squeue_mixed.json").read_text())
            base = d["jobs"][6]                                     # job 7: pending, 1 GPU, partition gpu
            for i, fields in enumerate(self.extra):
                d["jobs"].append({**base, "job_id": 100 + i, **fields})
            return subprocess.CompletedProcess(argv, 0, json.dumps(d), "")
        out = {"sinfo": DATA / "sinfo_busy.json", "sprio": DATA / "sprio_site.txt"}.get(argv[0])
        return subprocess.CompletedProcess(argv, 0, out.read_text() if out else "", "")


def test_hostile_jobs_are_quarantined_and_the_round_goes_on(tmp_path, caplog):
    hostile = [{"comment": "shockwave epochs=²"}, {"comment": "shockwave bs=99999999999"},
               {"comment": "shockwave epochs=3", "name": "x" * 10000}, {"comment": "shockwave\nepochs=4 bs=32"}]
    runner = Recorded(hostile)
    cfg = config_from_dict({"controller": {"round_seconds": 0.05, "state_dir": str(tmp_path / "state"),
                                           "event_store": str(tmp_path / "events"), "partition": "gpu",
                                           "mode": "advisory"},
                            "policy": {"name": "fifo"}}, "test")
    ctl = Controller(cfg, cli=SlurmCLI(runner=runner))
    try:
        assert ctl.run(max_rounds=3) == 3
        q = ctl.backend.quarantined
        # job 1 of the recording says `shockwave:a` (a word, not key=value): quarantined as well
        assert set(q) == {1, 100, 101} and "epochs" in q[100] and "bs" in q[101] and "'a'" in q[1]
        rows = {r["job_id"]: r for r in ctl.state.jobs()}
        assert rows["100"]["state"] == "QUARANTINED" and "epochs" in rows["100"]["view"]["quarantined"]
        assert {"102", "103"} <= set(rows) and rows["103"]["state"] != "QUARANTINED"     # valid: managed
        touched = " ".join(" ".join(c) for c in runner.calls if c[0] in ("scontrol", "scancel"))
        assert "100" not in touched.replace("1000", "") and "101" not in touched    # left to Slurm
        logged = [r for r in caplog.records if "quarantined" in r.getMessage() and "100" in r.getMessage()]
        assert len(logged) == 1                                                 # once, not every round
    finally:
        ctl.close()
