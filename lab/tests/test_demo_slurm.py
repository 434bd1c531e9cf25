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
    demo's cluster (2 nodes x 4 GPUs) and settings (time scale 40), its rounds ending early as the replay's
    controller's do, puts Shockwave ahead of the plain-Slurm model checked on the replay's cluster (minute time
    limits, scheduler passes, docs/replay.md) at the restart costs the real runs measure (40-80 trace seconds,
    docs/demo.md): worst rho, unfair fraction and average JCT ahead, makespan within 1% at 30 s and 2% at 60 s.  At
    twice that cost it is still ahead on average JCT and unfair fraction.  (Since issue 36 the gate preempts a job at
    most once per 10 rounds of its run: the demo's jobs, of 5 to 30 minutes, are rarely preempted, 1-3 restarts
    instead of about 20, which costs its worst rho and makespan at a high restart cost: 2.62 against plain Slurm's
    2.44, 13% behind at 120 s.  Since a start past its latest fair start keeps its GPUs from jobs the restart bound
    keeps, 2026-12-07: at 60 s its makespan is 5,897 s against plain Slurm's 5,803 (1.6% behind; 5,656 before: two
    jobs taken out for a late one of 396 s were on the critical path later), its worst rho 1.549 (2.356 before) and
    average JCT 2,115 s (2,194); at 30 s 5,386 s, 7% ahead.)"""
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
        for cost in (30.0, 60.0, 120.0):                  # a restart's cost, the measured range and twice it
            sw = simulate(specs, table, 8, 2, "shockwave-edf", cost, 40.0)
            ahead = ("avg_jct_s", "unfair_fraction") + (("worst_rho",) if cost <= 60 else ())
            for key in ahead:
                assert sw[key] < plain[key], (start, cost, key, sw[key], plain[key])
            if cost <= 60:
                limit = 1.01 if cost <= 30 else 1.02
                assert sw["makespan_s"] < limit * plain["makespan_s"], (start, cost, sw["makespan_s"])


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
