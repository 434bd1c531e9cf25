"""`shockwave whatif` (lab/shockwave_lab/whatif/, docs/whatif.md): end to end on real recorded Slurm output (the
sacct --json of lab/tests/data/imports/, the nodes JSON and sshare of tests/data/slurm/ per version), the Fair Tree
factor against sshare's own, the priority settings of a recorded `scontrol show config`, bad input, determinism."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from shockwave_lab.cli.whatif import whatif
from shockwave_lab.imports.common import Row
from shockwave_lab.whatif import inputs
from shockwave_lab.whatif.compare import compare
from shockwave_lab.whatif.render import fmt
from shockwave_lab.whatif.run import run_both
from shockwave_lab.whatif.site_model import AssocTree

LAB = Path(__file__).resolve().parents[1]
IMPORTS = LAB / "tests" / "data" / "imports"
SLURM = LAB.parent / "tests" / "data" / "slurm"
VERSIONS = ("22.05", "24.11", "26.05")
#: `scontrol show config` of a LocalCluster of Slurm 22.05.8 (lab/shockwave_lab/localcluster), recorded verbatim: the
#: lines the model reads, and a few around them
CONFIG_22_05 = """PreemptMode             = REQUEUE
PreemptType             = preempt/partition_prio
PreemptExemptTime       = 00:00:00
PriorityParameters      = (null)
PrioritySiteFactorParameters = (null)
PrioritySiteFactorPlugin = (null)
PriorityDecayHalfLife   = 7-00:00:00
PriorityCalcPeriod      = 00:05:00
PriorityFavorSmall      = No
PriorityFlags           =
PriorityMaxAge          = 7-00:00:00
PriorityUsageResetPeriod = NONE
PriorityType            = priority/multifactor
PriorityWeightAge       = 0
PriorityWeightAssoc     = 0
PriorityWeightFairShare = 0
PriorityWeightJobSize   = 0
PriorityWeightPartition = 0
PriorityWeightQOS       = 0
PriorityWeightTRES      = (null)
SchedulerParameters     = sched_interval=2,bf_interval=2
"""
SITE = (
    CONFIG_22_05.replace("PriorityWeightAge       = 0", "PriorityWeightAge       = 1000")
    .replace("PriorityWeightFairShare = 0", "PriorityWeightFairShare = 10000")
    .replace("PriorityWeightJobSize   = 0", "PriorityWeightJobSize   = 1000")
)


def _invoke(tmp_path, version="24.11", extra=(), config=SITE):
    cfg = tmp_path / "config.txt"
    cfg.write_text(config)
    shares = SLURM / version / ("sshare_used.txt" if version == "22.05" else "sshare_used.json")
    args = [
        str(IMPORTS / f"sacct_{version}.json"),
        "--nodes",
        str(SLURM / version / "nodes_idle.json"),
        "--config",
        str(cfg),
        "--shares",
        str(shares),
        "--slurm-round",
        "1",
        "--round-length",
        "2",
        *extra,
    ]
    return CliRunner().invoke(whatif, args, catch_exceptions=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_end_to_end_text_json_and_html_agree(tmp_path, version):
    res = _invoke(tmp_path, version, ["--json-out", str(tmp_path / "w.json"), "--html", str(tmp_path / "w.html")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "w.json").read_text())
    # the recorded history: 7 jobs ran on GPUs (job 3 CPU only, job 9 never started), 5 of sw-ann/teama
    assert doc["jobs"] == 7 and "dropped: 1 no GPUs, 1 never started" in doc["inputs"]["imported"]
    assert doc["inputs"]["cluster"] == {**doc["inputs"]["cluster"], "gpus": 8, "gpus_per_node": 4, "nodes": 2}
    ids = [x["job"] for x in doc["per_job"]]
    assert sorted(ids) == sorted({"1", "2", "4_0", "4_1", "4_2", "5", "6"}) and len(ids) == len(set(ids))
    for group in ("by_account", "by_user"):
        assert set(doc[group]) == ({"teama", "teamb"} if group == "by_account" else {"sw-ann", "sw-bob"})
        for run in ("slurm", "default"):
            assert sum(g[run]["jobs"] for g in doc[group].values()) == 7  # every job once
            assert sum(g[run]["gpu_share"] for g in doc[group].values()) == pytest.approx(1.0)
    assert doc["by_account"]["teama"]["slurm"]["jobs"] == 5
    for run in ("slurm", "default"):
        o = doc["overall"][run]
        assert o["wait_mean_s"] >= 0 and o["jct_mean_s"] >= o["wait_mean_s"]
        assert o["ftf_worst"] >= o["ftf_p95"] > 0
    # each job ran at least its measured run time after its first start, in both runs
    for x in doc["per_job"]:
        assert x["jct_slurm_s"] >= x["wait_slurm_s"] + x["runtime_s"] - 0.02
        assert x["jct_default_s"] >= x["wait_default_s"] + x["runtime_s"] - 0.02
        assert x["jct_change_s"] == pytest.approx(x["jct_default_s"] - x["jct_slurm_s"])
    # the text shows the same figures as the JSON
    text = res.output
    for name in ("teama", "teamb", "sw-ann", "sw-bob"):
        assert name in text
    share = doc["by_account"]["teamb"]["default"]["gpu_share"]
    assert fmt("gpu_share", share) in text and fmt("ftf_worst", doc["overall"]["slurm"]["ftf_worst"]) in text
    page = (tmp_path / "w.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "teamb" in page and fmt("gpu_share", share) in page
    # --json prints the same document (timings aside)
    res2 = _invoke(tmp_path, version, ["--json"])
    again = json.loads(res2.output)
    doc.pop("timings"), again.pop("timings")
    assert again == doc


def test_deterministic(tmp_path):
    docs = []
    for _ in range(2):
        res = _invoke(tmp_path, "26.05", ["--json"])
        assert res.exit_code == 0, res.output
        d = json.loads(res.output)
        d.pop("timings")
        docs.append(d)
    assert docs[0] == docs[1]


@pytest.mark.parametrize(
    "version,name", [("22.05", "sshare_used.txt"), ("24.11", "sshare_used.json"), ("26.05", "sshare_used.json")]
)
def test_fair_tree_factor_is_sshares(version, name):
    """The model's Fair Tree on the recorded tree and RawUsage gives sshare's FairShare column (the recorded
    cluster runs Fair Tree, Slurm's default)."""
    rows = inputs.read_shares(SLURM / version / name)
    tree = AssocTree.build(rows, set())
    usage = {(r.account, r.user): r.raw_usage for r in rows if r.user}
    got = tree.fair_tree(usage)
    want = {(r.account, r.user): r.fairshare for r in rows if r.user}
    assert set(got) == set(want) and len(want) == 5
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-5), k


