"""What `status` and `explain` show, read only from the controller's state: the latest round snapshot (the
exact views and decision the controller acted on), plus the jobs table for jobs that finished or were
quarantined since.  No recomputation with placeholder values: one predicted remaining time per job."""

from __future__ import annotations

import dataclasses
import logging
import math
import time

from slurm_shockwave.journal.context import FairShare, JobContext, RoundContext, Unmanaged
from slurm_shockwave.journal.record import SHORT_HISTORY
from solver.types import RULES

log = logging.getLogger("slurm_shockwave.status")

STALE_ROUNDS = 3


def fmt_duration(seconds) -> str:
    if seconds is None:
        return "-"
    s = max(0.0, float(seconds))
    if s < 90:
        return f"~{max(1, round(s / 60))} min" if s >= 30 else f"~{round(s)} s"
    if s < 5400:
        return f"~{round(s / 60)} min"
    return f"~{s / 3600:.1f} h"


def fmt_eta(seconds, confidence) -> str:
    text = fmt_duration(seconds)
    if seconds is None or not confidence or confidence == "high":
        return text
    return f"{text}, {confidence} confidence"


def fmt_clock(t) -> str:
    return "-" if t is None else time.strftime("%H:%M:%S", time.localtime(float(t)))


def last_finished_round(store):
    try:
        return store.db.execute(
            "SELECT round, started, finished FROM rounds WHERE status='done' ORDER BY round DESC LIMIT 1"
        ).fetchone()
    except Exception as e:  # noqa: BLE001 - status still shows the snapshot without it
        log.info("the last finished round cannot be read: %s", e)
        return None


def _row_from_record(rec, v) -> dict:
    """One status row of a job the latest round decided on: its view, plan record and Slurm context."""
    plan, ctx = rec.plan(v.job_id), rec.job_context(v.job_id)
    running = ctx.slurm_state == "RUNNING"
    remaining = _on_its_gpus(rec, v, plan.predicted_remaining_s)
    return {
        "job_id": str(v.job_id),
        "user": v.user,
        "account": v.account,
        "gpus": v.running_gpus if running and v.running_gpus else v.num_gpus,  # an elastic job's: its count now
        "gpus_base": v.num_gpus if running and v.running_gpus not in (None, v.num_gpus) else None,
        "state": ctx.slurm_state or "?",
        "batch_size": v.batch_size,
        "epochs_done": v.epochs_done,
        "total_epochs": v.total_epochs,
        "predicted_remaining_s": remaining,
        "eta_confidence": ctx.eta_confidence,
        "eta_source": ctx.eta_source,
        "eta_detail": ctx.eta_detail,
        "rho_hat": plan.rho_hat,
        "weight": v.weight,
        "rule": plan.rule or None,
        "rounds_planned": plan.rounds_planned,
        "next_planned_round": plan.next_offset,
        "planned_now": v.job_id in set(rec.run),
        "expected_start": plan.expected_start if not running else ctx.start_time,
        "expected_end": (
            (plan.expected_start or rec.view.now or 0) + remaining
            if remaining is not None and plan.expected_start is not None
            else None
        ),
        "submit_time": ctx.submit_time,
        "restarts": ctx.restarts,
        "reason": plan.reason or "not in this round's decision",
        "preempt_cost_s": ctx.preempt_cost_s,
        "warnings": list(ctx.warnings),
        "finished": False,
        "position": None,
        **_gpu_type(rec, v, ctx),
    }


def _on_its_gpus(rec, v, remaining):
    """The plan's remaining time (at the job's asked count, on its reference type) at the GPUs this round gives it:
    an elastic job lent fewer GPUs, or a job on a slower type, takes longer (as `preemption.work_left_s` reads it)."""
    placed = rec.decision.placement.get(v.job_id) or {}
    if remaining is None or len(placed) != 1 or not v.throughput > 0:
        return remaining
    ((t, n),) = placed.items()
    rate = v.rate(t if v.throughput_by_type else None, n)
    return remaining * v.throughput / rate if math.isfinite(rate) and rate > 0 else remaining


