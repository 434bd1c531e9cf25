"""Budgets from Slurm (issue 24): sshare's association tree parsed on every version's recorded output, the budget
formula (shares 3:1, splitting buys nothing, usage lowers a budget), and reading shares never stops a round."""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_shockwave.controller.config import WeightsSection
from slurm_shockwave.slurm import SlurmCLI
from slurm_shockwave.slurm.budgets import compute
from slurm_shockwave.slurm.fairshare_round import FairShareRound
from slurm_shockwave.slurm.shares import (JSON_ARGV, TEXT_ARGV, SharesError, ShareRow, parse_sshare_json,
                                          parse_sshare_text, read_shares)

DATA = Path(__file__).resolve().parent / "data" / "slurm"
VERSIONS = ("22.05", "24.11", "26.05")
#: the recorded tree (tests/share_fixtures.py): (account, user) -> (parent, RawShares)
TREE = {("root", ""): ("", None), ("root", "root"): ("root", 1), ("teama", ""): ("root", 3),
        ("teama", "sw-ann"): ("teama", 1), ("labc", ""): ("teama", 2), ("labc", "sw-carl"): ("labc", 1),
        ("teamb", ""): ("root", 1), ("teamb", "sw-ann"): ("teamb", 1), ("teamb", "sw-bob"): ("teamb", 1)}


def recorded(version: str, case: str) -> list[list[ShareRow]]:
    """The rows of every form recorded for this version and case (text; JSON from 24.11)."""
    forms = [parse_sshare_text((DATA / version / f"sshare_{case}.txt").read_text())]
    if (DATA / version / f"sshare_{case}.json").exists():
        forms.append(parse_sshare_json((DATA / version / f"sshare_{case}.json").read_text()))
    return forms


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_tree_is_read_the_same_from_text_and_json(version):
    forms = recorded(version, "idle") + recorded(version, "used")
    assert len(forms) == (2 if version == "22.05" else 4)
    for rows in forms:
        assert {r.key: (r.parent, r.raw_shares) for r in rows} == TREE
    idle, used = recorded(version, "idle")[0], recorded(version, "used")
    assert all(r.raw_usage == 0 for r in idle)
    for rows in used:
        usage = {r.key: r.raw_usage for r in rows}
        assert usage[("teama", "sw-ann")] > usage[("teamb", "sw-bob")] > 0 and usage[("labc", "sw-carl")] > 0
        assert usage[("teamb", "sw-ann")] == 0
        # an account's usage is that of everything below it (RawUsage is printed truncated)
        assert usage[("teama", "")] == pytest.approx(usage[("teama", "sw-ann")] + usage[("labc", "")], abs=1.01)
    if version != "22.05":
        text, js = used
        assert {r.key: r.raw_usage for r in text} == {r.key: r.raw_usage for r in js}
        assert {r.key: r.level_fs for r in text} == pytest.approx({r.key: r.level_fs for r in js}, abs=1e-5)


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_shares_give_budgets_of_three_to_one(version):
    for rows in recorded(version, "idle"):
        b = compute(rows, [("teama", "sw-ann"), ("teamb", "sw-bob")])
        assert b.budget == pytest.approx({("teama", "sw-ann"): 1.5, ("teamb", "sw-bob"): 0.5})
        assert not b.missing
        # a second user in teamb takes from teamb only; labc's user shares teama with sw-ann by 2:1 shares
        b = compute(rows, [("teama", "sw-ann"), ("teamb", "sw-bob"), ("teamb", "sw-ann"), ("labc", "sw-carl")])
        part = {k: v / 4 for k, v in b.budget.items()}
        assert part == pytest.approx({("teama", "sw-ann"): 0.25, ("labc", "sw-carl"): 0.5,
                                      ("teamb", "sw-ann"): 0.125, ("teamb", "sw-bob"): 0.125})
    for rows in recorded(version, "used"):
        # teama used less than its 3/4 of the two accounts' usage (NormUsage, the tick's picture): a little more
        b = compute(rows, [("teama", "sw-ann"), ("teamb", "sw-bob")])
        usage = {(ln.account, ln.user): ln.usage for ln in b.accounts}
        norm = {r.key: r.norm_usage for r in rows}
        assert usage[("teama", "")] == pytest.approx(norm[("teama", "")] / (norm[("teama", "")] + norm[("teamb", "")]))
        assert usage[("teama", "")] < 0.75 and b.budget[("teama", "sw-ann")] / 2 > 0.75