def test_priority_settings_of_scontrol_show_config():
    site = inputs.parse_config(CONFIG_22_05)
    assert (site.weight_age, site.weight_fairshare, site.weight_job_size) == (0, 0, 0)
    assert site.decay_half_life_s == site.max_age_s == 7 * 86400 and site.calc_period_s == 300
    assert site.fair_tree and site.preempt and not site.favor_small
    other = inputs.parse_config(
        SITE.replace("PriorityFlags           =", "PriorityFlags           = NO_FAIR_TREE")
        .replace("preempt/partition_prio", "preempt/none")
        .replace("PriorityDecayHalfLife   = 7-00:00:00", "PriorityDecayHalfLife   = 14-0")
    )
    assert not other.fair_tree and not other.preempt and other.decay_half_life_s == 14 * 86400
    assert (other.weight_age, other.weight_fairshare, other.weight_job_size) == (1000, 10000, 1000)
    assert inputs.duration_s("00:05:00") == 300 and inputs.duration_s("5") == 300 and inputs.duration_s("1-2") == 93600


def test_a_site_whose_jobs_are_not_requeued_by_default_has_its_jobs_run_to_the_end():
    """JobRequeue=0 (read from `scontrol show config`): a job whose history does not say it asked --requeue may not
    be preempted in the default's run either (it would be cancelled, not requeued); one that asked it still may be.
    One GPU: a 2-hour job, then a 10-minute one an hour later, which the default runs at once by preempting the
    first, unless the first may not be preempted."""
    assert inputs.parse_config(CONFIG_22_05).job_requeue
    site = inputs.parse_config(CONFIG_22_05 + "JobRequeue              = 0\n")
    assert not site.job_requeue
    rows = [Row("long", 0.0, 7200.0, 1, "u1", "a"), Row("short", 3600.0, 600.0, 1, "u2", "b")]
    for s, asked, preempted in ((inputs.Site(), None, True), (site, None, False), (site, True, True)):
        history = [replace(rows[0], preemptible=asked), rows[1]]
        _slurm, default, notes = run_both(history, _cluster(1), s, [], slurm_round_s=30)
        assert (default.jobs["long"].restarts > 0) is preempted, (s.job_requeue, asked, default.jobs["long"])
        assert default.jobs["short"].start < default.jobs["long"].finish or not preempted
        said = [n for n in notes if n.startswith("JobRequeue=0")]
        assert said == ([] if s.job_requeue else [f"JobRequeue=0: {1 + (asked is None)} job(s) the history does not "
                                                  "record asking --requeue may not be preempted"])


