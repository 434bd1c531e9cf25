"""`shockwave status | explain JOB | events JOB`: read the controller's state read-only.

They never change the plan and work while the controller runs (SQLite WAL readers).
"""
from __future__ import annotations

import time

import click

from .common import OneLineError, console, emit_json

DEFAULT_STATE = "/var/lib/shockwave"


def _state_dir(config_path, state_dir):
    if config_path:
        from ..controller.config import ConfigError, load_config
        try:
            return load_config(config_path)
        except ConfigError as e:
            raise OneLineError(e.problems[0]) from None
    from ..controller.config import ControllerConfig
    return ControllerConfig(state_dir=state_dir or DEFAULT_STATE)


def _open(cfg):
    from ..controller.state import StateStore
    try:
        return StateStore(cfg.state_path, readonly=True)
    except FileNotFoundError as e:
        raise OneLineError(f"{e} (is the controller running? pass --state-dir or --config)") from None


def _minutes(seconds):
    return f"~{max(1, round(seconds / 60))} min"


def reason(job: dict, plan: dict | None, round_length: float) -> str:
    """Plain words for where a job stands in the plan."""
    state = job["state"]
    if plan is None:
        return "not in the current plan (arrived after the last round)" if state != "RUNNING" else "running"
    offset = plan.get("next_planned_round_offset")
    if state == "RUNNING":
        return "running (planned this round)" if offset == 0 else "running; loses its round next (preempted in authoritative mode)"
    if offset == 0:
        return "planned this round: starting"
    if offset is not None:
        return f"planned in round +{offset} ({_minutes(offset * round_length)})"
    if plan.get("path") == "fallback":
        return "waiting: max-min fairness fallback this round"
    return "deferred: fair share reached, not planned in the window"


def status_rows(store) -> tuple[dict, list[dict]]:
    last = store.last_round()
    info = store.round_info()
    cfg = store.get("config", {})
    decision = info.get("decision", {}) or {}
    plans = {str(k): v for k, v in (decision.get("jobs") or {}).items()}
    run = {str(j) for j in info.get("run", [])}
    round_length = float(info.get("round_length") or cfg.get("round_seconds") or 120)
    rows = []
    for job in store.jobs():
        v = job["view"] or {}
        plan = plans.get(job["job_id"])
        rows.append({
            "job_id": job["job_id"], "user": job["user"], "account": job["account"], "gpus": job["gpus"],
            "state": job["state"], "batch_size": v.get("batch_size"),
            "epochs_done": v.get("epochs_done"), "total_epochs": v.get("total_epochs"),
            "predicted_remaining_s": (plan or {}).get("predicted_remaining_s"),
            "rho_hat": (plan or {}).get("rho_hat"), "weight": v.get("weight"),
            "rounds_planned": (plan or {}).get("rounds_planned"),
            "next_planned_round": (plan or {}).get("next_planned_round_offset"),
            "planned_now": job["job_id"] in run, "reason": reason(job, plan, round_length)})
    capacity = int(info.get("capacity") or 0)
    planned = sum(r["gpus"] for r in rows if r["planned_now"])
    busy = sum(r["gpus"] for r in rows if r["state"] == "RUNNING")
    summary = {"round": last["round"] if last else None, "round_status": last["status"] if last else None,
               "last_round_at": last["started"] if last else None,
               "seconds_since_last_round": round(time.time() - last["started"], 1) if last else None,
               "gpus": capacity, "gpus_busy": busy, "gpus_planned": planned,
               "planned_utilization": round(planned / capacity, 3) if capacity else None,
               "last_solve_seconds": last["decide_seconds"] if last else None,
               "solver_path": decision.get("path"), "mode": cfg.get("mode"), "policy": cfg.get("policy"),
               "dry_run": cfg.get("dry_run"), "round_seconds": round_length, "jobs": len(rows),
               "slurm_outages": (store.get("slurm_outage") or {}).get("count", 0)}
    return summary, rows


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Controller config (to find its state directory).")
@click.option("--state-dir", default=None, help=f"Controller state directory (default {DEFAULT_STATE}).")
@click.option("--user", default=None, help="Only this user's jobs.")
@click.option("--state", "state_filter", default=None,
              type=click.Choice(["PENDING", "RUNNING", "HELD"], case_sensitive=False), help="Only jobs in this state.")