def rows(*spec) -> list[ShareRow]:
    """(account, user, parent, shares, usage) -> rows, with root."""
    out = [ShareRow(account="root", parent="")]
    out += [ShareRow(account=a, user=u, parent=p, raw_shares=s, raw_usage=us) for a, u, p, s, us in spec]
    return out


TWO = rows(("a", "", "root", 3, 0), ("a", "ann", "a", 1, 0), ("b", "", "root", 1, 0), ("b", "bob", "b", 1, 0),
           ("c", "", "root", 5, 0))


def test_budget_is_per_association_so_splitting_buys_nothing():
    active = [("a", "ann"), ("b", "bob")]
    b = compute(TWO, active)
    assert b.budget == pytest.approx({("a", "ann"): 1.5, ("b", "bob"): 0.5})
    # account c has no work: it takes no part; a user with ten jobs has the same association (one budget)
    assert {ln.account for ln in b.accounts} == {"a", "b"}
    assert [(ln.account, ln.share, ln.part) for ln in b.accounts] == [("a", 0.75, 0.75), ("b", 0.25, 0.25)]


def test_usage_lowers_the_budget_and_usage_at_the_share_keeps_it():
    at_share = rows(("a", "", "root", 3, 300), ("a", "ann", "a", 1, 300), ("b", "", "root", 1, 100),
                    ("b", "bob", "b", 1, 100))
    assert compute(at_share, [("a", "ann"), ("b", "bob")]).budget == pytest.approx({("a", "ann"): 1.5,
                                                                                  ("b", "bob"): 0.5})
    over = rows(("a", "", "root", 3, 900), ("a", "ann", "a", 1, 900), ("b", "", "root", 1, 100),
                ("b", "bob", "b", 1, 100))
    b = compute(over, [("a", "ann"), ("b", "bob")])
    assert b.budget[("a", "ann")] < 1.5 < b.budget[("a", "ann")] + 1.0      # lower, still the larger
    # 2^(-U/S): a: 0.75 * 2^(-0.9/0.75), b: 0.25 * 2^(-0.1/0.25)
    fa, fb = 0.75 * 2 ** (-0.9 / 0.75), 0.25 * 2 ** (-0.1 / 0.25)
    assert b.budget[("a", "ann")] == pytest.approx(2 * fa / (fa + fb))


def test_norm_usage_is_compared_not_raw_usage():
    """RawUsage jumps when a job ends (a preempted run too) but a running job's usage comes only at the usage
    ticks; NormUsage is every association's at the last tick: the budgets follow NormUsage."""
    r = [ShareRow(account="root"),
         ShareRow(account="a", parent="root", raw_shares=3, raw_usage=10, norm_usage=0.75),
         ShareRow(account="a", user="ann", parent="a", raw_shares=1, raw_usage=10, norm_usage=0.75),
         ShareRow(account="b", parent="root", raw_shares=1, raw_usage=90, norm_usage=0.25),
         ShareRow(account="b", user="bob", parent="b", raw_shares=1, raw_usage=90, norm_usage=0.25)]
    assert compute(r, [("a", "ann"), ("b", "bob")]).budget == pytest.approx({("a", "ann"): 1.5, ("b", "bob"): 0.5})


def test_zero_parent_and_missing_associations():
    r = rows(("a", "", "root", 0, 0), ("a", "ann", "a", 1, 0), ("b", "", "root", 2, 0),
             ("b", "bob", "b", None, 0), ("b", "eve", "b", 1, 0))
    b = compute(r, [("a", "ann"), ("b", "bob"), ("b", "eve"), ("x", "zed")])
    assert b.budget[("a", "ann")] == pytest.approx(1e-6)               # RawShares 0: what others leave
    # 3 associations with work: bob ("parent": 1 share) and eve split b, which takes all
    assert b.budget[("b", "bob")] == pytest.approx(b.budget[("b", "eve")]) == pytest.approx(1.5)
    assert b.missing == (("x", "zed"),) and b.of("x", "zed") is None


