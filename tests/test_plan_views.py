"""The job view's pure parts (no Slurm): arrival from the first submit time, ETA sources and their
confidence, the epoch history of finished jobs, the reasons from this round's decision, the one fallback."""
from __future__ import annotations

import json

from dataclasses import dataclass, replace

import pytest

from solver.types import ClusterView, JobPlan, JobView, Policy, RoundDecision
from slurm_shockwave.slurm import jobview
from slurm_shockwave.cli.statusview import fmt_eta
from slurm_shockwave.backends.base import ClusterBackend
from slurm_shockwave.controller.loop import RoundLoop, fallback_decision
from slurm_shockwave.controller.reasons import annotate
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.events.summary import JobProgress


@dataclass(frozen=True)
class FakeJob:
    job_id: int = 7
    name: str = "train"
    user: str = "ana"
    account: str = "lab"
    state: str = "PENDING"
    held: bool = False
    gpus: int = 1
    submit_time: int | None = 1_700_000_100
    start_time: int | None = None
    time_limit: int | None = None
    restart_count: int = 0
    requeue: bool = True
    command: str = "/home/ana/train.sbatch"
    partition: str = "gpu"
    priority: int = 100


def build(job, marker=None, p=None, history=None):
    return jobview.build(job, marker or {"epochs": 10, "bs": 32}, p or JobProgress(), 1_700_000_500.0,
                         round_length=120.0, weight=1.0, arrival=jobview.arrival_of(job, {}, 0.0),
                         history=history or {})


def test_arrival_is_the_first_submit_time():
    job = FakeJob(submit_time=1_700_000_900)                      # moved by a requeue
    assert jobview.arrival_of(job, {"7": 1_700_000_100.0}, 0.0) == 1_700_000_100.0
    assert jobview.arrival_of(job, {}, 0.0) == 1_700_000_900.0


def test_eta_sources_and_confidence():
    v, m = build(FakeJob())
    assert m.eta_source == "default" and m.eta_confidence == "low"
    v, m = build(FakeJob(time_limit=20))                           # 20 min over 10 epochs: 120 s/epoch, bound
    assert m.eta_source == "time_limit" and v.epoch_duration_by_bs == {32: 120.0}
    v, m = build(FakeJob(), history={32: (6.0, 40)})
    assert m.eta_source == "history" and m.eta_confidence == "medium" and v.epoch_duration_by_bs[32] == 6.0
    v, m = build(FakeJob(), marker={"epochs": 10, "bs": 32, "epoch_s": 9.0}, history={32: (6.0, 40)})
    assert m.eta_source == "hint" and v.epoch_duration_by_bs == {32: 9.0}
    p = JobProgress(epochs_done=2, total_epochs=10, batch_size=32, bs_runs=((32, 2),),
                    epoch_duration_by_bs={32: 5.0})
    v, m = build(FakeJob(), p=p, history={32: (6.0, 40)})
    assert m.eta_source == "events" and m.eta_confidence == "high" and v.epochs_done == 2
    assert fmt_eta(60, "low") == "~1 min, low confidence" and fmt_eta(600, "high") == "~10 min"


def test_no_requeue_warning():
    _v, m = build(FakeJob(requeue=False))
    assert any("--no-requeue" in w for w in m.warnings)
    _v, m = build(FakeJob())
    assert m.warnings == ()


def test_view_round_trip_is_exact():
    from slurm_shockwave.journal.record import view_from_json, view_to_json
    v, _m = build(FakeJob(), history={32: (6.0, 40), 64: (4.0, 3)})
    v = replace(v, bs_history=(32,) * 700 + (64,) * 300, throughput_by_gpus={1: 5.0, 2: 9.5})   # int keys back
    assert view_from_json(json.loads(json.dumps(view_to_json(v)))) == v
    assert len(view_to_json(v)["bs_history"]) == 2                  # run-length encoded


