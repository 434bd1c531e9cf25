"""What `status` and `explain` show, read only from the controller's state: the latest round snapshot (the
exact views and decision the controller acted on), plus the jobs table for jobs that finished or were
quarantined since.  No recomputation with placeholder values: one predicted remaining time per job."""
from __future__ import annotations

import time

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
        return store.db.execute("SELECT round, started, finished FROM rounds WHERE status='done'"
                                " ORDER BY round DESC LIMIT 1").fetchone()
    except Exception:  # noqa: BLE001
        return None


def _row_from_snapshot(jid: str, d: dict, snap: dict) -> dict:
    plan = d.get("plan") or {}
    running = (d.get("slurm_state") == "RUNNING")
    remaining = plan.get("predicted_remaining_s")
    return {
        "job_id": jid, "user": (d.get("jobview") or {}).get("user", ""),
        "account": (d.get("jobview") or {}).get("account", ""), "gpus": d.get("gpus"),
        "state": d.get("slurm_state") or "?", "batch_size": d.get("batch_size"),
        "epochs_done": d.get("epochs_done"), "total_epochs": d.get("total_epochs"),
        "predicted_remaining_s": remaining, "eta_confidence": d.get("eta_confidence"),
        "eta_source": d.get("eta_source"), "eta_detail": d.get("eta_detail"),
        "rho_hat": plan.get("rho_hat"), "weight": d.get("weight"),
        "rounds_planned": plan.get("rounds_planned"), "next_planned_round": plan.get("next_planned_round_offset"),
        "planned_now": jid in set(snap.get("run") or ()),
        "expected_start": plan.get("expected_start") if not running else d.get("start_time"),
        "expected_end": ((plan.get("expected_start") or snap.get("now") or 0) + remaining
                         if remaining is not None and plan.get("expected_start") is not None else None),
        "submit_time": d.get("submit_time"), "restarts": d.get("restarts"),
        "reason": plan.get("reason") or "not in this round's decision",
        "warnings": list(d.get("warnings") or ()), "finished": False, "position": None}