@pytest.mark.parametrize("text, why", [
    ("Account|User|RawShares|NormShares|RawUsage\nroot|||0.5|nan\n", "finite"),
    ("Account|User|RawShares|NormShares|RawUsage\nroot|||0.5|-3\n", "non-negative"),
    ("Account|User|RawShares|NormShares|RawUsage\nroot|||0.5\n", "fields"),
    ("Account|User|RawShares|NormShares|RawUsage\n  deep||1|0.5|3\n", "levels deep"),
    ("Account|User|NormShares\nroot||0.5\n", "column"),
    ("Account|User|RawShares|NormShares|RawUsage\nroot|||0.5|1e400\n", "finite"),
])
def test_bad_text_is_one_error_line(text, why):
    with pytest.raises(SharesError, match=why):
        parse_sshare_text(text)


def test_bad_json_is_one_error_line():
    good = json.loads((DATA / "24.11" / "sshare_used.json").read_text())
    bad = json.loads(json.dumps(good))
    bad["shares"]["shares"][3]["usage"] = -1
    with pytest.raises(SharesError, match="non-negative"):
        parse_sshare_json(json.dumps(bad))
    with pytest.raises(SharesError, match="no shares.shares"):
        parse_sshare_json('{"shares": {}}')
    bad = json.loads(json.dumps(good))
    bad["shares"]["shares"][2]["type"] = 7    # found by fuzzing: a TypeError, which whatif showed as a traceback
    with pytest.raises(SharesError, match="row 2: type: expected a list of names, got int"):
        parse_sshare_json(json.dumps(bad))
    with pytest.raises(SharesError, match="not JSON"):
        parse_sshare_json("{")
    assert parse_sshare_json('{"shares": {"shares": [], "total_shares": 0}}') == []    # no accounting
    assert parse_sshare_text("Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|LevelFS\n") == []


def fake_cli(version: str, answers: dict) -> SlurmCLI:
    """A SlurmCLI whose sshare answers from ``answers`` {argv tuple: (rc, stdout, stderr)}."""
    calls = []

    def runner(argv, **_kw):
        calls.append(tuple(argv))
        rc, out, err = answers.get(tuple(argv), (1, "", f"{argv[0]}: unrecognized option '--json'"))
        return subprocess.CompletedProcess(argv, rc, out, err)
    cli = SlurmCLI(runner=runner)
    cli.slurm_version = version
    cli.calls = calls
    return cli


@pytest.mark.parametrize("version", VERSIONS)
def test_one_sshare_call_of_the_versions_form(version):
    text = (DATA / version / "sshare_used.txt").read_text()
    answers = {TEXT_ARGV: (0, text, "")}
    if version != "22.05":
        answers[JSON_ARGV] = (0, (DATA / version / "sshare_used.json").read_text(), "")
    cli = fake_cli(version, answers)
    assert {r.key for r in read_shares(cli)} == set(TREE)
    assert cli.calls == [TEXT_ARGV if version == "22.05" else JSON_ARGV]
    unknown = fake_cli("", {TEXT_ARGV: (0, text, "")})                 # version not known yet: JSON refused
    assert {r.key for r in read_shares(unknown)} == set(TREE) and unknown.calls == [JSON_ARGV, TEXT_ARGV]


@dataclass
class Job:
    job_id: int
    user: str
    account: str
    gpus: int = 1
    state: str = "PENDING"
    start_time: int | None = None
    end_time: int | None = None
    restart_count: int = 0

    @property
    def finished(self) -> bool:
        return self.state in ("COMPLETED", "CANCELLED", "FAILED")


