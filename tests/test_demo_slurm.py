"""The README's first command, shortened: `shockwave demo --short` on a real local Slurm cluster ends with
every job completed, the summary printed, and no daemon it started left running."""
import json
import os

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli

pytestmark = pytest.mark.slurm


def _daemon_pids():
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if os.path.basename(cmd) in ("slurmctld", "slurmd", "munged", "slurmstepd"):
                out.add(int(pid))
    return out


def test_short_demo_end_to_end():
    if os.geteuid() != 0:
        pytest.skip("the demo needs root to start Slurm")
    before = _daemon_pids()
    r = CliRunner().invoke(cli, ["demo", "--short", "--json", "--round-seconds", "5", "--timeout", "300"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    if res["where"] != "slurm":
        pytest.skip("Slurm could not be started here")
    assert res["real"]["completed"] == res["real"]["jobs"] == 5
    assert all(j["state"] == "COMPLETED" for j in res["jobs"])
    assert all(j["epochs"].split("/")[0] == j["epochs"].split("/")[1] for j in res["jobs"])
    assert {j["gpus"] for j in res["jobs"]} == {1, 2, 4}
    assert len({j["mode"] for j in res["jobs"]}) == 3
    assert res["simulated"]["jobs"] == 5 and res["simulated"]["makespan_s"] > 0
    assert set(res["deviation"]) == {"makespan_s", "avg_jct_s"}
    assert _daemon_pids() - before == set(), "the demo left Slurm daemons running"