def test_history_of_finished_jobs_feeds_the_next_eta(tmp_path):
    st = StateStore(tmp_path / "s.sqlite")
    st.add_epoch_history("ana", "train", {32: 5.0, 64: 3.0}, {32: 4, 64: 2})
    st.add_epoch_history("ana", "train", {32: 7.0}, {32: 4})
    h = st.epoch_history("ana", "train")
    assert h[32] == (6.0, 8) and h[64] == (3.0, 2)
    assert st.epoch_history("ben", "train") == {}
    st.close()
    ro = StateStore(tmp_path / "s.sqlite", readonly=True)
    assert ro.epoch_history("ana", "train")[32][1] == 8
    ro.close()


def _view(jobs, gpus=4, now=1_700_000_000.0):
    return ClusterView(now=now, round_index=3, round_length=60.0, num_gpus=gpus, jobs=tuple(jobs))


def _jv(i, gpus=1, ran=False):
    return JobView(job_id=i, arrival_time=1_699_999_000.0 + i, num_gpus=gpus, batch_size=32, epochs_done=0,
                   total_epochs=5, samples_per_epoch=320, steps_done=0, total_steps=50, throughput=1.0,
                   ran_last_round=ran, run_time=float(10 * i))


def test_reasons_come_from_this_rounds_decision():
    view = _view([_jv(1), _jv(2, ran=True), _jv(3), _jv(4)])
    d = RoundDecision(run=(1, 2), plans={1: JobPlan(1, rule="market", next_offset=3), 3: JobPlan(3, next_offset=2)},
                      path="cached")
    out = annotate(view, d, "authoritative")
    assert d.plans[1].reason == "" and 2 not in d.plans            # the policy's records are never mutated
    j = out.plans
    assert j[1].reason.startswith("released this round") and j[1].next_offset == 0   # a stale +3 never shows
    assert j[1].rule == "market" and j[2].rule == "policy" and j[3].rule == ""
    assert j[2].reason.startswith("running (planned")
    assert j[3].reason.startswith("deferred, planned at") and j[3].expected_start == view.now + 120
    assert j[4].reason.startswith("deferred: not planned")


class Bad(Policy):
    name = "bad"

    def __init__(self, run):
        self.run = run

    def decide(self, view):
        return RoundDecision(run=self.run)


class Backend(ClusterBackend):
    def __init__(self, view):
        self.view, self.applied = view, []

    def observe(self):
        return self.view

    def apply(self, d):
        self.applied.append(d)

    def advance(self):
        pass

    def done(self):
        return False


@pytest.mark.parametrize("run", [(1, 2, 3, 4, 5), (1, 1), (99,)])
def test_loop_checks_every_decision_and_falls_back_once(run):
    view = _view([_jv(i, gpus=2) for i in (1, 2, 3, 4, 5)], gpus=4)
    b = Backend(view)
    loop = RoundLoop(b, Bad(run))
    rec = loop.run_round()
    assert rec.fallback
    enacted = b.applied[0]
    assert enacted.run == fallback_decision(view).run
    assert sum(2 for _ in enacted.run) <= 4 and enacted.path == "fallback"
    assert enacted.placement == {1: {"gpu": 2}, 2: {"gpu": 2}}      # placed and checked before enactment
    assert enacted.run == (1, 2)                                   # least attained service first


def test_fallback_is_the_shockwave_policys_rule():
    from solver.market.plan import max_min_round
    view = _view([replace(_jv(i), run_time=float(50 - i)) for i in range(1, 7)], gpus=3)
    rows = [(j.job_id, j.num_gpus, j.run_time, j.weight, j.arrival_time) for j in view.jobs]
    assert list(fallback_decision(view).run) == max_min_round(rows, 3) == [6, 5, 4]


