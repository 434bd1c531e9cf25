"""slurmctld down: the controller logs, backs off, retries, never crashes and never acts on a failed read.
Uses recorded real squeue/sinfo/sprio outputs behind SlurmCLI's runner hook."""
from __future__ import annotations

import subprocess
from pathlib import Path

from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.slurm import SlurmCLI

DATA = Path(__file__).parent / "data" / "slurm"


class FlakySlurm:
    """squeue fails `failures` times (slurmctld down), then answers from the recorded outputs (22.05.8's);
    ``squeue --version`` needs no slurmctld and always answers."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kw):
        self.calls.append(list(argv))
        cmd = argv[0]
        if argv[1:] == ["--version"]:
            return subprocess.CompletedProcess(argv, 0, "slurm-wlm 22.05.8\n", "")
        if cmd == "squeue" and self.failures > 0:
            self.failures -= 1
            return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Unable to contact slurm controller")
        out = {"squeue": DATA / "squeue_mixed.json", "sinfo": DATA / "sinfo_busy.json",
               "sprio": DATA / "sprio_site.txt"}.get(cmd)
        return subprocess.CompletedProcess(argv, 0, out.read_text() if out else "", "")


def test_outage_backs_off_then_recovers(tmp_path):
    runner = FlakySlurm(failures=2)
    cfg = config_from_dict({"controller": {"round_seconds": 0.2, "state_dir": str(tmp_path / "state"),
                                           "event_store": str(tmp_path / "events"), "managed_by": "partition",
                                           "dry_run": True},
                            "policy": {"name": "max_min_fairness"}}, "test")
    ctl = Controller(cfg, cli=SlurmCLI(runner=runner))
    try:
        done = ctl.run(max_rounds=2)
        statuses = [r["status"] for r in ctl.state.db.execute("SELECT status FROM rounds ORDER BY round")]
        outage = ctl.state.get("slurm_outage")
    finally:
        ctl.close()
    assert done == 2
    assert statuses == ["done", "done"]         # a failed read is retried under the same round number
    assert outage["count"] == 2 and "Unable to contact slurm controller" in outage["last_error"]
    mutating = [c for c in runner.calls if c[0] in ("scontrol", "scancel")]
    assert mutating == []                      # dry run: decided and logged, nothing enacted
    reads = [c for c in runner.calls if c[1:] != ["--version"]]
    assert [c[0] for c in reads[:2]] == ["squeue", "squeue"]          # no sinfo/scontrol after a failed read


def test_gpus_of_unmanaged_running_jobs_are_not_planned(tmp_path):
    from slurm_shockwave.slurm import parse_sinfo_json, parse_squeue_json
    jobs = parse_squeue_json((DATA / "squeue_mixed.json").read_text())
    nodes = parse_sinfo_json((DATA / "sinfo_busy.json").read_text())
    cfg = config_from_dict({"controller": {"round_seconds": 0.2, "state_dir": str(tmp_path / "state"),
                                           "event_store": str(tmp_path / "events"), "managed_by": "comment",
                                           "partition": nodes[0].partitions[0], "dry_run": True},
                            "policy": {"name": "fifo"}}, "test")
    ctl = Controller(cfg, cli=SlurmCLI(runner=FlakySlurm(failures=0)))
    try:
        view = ctl.backend.observe()
    finally:
        ctl.close()
    managed = {j.job_id for j in view.jobs}
    foreign = sum(j.gpus for j in jobs if j.state == "RUNNING" and j.job_id not in managed)
    assert foreign > 0, "the recording has unmanaged running jobs"
    assert view.num_gpus == sum(n.gpus for n in nodes if n.available) - foreign
