"""The README's first command, shortened: `shockwave demo --short` on a real local Slurm cluster ends with
every job completed, the summary printed, and no daemon it started left running."""
import json
import os

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli

pytestmark = pytest.mark.slurm


def _daemon_pids(root: str):
    """Slurm/munge daemons started for the demo directory `root` (other tests may run clusters meanwhile)."""
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            cmd = argv[0].decode(errors="replace")
            if os.path.basename(cmd) in ("slurmctld", "slurmd", "munged", "slurmstepd") and \
                    any(root.encode() in a for a in argv):
                out.add(int(pid))
    return out


def test_short_demo_end_to_end(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the demo needs root to start Slurm")
    doc = tmp_path / "demo.md"
    r = CliRunner().invoke(cli, ["demo", "--short", "--json", "--round-seconds", "5", "--timeout", "300",
                                 "--write-doc", str(doc)])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    if res["where"] != "slurm":
        pytest.skip("Slurm could not be started here")
    # the same workload, run twice on the same cluster: plain Slurm, then Shockwave
    assert set(res["runs"]) == {"slurm", "shockwave"}
    for name, run in res["runs"].items():
        assert run["real"]["completed"] == run["real"]["jobs"] == 5, name
        assert all(j["state"] == "COMPLETED" for j in run["jobs"]), name
        assert all(j["epochs"].split("/")[0] == j["epochs"].split("/")[1] for j in run["jobs"]), name
        assert run["simulated"]["jobs"] == 5 and run["simulated"]["makespan_s"] > 0
        assert run["real"]["makespan_s"] > 0 and run["real"]["worst_rho"] is not None
        assert set(run["real"]["user_share"]["share"]) == {"swdemo-ana", "swdemo-ben", "swdemo-chi"}
    assert res["runs"]["slurm"]["real"]["restarts"] == 0          # nobody preempts under plain Slurm
    assert res["runs"]["slurm"]["simulated"]["policy"] == "fifo+backfill"
    assert {j["gpus"] for j in res["jobs"]} == {1, 2, 4}
    assert len({j["mode"] for j in res["jobs"]}) == 3
    assert set(res["deviation"]) == {"makespan_s", "avg_jct_s"}
    text = doc.read_text()
    assert "| plain Slurm | Shockwave | plain Slurm, simulated (FIFO+backfill) | Shockwave, simulated |" in text
    assert _daemon_pids(res["root"]) == set(), "the demo left Slurm daemons running"
