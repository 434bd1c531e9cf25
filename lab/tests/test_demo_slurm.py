"""The README's first command, shortened: `shockwave demo --short` on a real local Slurm cluster replays the first
jobs of the demo trace with emulated jobs, twice (plain Slurm, then Shockwave); every job completes with every
epoch, the tables have both real and both simulated columns, and no daemon it started is left running."""
import json
import os

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli

pytestmark = pytest.mark.slurm


def _daemon_pids(root: str):
    """Slurm/munge daemons started for the directory `root` (other tests may run clusters meanwhile)."""
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


def test_the_demo_workload_is_contended_and_shockwave_is_fairer_in_simulation():
    """No Slurm: the demo's trace has more jobs than GPUs, several users, every mode, and the simulator, on the
    demo's cluster (2 nodes x 4 GPUs) and settings (time scale 40), puts Shockwave ahead of the plain-Slurm model
    checked on the replay's cluster (minute time limits, scheduler passes, docs/replay.md) on all four headline
    figures whatever a restart costs, its rounds ending early as the replay's controller's do: makespan by 0-10%,
    average JCT by 13-24%.  (Before the predictor counted the current epoch and the simulator's static jobs
    declared their own batch size, its makespan was 0-9% behind.)  This trace's margin is not the rule: on 12 other
    seeds of its shape Shockwave's makespan is on average 3% ahead to 2% behind (docs/round-length.md); the real
    runs are measured in docs/demo.md."""
    import tempfile
    from pathlib import Path

    from shockwave_lab.demo.emulated import USERS, demo_trace
    from shockwave_lab.replay.api import load
    from shockwave_lab.replay.compare import simulate
    with tempfile.TemporaryDirectory() as d:
        trace, thr = demo_trace(Path(d))
        jobs, specs, table = load(trace, thr, 8, USERS)
    assert len(jobs) == 24 > 8 and len({j.user for j in jobs}) == 3 and {j.mode for j in jobs} >= {"gns", "accordion"}
    for start in (0.0, 4.0):                              # plain Slurm's start cost: the programs' start-up
        plain = simulate(specs, table, 8, 2, "slurm", start, 40.0)
        for cost in (30.0, 60.0, 120.0):                  # whatever a restart costs on the machine
            sw = simulate(specs, table, 8, 2, "shockwave-edf", cost, 40.0)
            for key in ("worst_rho", "unfair_fraction", "avg_jct_s", "makespan_s"):
                assert sw[key] < plain[key], (start, cost, key, sw[key], plain[key])


def test_short_demo_end_to_end(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the demo needs root to start Slurm")
    doc = tmp_path / "demo.md"
    r = CliRunner().invoke(cli, ["demo", "--short", "--json", "--round-seconds", "2", "--timeout", "300",
                                 "--write-doc", str(doc)])
    assert r.exit_code == 0, r.output[-3000:]
    res = json.loads(r.output[r.output.index("{\n"):])
    if res["where"] != "slurm":
        pytest.skip("Slurm could not be started here")
    # the same workload, run twice: plain Slurm, then Shockwave
    assert set(res["runs"]) == {"slurm", "shockwave"}
    for name, run in res["runs"].items():
        assert run["real"]["completed"] == run["real"]["jobs"] == 5, name
        assert all(j["state"] == "COMPLETED" for j in run["jobs"]), name
        assert all(j["epochs"].split("/")[0] == j["epochs"].split("/")[1] for j in run["jobs"]), name
        assert run["simulated"]["jobs"] == 5 and run["simulated"]["makespan_s"] > 0
        assert run["real"]["makespan_s"] > 0 and run["real"]["worst_rho"] is not None
        assert set(run["real"]["user_share"]) == {"swreplay-u1", "swreplay-u2", "swreplay-u3"}
        assert _daemon_pids(run["root"]) == set(), f"the {name} run left Slurm daemons running"
    assert res["runs"]["slurm"]["real"]["restarts"] == 0          # nobody preempts under plain Slurm
    assert res["runs"]["slurm"]["simulated"]["policy"] == "slurm-multifactor"
    assert len({j["user"] for j in res["jobs"]}) == 3
    text = doc.read_text()
    assert "| (trace seconds) | plain Slurm | Shockwave | plain Slurm, simulated | Shockwave, simulated |" in text
    # the page comes with the result it is made from, and regenerates from it identically
    again = tmp_path / "again.md"
    r = CliRunner().invoke(cli, ["demo", "--from-json", str(doc.with_suffix(".json")), "--write-doc", str(again)])
    assert r.exit_code == 0, r.output[-3000:]
    assert again.read_text() == text


def test_the_committed_demo_page_regenerates_from_its_stored_result(tmp_path):
    from shockwave_lab.bench import ROOT
    doc = ROOT / "docs" / "demo.md"
    out = tmp_path / "demo.md"
    r = CliRunner().invoke(cli, ["demo", "--from-json", str(doc.with_suffix(".json")), "--write-doc", str(out)])
    assert r.exit_code == 0, r.output[-3000:]
    assert out.read_text() == doc.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": 1}')
    r = CliRunner().invoke(cli, ["demo", "--from-json", str(bad)])
    assert r.exit_code == 1 and "not a demo result" in r.output