def status_rows(store, include_finished: bool = False) -> tuple[dict, list[dict]]:
    """(cluster summary, one row per job) from the latest snapshot; finished/quarantined jobs overlaid."""
    snap = store.latest_view() or {}
    cfg = store.get("config", {}) or {}
    last = store.last_round()
    done = last_finished_round(store)
    now = time.time()
    round_length = float(snap.get("round_length") or cfg.get("round_seconds") or 120)
    rows = {jid: _row_from_snapshot(jid, d, snap) for jid, d in (snap.get("jobs") or {}).items()}
    for job in store.jobs(include_finished=True):
        jid, v = job["job_id"], job["view"] or {}
        if v.get("quarantined") or job["state"] == "QUARANTINED":
            rows[jid] = {**rows.get(jid, {}), "job_id": jid, "user": job["user"], "account": job["account"],
                         "gpus": job["gpus"], "state": "QUARANTINED", "batch_size": None, "epochs_done": None,
                         "total_epochs": None, "predicted_remaining_s": None, "rho_hat": None,
                         "planned_now": False, "expected_start": None, "position": None, "finished": False,
                         "reason": f"quarantined (left to Slurm, untouched): {v.get('quarantined') or '?'}",
                         "warnings": []}
        elif job["finished"] is not None and (jid in rows or include_finished):
            from ..slurm.jobview import final_reason
            rows[jid] = {**rows.get(jid, {"gpus": job["gpus"], "user": job["user"], "account": job["account"],
                                         "batch_size": v.get("batch_size"), "predicted_remaining_s": None,
                                         "rho_hat": None, "warnings": []}),
                         "job_id": jid, "state": v.get("final_state") or job["state"],
                         "epochs_done": v.get("epochs_done"), "total_epochs": v.get("total_epochs"),
                         "predicted_remaining_s": 0, "planned_now": False, "expected_start": None,
                         "rho_hat": None, "expected_end": None, "warnings": [],
                         "next_planned_round": None, "finished": True, "ended_early": bool(v.get("ended_early")),
                         "reason": final_reason(job), "position": None}
    out = sorted(rows.values(), key=lambda r: int(r["job_id"]) if str(r["job_id"]).isdigit() else 0)
    pending = [r for r in out if r["state"] in ("PENDING", "HELD") and not r.get("finished")]
    pending.sort(key=lambda r: (not r.get("planned_now"), r.get("expected_start") is None,
                                r.get("expected_start") or 0, -(r.get("rho_hat") or 0), int(r["job_id"])))
    for i, r in enumerate(pending):
        r["position"] = i + 1
    unm = snap.get("unmanaged") or {}
    capacity = int(snap.get("capacity") or 0)
    partition = int(snap.get("partition_gpus") or capacity)
    live = [r for r in out if not r.get("finished")]
    busy_managed = sum(r["gpus"] or 0 for r in live if r["state"] == "RUNNING")
    planned = sum(r["gpus"] or 0 for r in live if r.get("planned_now"))
    finished_at = done["finished"] if done else None
    age = round(now - snap["recorded_at"], 1) if snap.get("recorded_at") else None
    since_done = round(now - finished_at, 1) if finished_at else None
    warnings = []
    if since_done is not None and since_done > STALE_ROUNDS * round_length:
        warnings.append(f"the controller has not finished a round for {since_done:.0f} s "
                        f"(more than {STALE_ROUNDS} rounds of {round_length:g} s): stopped or stuck; "
                        "this is an old snapshot")
    if not snap:
        warnings.append("no round snapshot yet (the controller has not completed a round)")
    summary = {"round": snap.get("round", last["round"] if last else None),
               "round_status": last["status"] if last else None,
               "snapshot_at": snap.get("recorded_at"), "snapshot_age_s": age,
               "last_round_at": last["started"] if last else None,
               "seconds_since_last_round": round(now - last["started"], 1) if last else None,
               "seconds_since_finished_round": since_done,
               "gpus": partition, "gpus_managed_capacity": capacity, "gpus_busy": busy_managed + int(
                   unm.get("running_gpus") or 0), "gpus_busy_managed": busy_managed,
               "gpus_unmanaged": int(unm.get("running_gpus") or 0),
               "unmanaged_running": len(unm.get("running") or ()), "unmanaged_pending": len(unm.get("pending") or ()),
               "unmanaged_pending_gpus": int(unm.get("pending_gpus") or 0),
               "gpus_planned": planned, "planned_utilization": round(planned / capacity, 3) if capacity else None,
               "last_solve_seconds": last["decide_seconds"] if last else None,
               "solver_path": snap.get("path"), "mode": snap.get("mode") or cfg.get("mode"),
               "policy": cfg.get("policy"), "dry_run": snap.get("dry_run", cfg.get("dry_run")),
               "round_seconds": round_length, "jobs": len(live), "fallback": snap.get("fallback"),
               "slurm_outages": (store.get("slurm_outage") or {}).get("count", 0), "warnings": warnings,
               "quarantined": len([r for r in out if r["state"] == "QUARANTINED"])}
    if not include_finished:
        out = [r for r in out if not r.get("finished") or r["job_id"] in (snap.get("jobs") or {})]
    return summary, out


def explain_job(store, job_id: str) -> dict | None:
    """Everything about one job from the same snapshot status reads (the exact view decided on)."""
    summary, rows = status_rows(store, include_finished=True)
    row = next((r for r in rows if r["job_id"] == job_id), None)
    if row is None:
        return None
    snap = store.latest_view() or {}
    d = (snap.get("jobs") or {}).get(job_id) or {}
    known = {j["job_id"]: j for j in store.jobs(include_finished=True)}
    v = (known.get(job_id) or {}).get("view") or d
    posterior = {}
    if d.get("jobview") and not row.get("finished"):
        from solver.predictor import predict_remaining

        from ..slurm.jobview import view_from_dict
        pred = predict_remaining(view_from_dict(d))
        posterior = {"regimes": {str(k): x for k, x in pred.regimes.items()},
                     "alpha": {str(k): x for k, x in (pred.posterior_alpha or {}).items()}}
    actions = store.actions(job_id=job_id, limit=20)
    return {**row, "round": summary["round"], "snapshot_age_s": summary["snapshot_age_s"],
            "bs_history": v.get("bs_history"), "epoch_duration_by_bs": v.get("epoch_duration_by_bs") or {},
            "min_bs": v.get("min_bs"), "max_bs": v.get("max_bs"), "posterior": posterior,
            "plan": d.get("plan") or {}, "cluster_warnings": summary["warnings"],
            "recent_actions": [{k: a[k] for k in ("round", "verb", "value", "status", "error")} for a in actions]}