def test_round_budgets_weights_and_fallbacks():
    text = (DATA / "22.05" / "sshare_idle.txt").read_text()
    weights = WeightsSection(users={"sw-bob": 2.0})
    jobs = [Job(1, "sw-ann", "teama")] + [Job(i, "sw-bob", "teamb") for i in range(2, 12)]
    fs = FairShareRound(fake_cli("22.05", {TEXT_ARGV: (0, text, "")}))
    fs.refresh(weights, jobs, 100.0)
    # ten jobs of sw-bob: one association, one budget (1.5 : 0.5), times the config's weight 2 for sw-bob
    assert fs.source == "slurm" and fs.weight("sw-ann", "teama") == pytest.approx(1.5)
    assert fs.weight("sw-bob", "teamb") == pytest.approx(1.0)
    ctx = fs.context()
    assert [(u.user, u.jobs, round(u.budget, 3)) for u in ctx.users] == [("sw-ann", 1, 0.6), ("sw-bob", 10, 0.4)]
    assert [(a.account, a.share) for a in ctx.accounts] == [("teama", 0.75), ("teamb", 0.25)]
    for answer, note in (((1, "", "sshare: error: Problem talking to the database"), "cannot read shares"),
                         ((0, "Account|User|RawShares|NormShares|RawUsage\n", ""), "accounting is off"),
                         ((0, "Account|User|RawShares|NormShares|RawUsage\nroot|||x|1\n", ""), "not a number")):
        fs = FairShareRound(fake_cli("22.05", {TEXT_ARGV: answer}))
        fs.refresh(weights, jobs, 100.0)
        assert fs.source == "config" and note in fs.note
        assert fs.weight("sw-ann", "teama") == 1.0 and fs.weight("sw-bob", "teamb") == 2.0
        assert fs.context().source == "config"
    off = FairShareRound(fake_cli("22.05", {TEXT_ARGV: (0, text, "")}))
    off.refresh(WeightsSection(from_slurm=False), jobs, 100.0)
    assert off.source == "config" and off.cli.calls == [] and "from_slurm" in off.note


def test_status_lines_per_account_and_user():
    from slurm_shockwave.cli.statusview import fairshare_lines
    fs = FairShareRound(fake_cli("22.05", {TEXT_ARGV: (0, (DATA / "22.05" / "sshare_used.txt").read_text(), "")}))
    fs.refresh(WeightsSection(window_seconds=3600), [Job(1, "sw-ann", "teama", 3, "RUNNING", 100),
                                                     Job(2, "sw-bob", "teamb", 1, "RUNNING", 100),
                                                     Job(3, "sw-bob", "teamb")], 1300.0)
    lines = fairshare_lines(fs.context())
    from slurm_shockwave.journal.context import FairShare
    assert lines[0] == "fair share: budgets from Slurm's shares and decayed usage (sshare); GPU-time of the last 60 min"
    table = [line.split() for line in lines[2:]]
    assert [t[:3] for t in table] == [["teama", "3", "0.75"], ["teamb", "1", "0.25"],
                                      ["teama", "sw-ann", "1"], ["teamb", "sw-bob", "1"]]
    assert table[0][-2:] == ["1.0", "GPU-h"] and table[3][-3:] == ["2", "20", "GPU-min"]   # 3 x 20 min; 1 x 20 min
    assert fairshare_lines(None) == [] and fairshare_lines({"users": []}) == [] and fairshare_lines(FairShare()) == []
    assert fairshare_lines(fs.context().to_json()) == lines           # the JSON form `status --json` shows


def test_gpu_time_in_the_window():
    fs = FairShareRound(fake_cli("22.05", {}))
    w = WeightsSection(from_slurm=False, window_seconds=100)
    a = Job(1, "ann", "a", gpus=2, state="RUNNING", start_time=10)
    b = Job(2, "bob", "b", gpus=1, state="RUNNING", start_time=40)
    fs.refresh(w, [a, b], 50.0)
    assert fs.gpu_seconds() == {("a", "ann"): 80.0, ("b", "bob"): 10.0}
    b.state, b.end_time = "COMPLETED", 55
    fs.refresh(w, [a, b], 60.0)                         # b's last 5 s from its end time; a counted once
    assert fs.gpu_seconds() == {("a", "ann"): 100.0, ("b", "bob"): 15.0}
    a.state, a.restart_count, a.start_time = "RUNNING", 1, 70       # requeued and restarted: a new run
    fs.refresh(w, [a], 80.0)
    assert fs.gpu_seconds()[("a", "ann")] == 120.0
    fs.refresh(w, [a], 155.0)                           # the round at t=50 left the window (100 s)
    assert fs.gpu_seconds() == {("a", "ann"): 190.0, ("b", "bob"): 5.0}
    ctx = fs.context()
    assert ctx.window_s == 100 and ctx.users[0].gpu_s == 190.0 and ctx.accounts[0].gpu_s == 190.0