def _cluster(gpus):
    return inputs.Cluster({"gpu": gpus}, gpus, 1, "test")


def test_fair_share_puts_the_light_user_first():
    """One GPU; heavy ran 2 h; then heavy and light submit one job each, heavy's first: the site's Slurm (fair-share
    weight only) runs light's first; the order is the arrival order without the weight."""
    rows = [
        Row("h0", 0.0, 7200.0, 1, "heavy", "a"),
        Row("h1", 7000.0, 600.0, 1, "heavy", "a"),
        Row("l1", 7001.0, 600.0, 1, "light", "b"),
    ]
    fs_only = inputs.Site(weight_fairshare=10000, calc_period_s=60)
    for site, first in ((fs_only, "l1"), (inputs.Site(), "h1")):
        slurm, default, _notes = run_both(rows, _cluster(1), site, [], slurm_round_s=30)
        starts = {k: j.start for k, j in slurm.jobs.items()}
        assert min(("h1", "l1"), key=starts.get) == first, starts
        assert compare(slurm, default)["jobs"] == 3


def test_shares_decide_between_equal_users():
    """Two accounts use the same GPU-seconds; with RawShares 9:1 the 9-share account's job goes first."""
    from slurm_shockwave.slurm.shares import parse_sshare_text

    sshare = "Account|User|RawShares|RawUsage\nroot|||0\n big||9|0\n  big|ub|1|0\n small||1|0\n  small|us|1|0\n"
    rows = [
        Row("s0", 0.0, 3600.0, 1, "us", "small"),
        Row("b0", 0.0, 3600.0, 1, "ub", "big"),
        Row("s1", 100.0, 600.0, 2, "us", "small"),
        Row("b1", 101.0, 600.0, 2, "ub", "big"),
    ]
    site = inputs.Site(weight_fairshare=10000, calc_period_s=60)
    for shares, first in ((parse_sshare_text(sshare), "b1"), (parse_sshare_text(sshare.replace("|9|", "|1|")), "s1")):
        slurm, _default, _notes = run_both(rows, _cluster(2), site, shares, slurm_round_s=30)
        starts = {k: j.start for k, j in slurm.jobs.items()}
        assert min(("s1", "b1"), key=starts.get) == first, starts


