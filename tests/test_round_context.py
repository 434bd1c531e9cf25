"""The typed seams (journal/context.py, journal/verbs.py, slurm/models.py): the backend's round context round-trips
through the journal, a journal of the older dict form still loads (missing fields at their defaults), no
non-finite number is stored; enactment verbs are a StrEnum stored as the same strings; one Slurm job record."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_shockwave.journal.context import FairShare, JobContext, RoundContext, Share, Unmanaged, UnmanagedJob
from slurm_shockwave.journal.record import RoundRecord
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.enact import Action, Enactor
from slurm_shockwave.slurm.models import SlurmJob
from slurm_shockwave.slurm.parse import parse_squeue_json
from slurm_shockwave.strict_json import dumps
from solver.types import ClusterView, JobPlan, JobView, RoundDecision

DATA = Path(__file__).parent / "data" / "slurm"


def _view(ids=(1, 2)) -> ClusterView:
    jobs = tuple(JobView(job_id=i, arrival_time=0.0, num_gpus=1, batch_size=32, epochs_done=0, total_epochs=4,
                         samples_per_epoch=64, steps_done=0.0, total_steps=8.0, throughput=1.0,
                         epoch_duration_by_bs={32: 2.0}, user="ana") for i in ids)
    return ClusterView(now=100.0, round_index=3, round_length=60.0, num_gpus=4, jobs=jobs, total_jobs=len(jobs))


def _context() -> RoundContext:
    fs = FairShare(source="slurm", note="", window_s=3600.0,
                   users=(Share(account="a", user="ana", jobs=2, raw_shares=1, share=0.5, usage=0.1, raw_usage=7,
                                budget=1.0, weight=1.0, gpu_s=120.0),),
                   accounts=(Share(account="a", raw_shares=1, share=0.5, usage=0.1, raw_usage=7, budget=1.0),))
    unm = Unmanaged(running=(UnmanagedJob(job_id=9, user="bo", gpus=2, start_time=50, expected_end=650),),
                    pending=(UnmanagedJob(job_id=10, user="bo", gpus=4, priority=7, submit_time=40, position=1),),
                    running_gpus=2, pending_gpus=4)
    jobs = {"1": JobContext(slurm_state="RUNNING", name="a", submit_time=10.0, restarts=1, eta_source="events",
                            eta_confidence="high", warnings=("w",), requeue=True, preempt_cost_s=float("inf")),
            "2": JobContext(slurm_state="HELD", gpu_type="k80", gpu_type_by="user")}
    return RoundContext(jobs=jobs, partition_gpus=8, unmanaged=unm, mode="authoritative", dry_run=False,
                        quarantined={"7": "invalid hints"}, fairshare=fs)


def _reload(record: RoundRecord) -> RoundRecord:
    text = dumps(record.to_json())
    assert "Infinity" not in text and "NaN" not in text
    return RoundRecord.from_json(json.loads(text))


def test_the_round_context_round_trips_through_the_journal_and_drops_non_finite_numbers(tmp_path):
    decision = RoundDecision(run=(1,), plans={1: JobPlan(1, rho_hat=float("nan"))})
    back = _reload(RoundRecord(_view(), decision, 0.1, False, "shockwave", _context()))
    ctx = back.context
    assert ctx.jobs["1"].preempt_cost_s is None                       # inf is never stored
    assert ctx == replace(_context(), jobs={**_context().jobs, "1": replace(_context().jobs["1"], preempt_cost_s=None)})
    assert back.job_context(2).gpu_type == "k80" and back.job_context(99) == JobContext()
    assert ctx.fairshare == _context().fairshare and ctx.unmanaged == _context().unmanaged
    st = StateStore(tmp_path / "state.sqlite")
    st.begin_round(3, 1.0)
    st.record_round(RoundRecord(_view(), decision, context=_context()), busy=1)
    assert st.last_round()["mode"] == "authoritative"
    assert st.latest_round()[0].context.quarantined == {"7": "invalid hints"}
    st.close()


def test_a_record_of_the_older_dict_form_loads_tolerantly(tmp_path):
    """A site upgrading keeps its state directory: the dict context of an older controller (some fields missing,
    some unknown, some of another type, non-finite numbers) reads with defaults."""
    old = RoundRecord(_view(), RoundDecision(run=(1,))).to_json()
    old["cluster"] = {"partition_gpus": 8, "mode": "advisory", "unknown_key": [1],
                      "unmanaged": {"running": [{"job_id": 9, "gpus": 2, "start_time": 5, "expected_end": None,
                                                 "name": "x", "user": "bo"}], "pending": [], "running_gpus": 2},
                      "fairshare": {"source": "config", "users": [{"user": "ana", "account": "", "jobs": 1,
                                                                   "budget": 1.0, "gpu_s": math.nan}]}}
    old["jobs"]["1"]["context"] = {"slurm_state": "RUNNING", "eta_source": "hint", "warnings": ["x"],
                                   "restarts": "three", "preempt_cost_s": math.inf, "extra": {"a": 1}}
    old["jobs"]["2"].pop("context")
    rec = RoundRecord.from_json(json.loads(json.dumps(old)))
    ctx = rec.context
    assert (ctx.partition_gpus, ctx.mode, ctx.dry_run, ctx.quarantined) == (8, "advisory", None, {})
    assert ctx.unmanaged.running[0].job_id == 9 and ctx.unmanaged.pending == () and ctx.unmanaged.pending_gpus == 0
    assert ctx.fairshare.users[0].gpu_s == 0.0 and ctx.fairshare.accounts == ()
    assert rec.job_context(1) == JobContext(slurm_state="RUNNING", eta_source="hint", warnings=("x",))
    assert rec.job_context(2) == JobContext()
    # the dict form given directly (tests and older callers) is read the same way
    assert RoundRecord(_view(), RoundDecision(), context={"mode": "authoritative"}).context.mode == "authoritative"
    assert RoundRecord(_view(), RoundDecision()).context == RoundContext()
    assert RoundRecord(_view(), RoundDecision()).to_json()["cluster"] == {}       # the simulator keeps nothing


def test_verbs_are_a_str_enum_stored_as_their_strings(tmp_path):
    assert Action("hold", (1,)).verb is Verb.HOLD and Action("hold", (1,)) == Action(Verb.HOLD, (1,))
    with pytest.raises(ValueError):
        Action("unhold", (1,))

    class CLI:
        def scontrol_update(self, ids, **fields):
            pass

    st = StateStore(tmp_path / "state.sqlite")
    Enactor(CLI(), st).execute(1, [Action(Verb.HOLD, (4,), "m"), Action(Verb.SITE_FACTOR, (4,), 5)], {})
    raw = st.db.execute("SELECT verb, typeof(verb) AS t FROM actions ORDER BY id").fetchall()
    assert [(r["verb"], r["t"]) for r in raw] == [("hold", "text"), ("site_factor", "text")]
    assert st.held_by_us() == {"4"} and st.last_values(Verb.SITE_FACTOR) == {4: 5} == st.last_values("site_factor")
    st.close()


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_one_job_record_with_its_gpu_fields_on_every_version(version):
    data = json.loads((DATA / version / "squeue_mixed.json").read_text())
    rows = data["jobs"][:3]
    rows[0]["features"] = "v100&nvme" if version == "22.05" else ["v100", "nvme"]
    rows[1]["required_nodes"], rows[1]["features"] = None, None
    rows[2]["required_nodes"], rows[2]["features"] = {"odd": 1}, 5          # unreadable: read as none
    data["jobs"] = rows
    jobs = parse_squeue_json(json.dumps(data))
    assert jobs[0].features == ("v100&nvme" if version == "22.05" else "v100,nvme") and jobs[0].problem is None
    assert [(j.required_nodes, j.features, j.problem) for j in jobs[1:]] == [("", "", None)] * 2
    assert all(type(j) is SlurmJob and isinstance(j.gpu_request, str) for j in jobs)


def test_status_reads_the_remaining_time_at_the_gpus_the_round_gives_a_job(tmp_path):
    """An elastic job lent 1 of its 4 GPUs, and a job on a type 4 times slower than its reference, take longer than
    the plan's estimate at their asked count on the fastest type: `status` shows their time on the GPUs they get."""
    from slurm_shockwave.cli.statusview import status_rows
    from solver.types import GPU
    base = _view((1, 2, 3)).jobs
    lent = replace(base[0], num_gpus=4, throughput=4.0, gpus_range=(1, 4), running_gpus=1,
                   throughput_by_gpus={1: 1.0, 2: 2.0, 4: 4.0})
    slow = replace(base[1], throughput_by_type={"v100": 1.0, "k80": float("nan")})     # a bad number: not trusted
    typed = replace(base[2], throughput_by_type={"v100": 1.0, "k80": 0.25})
    plans = {j: JobPlan(j, predicted_remaining_s=100.0, expected_start=100.0) for j in (1, 2, 3)}
    for jobs, placement, want in (((lent,), {1: {GPU: 1}}, {"1": 400.0}),
                                  ((slow, typed), {2: {"k80": 1}, 3: {"k80": 1}}, {"2": 100.0, "3": 400.0})):
        view = ClusterView(now=100.0, round_index=3, round_length=60.0, num_gpus=8, jobs=jobs,
                           capacity={GPU: 8} if len(jobs) == 1 else {"v100": 4, "k80": 4})
        running = {str(j.job_id): JobContext(slurm_state="RUNNING") for j in jobs}
        st = StateStore(tmp_path / f"state{len(jobs)}.sqlite")
        st.begin_round(3, 1.0)
        st.record_round(RoundRecord(view, RoundDecision(run=tuple(placement), plans=plans, placement=placement),
                                    context=RoundContext(jobs=running)), busy=1)
        st.finish_round(3)
        rows = {r["job_id"]: r for r in status_rows(st)[1]}
        assert {j: rows[j]["predicted_remaining_s"] for j in want} == pytest.approx(want)
        assert {j: rows[j]["expected_end"] for j in want} == pytest.approx({j: 100.0 + x for j, x in want.items()})
        st.close()