def _gpu_type(rec, v, ctx: JobContext) -> dict:
    """On a cluster of several GPU types: the type the job runs on (Slurm's allocation), else the one this round
    placed it on, else the one its user asked for or the controller steered it to (slurm/gpu_types.py); and its
    speed on each type with where each comes from."""
    if len(rec.view.capacity) < 2:
        return {}
    placed = rec.decision.placement.get(v.job_id) or {}
    if ctx.slurm_state != "RUNNING" and len(placed) == 1:
        return {"gpu_type": next(iter(placed)), "gpu_type_by": "placement", "gpu_speeds": ctx.gpu_speeds}
    return {"gpu_type": ctx.gpu_type or v.gpu_type, "gpu_type_by": ctx.gpu_type_by, "gpu_speeds": ctx.gpu_speeds}


def status_rows(store, include_finished: bool = False) -> tuple[dict, list[dict]]:
    """(cluster summary, one row per job) from the latest round record; finished/quarantined jobs overlaid."""
    rec, recorded_at = store.latest_round() or (None, None)
    cluster = rec.context if rec else RoundContext()
    cfg = store.get("config", {}) or {}
    last = store.last_round()
    done = last_finished_round(store)
    now = time.time()
    round_length = float((rec.view.round_length if rec else 0) or cfg.get("round_seconds") or 120)
    decided = {str(v.job_id) for v in rec.view.jobs} if rec else set()
    rows = {str(v.job_id): _row_from_record(rec, v) for v in rec.view.jobs} if rec else {}
    for job in store.jobs(include_finished=True):
        jid, v = job["job_id"], job["view"] or {}
        if v.get("quarantined") or job["state"] == "QUARANTINED":
            rows[jid] = {
                **rows.get(jid, {}),
                "job_id": jid,
                "user": job["user"],
                "account": job["account"],
                "gpus": job["gpus"],
                "state": "QUARANTINED",
                "batch_size": None,
                "epochs_done": None,
                "total_epochs": None,
                "predicted_remaining_s": None,
                "rho_hat": None,
                "planned_now": False,
                "expected_start": None,
                "position": None,
                "finished": False,
                "reason": f"quarantined (left to Slurm, untouched): {v.get('quarantined') or '?'}",
                "warnings": [],
            }
        elif job["finished"] is not None and (jid in rows or include_finished):
            rows[jid] = {
                **rows.get(
                    jid,
                    {
                        "gpus": job["gpus"],
                        "user": job["user"],
                        "account": job["account"],
                        "batch_size": v.get("batch_size"),
                        "predicted_remaining_s": None,
                        "rho_hat": None,
                        "warnings": [],
                    },
                ),
                "job_id": jid,
                "state": v.get("final_state") or job["state"],
                "epochs_done": v.get("epochs_done"),
                "total_epochs": v.get("total_epochs"),
                "predicted_remaining_s": 0,
                "planned_now": False,
                "expected_start": None,
                "rho_hat": None,
                "expected_end": None,
                "warnings": [],
                "next_planned_round": None,
                "finished": True,
                "ended_early": bool(v.get("ended_early")),
                "reason": final_reason(job),
                "position": None,
            }
    out = sorted(rows.values(), key=lambda r: int(r["job_id"]) if str(r["job_id"]).isdigit() else 0)
    pending = [r for r in out if r["state"] in ("PENDING", "HELD") and not r.get("finished")]
    pending.sort(
        key=lambda r: (
            not r.get("planned_now"),
            r.get("expected_start") is None,
            r.get("expected_start") or 0,
            -(r.get("rho_hat") or 0),
            int(r["job_id"]),
        )
    )
    for i, r in enumerate(pending):
        r["position"] = i + 1
    unm = cluster.unmanaged or Unmanaged()
    capacity = int(rec.view.num_gpus) if rec else 0
    partition = int(cluster.partition_gpus or capacity)
    live = [r for r in out if not r.get("finished")]
    busy_managed = sum(r["gpus"] or 0 for r in live if r["state"] == "RUNNING")
    planned = sum(r["gpus"] or 0 for r in live if r.get("planned_now"))
    finished_at = done["finished"] if done else None
    age = round(now - recorded_at, 1) if recorded_at else None
    since_done = round(now - finished_at, 1) if finished_at else None
    warnings = []
    if since_done is not None and since_done > STALE_ROUNDS * round_length:
        warnings.append(
            f"the controller has not finished a round for {since_done:.0f} s "
            f"(more than {STALE_ROUNDS} rounds of {round_length:g} s): stopped or stuck; "
            "this is an old snapshot"
        )
    if rec is None:
        warnings.append("no round snapshot yet (the controller has not completed a round)")
    summary = {
        "round": rec.round_index if rec else (last["round"] if last else None),
        "round_status": last["status"] if last else None,
        "snapshot_at": recorded_at,
        "snapshot_age_s": age,
        "last_round_at": last["started"] if last else None,
        "seconds_since_last_round": round(now - last["started"], 1) if last else None,
        "seconds_since_finished_round": since_done,
        "gpus": partition,
        "gpus_managed_capacity": capacity,
        "gpus_busy": busy_managed + unm.running_gpus,
        "gpus_busy_managed": busy_managed,
        "gpus_unmanaged": unm.running_gpus,
        "unmanaged_running": len(unm.running),
        "unmanaged_pending": len(unm.pending),
        "unmanaged_pending_gpus": unm.pending_gpus,
        "gpus_planned": planned,
        "planned_utilization": round(planned / capacity, 3) if capacity else None,
        "last_solve_seconds": last["decide_seconds"] if last else None,
        "solver_path": rec.decision.path if rec else None,
        "mode": cluster.mode or cfg.get("mode"),
        "policy": (rec.policy if rec else None) or cfg.get("policy"),
        "dry_run": cluster.dry_run if cluster.dry_run is not None else cfg.get("dry_run"),
        "round_seconds": round_length,
        "jobs": len(live),
        "fallback": rec.fallback if rec else None,
        "slurm_outages": (store.get("slurm_outage") or {}).get("count", 0),
        "warnings": warnings,
        "quarantined": len([r for r in out if r["state"] == "QUARANTINED"]),
        "preemptions": (store.get("preemptions") or {}).get("counts") or {},
        "fairshare": cluster.fairshare.to_json() if cluster.fairshare else None,
        "gpu_types": dict(rec.view.capacity) if rec and len(rec.view.capacity) > 1 else None,
    }
    if not include_finished:
        out = [r for r in out if not r.get("finished") or r["job_id"] in decided]
    return summary, out