def test_the_site_backfills_by_the_time_limits_the_history_recorded():
    """Two GPUs: A (1 GPU, 1 h) runs, B (2 GPUs) waits for it, C (1 GPU, 10 min) fits beside A.  With the model's
    assumed limits (1.5 x run time) C is backfilled at once; with the limit sacct recorded for it (a day, as users
    ask) it would delay B's reservation, so it waits for B; the notes say which limits were used."""
    rows = [Row("A", 0.0, 3600.0, 1, "u1", "a"), Row("B", 10.0, 600.0, 2, "u2", "a"), Row("C", 20.0, 600.0, 1, "u3")]
    site = inputs.Site(weight_age=1000, calc_period_s=60)
    assumed, _d, notes = run_both(rows, _cluster(2), site, [], slurm_round_s=30)
    assert assumed.jobs["C"].start < 100 and assumed.jobs["B"].start >= assumed.jobs["A"].finish - 1e-6
    assert any("no time limit in the history" in n for n in notes)
    limited = [replace(r, limit=86400.0) if r.id == "C" else replace(r, limit=7200.0) for r in rows]
    recorded, _d, notes = run_both(limited, _cluster(2), site, [], slurm_round_s=30)
    assert recorded.jobs["C"].start >= recorded.jobs["B"].finish - 1e-6
    assert any("time limits as recorded for 3 of 3 job(s)" in n for n in notes), notes


@pytest.mark.parametrize(
    "which,content,needle",
    [
        ("history", '{"jobs": [{"job_id": 1, "state": ', "sacct_cut.json"),
        ("nodes", '{"nodes": "no"}', "nodes_bad.json"),
        ("config", "hello = world\n", "config_bad.txt"),
    ],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path, which, content, needle):
    bad = tmp_path / needle
    bad.write_text(content)
    cfg = tmp_path / "config.txt"
    cfg.write_text(SITE)
    args = {
        "history": str(IMPORTS / "sacct_24.11.json"),
        "nodes": str(SLURM / "24.11" / "nodes_idle.json"),
        "config": str(cfg),
    }
    args[which] = str(bad)
    res = CliRunner().invoke(whatif, [args["history"], "--nodes", args["nodes"], "--config", args["config"]])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], res.output


def test_missing_inputs_and_empty_history(tmp_path):
    res = CliRunner().invoke(whatif, [str(IMPORTS / "sacct_24.11.json")])
    assert res.exit_code == 2 and "--nodes" in res.output
    empty = tmp_path / "empty.json"
    empty.write_text('{"jobs": []}')
    res = CliRunner().invoke(whatif, [str(empty), "--nodes", str(SLURM / "24.11" / "nodes_idle.json")])
    assert res.exit_code == 2 and "empty.json" in res.output and "no job" in res.output
    assert math.isfinite(len(res.output))


def test_from_slurm_runs_sacct_nodes_config_and_sshare_through_slurmcli(tmp_path):
    """--from-slurm's reads through the product's SlurmCLI, answered with the recorded 24.11 outputs: the argv
    asked for and what is made of the answers."""
    import subprocess

    from slurm_shockwave.slurm.commands import SlurmCLI

    answers = {
        "sacct": (IMPORTS / "sacct_24.11.json").read_text(),
        "scontrol show nodes": (SLURM / "24.11" / "nodes_idle.json").read_text(),
        "scontrol show config": SITE,
        "sshare": (SLURM / "24.11" / "sshare_used.json").read_text(),
    }
    asked = []

    def runner(argv, **_kw):
        asked.append(list(argv))
        name = next(k for k in answers if " ".join(argv).startswith(k))
        return subprocess.CompletedProcess(argv, 0, answers[name], "")

    cli = SlurmCLI(runner=runner)
    cli.slurm_version = "24.11"
    history, cluster, site, shares = inputs.from_slurm(cli, "2026-01-01", "now", tmp_path)
    assert ["sacct", "--json", "-a", "-D", "-S", "2026-01-01", "-E", "now"] in asked
    assert ["scontrol", "show", "nodes", "--json"] in asked and ["sshare", "-a", "--json"] in asked
    assert cluster.total == 8 and site.weight_fairshare == 10000 and len(shares) == 9
    rows, _tally = inputs.load_history(history)
    assert len(rows) == 7