@click.option("--sort", "sort_key", default="job_id", show_default=True,
              type=click.Choice(["job_id", "user", "gpus", "state", "rho_hat", "predicted_remaining_s",
                                 "next_planned_round"]))
@click.option("--json", "as_json", is_flag=True)
def status(config_path, state_dir, user, state_filter, sort_key, as_json):
    """Cluster summary and one row per managed job, with why it is pending and when it will run."""
    store = _open(_state_dir(config_path, state_dir))
    summary, rows = status_rows(store)
    store.close()
    if user:
        rows = [r for r in rows if r["user"] == user]
    if state_filter:
        rows = [r for r in rows if r["state"].upper() == state_filter.upper()]
    rows.sort(key=lambda r: (r[sort_key] is None, r[sort_key] if not sort_key == "job_id" else int(r["job_id"])))
    if as_json:
        emit_json({"cluster": summary, "jobs": rows})
        return
    from rich.table import Table
    c = console()
    c.print(f"round {summary['round']} ({summary['round_status']}), {summary['gpus_busy']}/{summary['gpus']} GPUs busy, "
            f"{summary['gpus_planned']} planned ({(summary['planned_utilization'] or 0):.0%}), last solve "
            f"{(summary['last_solve_seconds'] or 0):.2f} s [{summary['solver_path']}], mode {summary['mode']}"
            f"{' (dry run)' if summary['dry_run'] else ''}, policy {summary['policy']}")
    t = Table()
    for col in ("job", "user", "GPUs", "state", "bs", "epochs", "remaining", "rho^", "planned", "next", "reason"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["job_id"], r["user"], str(r["gpus"]), r["state"], str(r["batch_size"] or "-"),
                  f"{r['epochs_done']}/{r['total_epochs']}",
                  _minutes(r["predicted_remaining_s"]) if r["predicted_remaining_s"] is not None else "-",
                  f"{r['rho_hat']:.2f}" if r["rho_hat"] is not None else "-",
                  str(r["rounds_planned"] if r["rounds_planned"] is not None else "-"),
                  f"+{r['next_planned_round']}" if r["next_planned_round"] is not None else "-", r["reason"])
    c.print(t)