def _f(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def fmt_gpu_time(seconds) -> str:
    s = float(seconds or 0)
    return f"{s / 3600:.1f} GPU-h" if s >= 3600 else f"{s / 60:.0f} GPU-min" if s >= 60 else f"{s:.0f} GPU-s"


def fairshare_lines(fs: FairShare | dict | None) -> list[str]:
    """The market's budgets per account and per user (slurm/fairshare_round.py): shares, decayed usage, budget and
    the GPU-time of the window, as status prints them (`fs` a FairShare, or its JSON form as `status --json`
    shows it)."""
    fs = FairShare.from_json(fs) if fs is not None else None
    if fs is None or not fs.users:
        return []
    window = fmt_duration(fs.window_s).lstrip("~")
    if fs.source == "slurm":
        head = "budgets from Slurm's shares and decayed usage (sshare)"
    else:
        head = "budgets from the config's [weights]"
    lines = [f"fair share: {head}{'; ' + fs.note if fs.note else ''}; GPU-time of the last {window}"]
    lines.append(
        f"  {'account':<14} {'user':<14} {'shares':>6} {'share':>6} {'usage':>6} {'budget':>6} {'jobs':>5}  GPU-time"
    )
    rows = [(a, None) for a in fs.accounts] + [(u, u) for u in fs.users]
    for r, user in rows:
        shares = "-" if r.raw_shares is None else str(r.raw_shares)
        lines.append(
            f"  {r.account or '-':<14} {user.user if user else '':<14} {shares:>6} "
            f"{_f(r.share):>6} {_f(r.usage):>6} {_f(r.budget):>6} "
            f"{str(user.jobs) if user else '':>5}  {fmt_gpu_time(r.gpu_s)}"
        )
    return lines


def explain_job(store, job_id: str) -> dict | None:
    """Everything about one job from the same round record status reads (the exact view decided on)."""
    summary, rows = status_rows(store, include_finished=True)
    row = next((r for r in rows if r["job_id"] == job_id), None)
    if row is None:
        return None
    rec, _at = store.latest_round() or (None, None)
    view = next((v for v in rec.view.jobs if str(v.job_id) == job_id), None) if rec else None
    known = {j["job_id"]: j for j in store.jobs(include_finished=True)}
    v = (known.get(job_id) or {}).get("view") or {}
    posterior = {}
    if view is not None and not row.get("finished"):
        from solver.predictor import predict_remaining

        pred = predict_remaining(view)
        posterior = {
            "regimes": {str(k): x for k, x in pred.regimes.items()},
            "alpha": {str(k): x for k, x in (pred.posterior_alpha or {}).items()},
        }
    plan = dataclasses.asdict(rec.plan(view.job_id)) if rec and view is not None else {}
    plan["job_id"] = job_id
    plan["path"] = rec.decision.path if rec else None
    plan["rule_text"] = RULES.get(plan.get("rule") or "", "")
    actions = store.actions(job_id=job_id, limit=20)
    history = list(view.bs_history) if view is not None else v.get("bs_history")
    durations = (
        {str(k): d for k, d in view.epoch_duration_by_bs.items()}
        if view is not None
        else v.get("epoch_duration_by_bs") or {}
    )
    return {
        **row,
        "round": summary["round"],
        "snapshot_age_s": summary["snapshot_age_s"],
        "bs_history": history if history is None or len(history) <= SHORT_HISTORY else None,
        "epoch_duration_by_bs": durations,
        "min_bs": view.min_batch_size if view is not None else v.get("min_bs"),
        "max_bs": view.max_batch_size if view is not None else v.get("max_bs"),
        "posterior": posterior,
        "plan": plan,
        "contention": contention(rec, view) if rec and view is not None and not row.get("finished") else None,
        "cluster_warnings": summary["warnings"],
        "recent_actions": [{k: a[k] for k in ("round", "verb", "value", "status", "error")} for a in actions],
    }


def contention(rec, view) -> dict:
    """What holds a job back this round: the GPUs the active jobs ask for and the cluster's, and the jobs that come
    before it by fair-finish deadline (the default's: latest fair start), with how many of those arrived after it
    (a burst: they are owed more by now, or are shorter)."""
    mine = rec.plan(view.job_id).fair_finish_in_s
    ahead = [
        j
        for j in rec.view.jobs
        if j.job_id != view.job_id
        and mine is not None
        and (d := rec.plan(j.job_id).fair_finish_in_s) is not None
        and d < mine
    ]
    return {
        "gpus_asked": sum(j.num_gpus for j in rec.view.jobs),
        "gpus": rec.view.num_gpus,
        "ahead": len(ahead),
        "ahead_arrived_later": sum(j.arrival_time > view.arrival_time for j in ahead),
    }


def final_reason(row: dict) -> str:
    """What a finished job's line says: its final Slurm state, and "ended early" with its epochs."""
    v = row.get("view") or {}
    state = v.get("final_state") or row.get("state") or "FINISHED"
    done, total = v.get("epochs_done"), v.get("total_epochs")
    if v.get("ended_early"):
        return f"ended early: {done}/{total} epochs, not requeued ({state})"
    if total:
        return f"finished: {state}, {done}/{total} epochs"
    return f"finished: {state}"