def _snapshot_state(tmp_path):
    """A state with one round record, as the controller journals it."""
    from slurm_shockwave.journal.record import RoundRecord
    st = StateStore(tmp_path / "state.sqlite")
    st.begin_round(4, 1_700_000_000.0)
    jobs = [_jv(1, ran=True), _jv(2), _jv(3)]
    jobs = [replace(j, user=u) for j, u in zip(jobs, ("ana", "ben", "ana"))]
    view = _view(jobs, gpus=6)
    d = RoundDecision(run=(1, 2), path="solved", plans={
        1: JobPlan(1, predicted_remaining_s=50.0, rho_hat=1.1), 2: JobPlan(2, predicted_remaining_s=70.0),
        3: JobPlan(3, predicted_remaining_s=600.0, next_offset=2, rho_hat=float("inf"))})
    d = annotate(view, d, "authoritative")
    metas = {j.job_id: {"slurm_state": "RUNNING" if j.ran_last_round else "HELD", "eta_confidence": "low",
                        "eta_source": "default", "warnings": []} for j in jobs}
    unm = jobview.unmanaged([FakeJob(job_id=9, state="RUNNING", gpus=2, start_time=1_700_000_000, time_limit=10),
                             FakeJob(job_id=10, gpus=4)], {1, 2, 3}, "gpu", 0.0)
    context = {"jobs": {str(k): m for k, m in metas.items()}, "partition_gpus": 8, "unmanaged": unm,
               "mode": "authoritative", "dry_run": False}
    st.record_round(RoundRecord(view, d, 0.1, False, "shockwave", context), busy=1)
    for j in jobs:
        st.upsert_jobs([{"job_id": str(j.job_id), "user": j.user, "account": "", "gpus": 1, "state": "PENDING",
                         "submit_time": 1.0, "restarts": 0, "view": {}}], 1.0)
    st.finish_round(4)
    st.close()
    return tmp_path


def test_status_reads_the_snapshot_me_watch_and_unmanaged(tmp_path, monkeypatch):
    import json as _json
    import time as _time

    from click.testing import CliRunner

    from slurm_shockwave.cli.main import cli
    d = _snapshot_state(tmp_path)
    r = CliRunner().invoke(cli, ["status", "--state-dir", str(d), "--json"])
    assert r.exit_code == 0, r.output
    out = _json.loads(r.output)
    cl = out["cluster"]
    assert cl["gpus"] == 8 and cl["gpus_unmanaged"] == 2 and cl["gpus_managed_capacity"] == 6
    assert cl["unmanaged_pending"] == 1 and cl["gpus_busy"] == 3
    rows = {r["job_id"]: r for r in out["jobs"]}
    assert rows["2"]["reason"].startswith("released this round") and rows["2"]["position"] == 1
    assert rows["3"]["position"] == 2 and rows["3"]["expected_start"] == _view([]).now + 120
    assert rows["3"]["reason"].startswith("deferred, planned at")
    monkeypatch.setattr("getpass.getuser", lambda: "ben")
    mine = _json.loads(CliRunner().invoke(cli, ["status", "--state-dir", str(d), "--json", "--me"]).output)
    assert [r["job_id"] for r in mine["jobs"]] == ["2"]
    text = CliRunner().invoke(cli, ["status", "--state-dir", str(d)]).output
    assert "3/8 GPUs busy (1 managed, 2 unmanaged" in text and "low confidence" in text
    calls = []

    def sleep(s):
        calls.append(s)
        if len(calls) >= 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(_time, "sleep", sleep)
    r = CliRunner().invoke(cli, ["status", "--state-dir", str(d), "--watch", "2"])
    assert r.exit_code == 0 and calls == [2.0, 2.0] and r.output.count("GPUs busy") == 2
    ex = _json.loads(CliRunner().invoke(cli, ["explain", "3", "--state-dir", str(d), "--json"]).output)
    assert ex["predicted_remaining_s"] == 600.0 == ex["plan"]["predicted_remaining_s"]
    assert ex["reason"] == rows["3"]["reason"]
    assert rows["3"]["rho_hat"] is None                            # a non-finite number is stored as null