@click.command()
@click.argument("job_id")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
@click.option("--state-dir", default=None)
@click.option("--json", "as_json", is_flag=True)
def explain(job_id, config_path, state_dir, as_json):
    """The inputs and the decision for one job: regime posterior, prediction, rho-hat, weight, plan."""
    from solver.predictor import predict_remaining
    from solver.types import JobView
    store = _open(_state_dir(config_path, state_dir))
    summary, rows = status_rows(store)
    jobs = {j["job_id"]: j for j in store.jobs(include_finished=True)}
    info = store.round_info()
    actions = store.actions(job_id=job_id, limit=20)
    store.close()
    if job_id not in jobs:
        raise OneLineError(f"job {job_id} is not known to the controller")
    job, v = jobs[job_id], jobs[job_id]["view"] or {}
    row = next((r for r in rows if r["job_id"] == job_id), {})
    plan = ((info.get("decision") or {}).get("jobs") or {}).get(job_id, {})
    durations = {int(k): d for k, d in (v.get("epoch_duration_by_bs") or {}).items()}
    view = JobView(job_id=job_id, arrival_time=v.get("arrival") or 0, num_gpus=job["gpus"],
                   batch_size=v.get("batch_size") or 1, epochs_done=v.get("epochs_done") or 0,
                   total_epochs=v.get("total_epochs") or 1, samples_per_epoch=1, steps_done=0, total_steps=1,
                   throughput=1.0, epoch_duration_by_bs=durations, bs_history=tuple(v.get("bs_history") or ()),
                   min_batch_size=v.get("min_bs"), max_batch_size=v.get("max_bs"))
    pred = predict_remaining(view)
    out = {"job_id": job_id, "user": job["user"], "account": job["account"], "gpus": job["gpus"],
           "state": job["state"], "weight": v.get("weight"), "batch_size": v.get("batch_size"),
           "epochs_done": v.get("epochs_done"), "total_epochs": v.get("total_epochs"),
           "bs_history": v.get("bs_history"), "epoch_duration_by_bs": durations,
           "posterior": {"regimes": {str(k): x for k, x in pred.regimes.items()},
                         "alpha": {str(k): x for k, x in (pred.posterior_alpha or {}).items()}},
           "predicted_remaining_s": pred.remaining_s, "plan": plan, "reason": row.get("reason", "finished"),
           "planned_now": row.get("planned_now", False), "round": summary["round"],
           "recent_actions": [{k: a[k] for k in ("round", "verb", "value", "status", "error")} for a in actions]}
    if as_json:
        emit_json(out)
        return
    c = console()
    c.print(f"[bold]job {job_id}[/] ({job['user']}/{job['account']}, {job['gpus']} GPU(s)): {job['state']}; "
            f"{out['reason']}")
    c.print(f"  progress: {out['epochs_done']}/{out['total_epochs']} epochs, batch size {out['batch_size']}, "
            f"weight {out['weight']}")
    c.print("  regime posterior (expected remaining epochs per batch size): " +
            ", ".join(f"{k}: {x:.1f}" for k, x in out["posterior"]["regimes"].items()))
    c.print(f"  predicted remaining run time: {pred.remaining_s:.0f} s; rho-hat {plan.get('rho_hat', '-')}")
    c.print(f"  plan: {plan.get('rounds_planned', '-')} of the window's rounds, next in round "
            f"+{plan.get('next_planned_round_offset', '-')}, path {plan.get('path', '-')}")
    for a in out["recent_actions"]:
        c.print(f"  round {a['round']}: {a['verb']} {a['value'] if a['value'] != 'null' else ''} -> {a['status']}")


@click.command()
@click.argument("job_id")
@click.option("--store", "store_root", default=None, help="Event store root (default: the config's).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
@click.option("--json", "as_json", is_flag=True)
def events(job_id, store_root, config_path, as_json):
    """A job's events from the shared store, with rejected lines and their reasons."""
    from ..events.reader import EventReader
    from ..events.schema import is_valid_job_id
    if not is_valid_job_id(job_id):
        raise OneLineError(f"not a job id: {job_id!r}")
    root = store_root or (_state_dir(config_path, None).event_store if config_path else None)
    if not root:
        raise OneLineError("give --store DIR or --config FILE")
    res = EventReader(root).read_job(job_id)
    evs = [e.to_dict() for e in res.events]
    rejected = [{"file": f, "line": n, "reason": r} for f, n, r in res.rejected]
    if as_json:
        emit_json({"job_id": job_id, "events": evs, "rejected": rejected})
        return
    from rich.table import Table
    t = Table(title=f"events of job {job_id}")
    for col in ("time", "kind", "restart", "epoch", "bs", "detail"):
        t.add_column(col)
    for e in evs:
        detail = {k: v for k, v in e.items() if k not in ("v", "job", "ts", "kind", "restart", "epoch", "batch_size")}
        t.add_row(time.strftime("%H:%M:%S", time.localtime(e["ts"])), e["kind"], str(e.get("restart", "")),
                  str(e.get("epoch", "")), str(e.get("batch_size", "")), ", ".join(f"{k}={v}" for k, v in detail.items()))
    c = console()
    c.print(t)
    for r in rejected:
        c.print(f"[red]rejected[/] {r['file']}:{r['line']}: {r['reason']}")
