"""`shockwave status | explain JOB | events JOB`: read the controller's state read-only.

They never change the plan and work for any user, whether the controller runs (SQLite `mode=ro` WAL
readers) or is stopped (immutable read when the WAL files cannot be opened).  Both read the same per-round
snapshot (statusview.py): the exact views and decision the controller acted on.
"""

from __future__ import annotations

import time

import click

from slurm_shockwave import site
from slurm_shockwave.cli.common import OneLineError, console, emit_json, esc
from slurm_shockwave.cli.statusview import explain_job, fairshare_lines, fmt_clock, fmt_duration, fmt_eta
from slurm_shockwave.cli.statusview import status_rows as _status_rows

DEFAULT_STATE = site.DEFAULT_STATE_DIR


def _state_dir(config_path, state_dir):
    """The controller config that `status`, `explain` and `events` read: --config, else --state-dir, else the
    site's (site.py: $SHOCKWAVE_CONFIG or /etc/shockwave/config.toml), else the defaults."""
    if not config_path and not state_dir:
        config_path = site.config_path()
    if config_path:
        from slurm_shockwave.controller.config import ConfigError, load_config

        try:
            return load_config(config_path)
        except ConfigError as e:
            raise OneLineError(e.problems[0]) from None
    from slurm_shockwave.controller.config import ControllerConfig

    return ControllerConfig(state_dir=state_dir or DEFAULT_STATE)


def _open(cfg):
    from slurm_shockwave.journal import StateStore

    try:
        return StateStore(cfg.state_path, readonly=True)
    except FileNotFoundError as e:
        raise OneLineError(f"{e} (is the controller running? pass --state-dir or --config)") from None
    except PermissionError as e:
        raise OneLineError(str(e)) from None


def _minutes(seconds):
    return fmt_duration(seconds)


def status_rows(store, include_finished: bool = False):
    return _status_rows(store, include_finished)


def _header(s: dict) -> str:
    unm = (
        f" ({s['gpus_busy_managed']} managed, {s['gpus_unmanaged']} unmanaged in {s['unmanaged_running']} job(s))"
        if s["gpus_unmanaged"]
        else ""
    )
    pend = (
        f"; {s['unmanaged_pending']} unmanaged job(s) pending ({s['unmanaged_pending_gpus']} GPUs)"
        if s["unmanaged_pending"]
        else ""
    )
    age = f", snapshot {s['snapshot_age_s']:.0f} s old" if s["snapshot_age_s"] is not None else ""
    p = s.get("preemptions") or {}
    pre = (
        f"; preemptions {p.get('preempted', 0)} (kept running {p.get('kept', 0)}, wasted {p.get('wasted', 0)})"
        if p
        else ""
    )
    return (
        f"round {s['round']} ({s['round_status']}{age}), {s['gpus_busy']}/{s['gpus']} GPUs busy{unm}, "
        f"{s['gpus_planned']} planned of {s['gpus_managed_capacity']} for managed jobs{pend}; last solve "
        f"{(s['last_solve_seconds'] or 0):.2f} s [{s['solver_path']}], mode {s['mode']}"
        f"{' (dry run)' if s['dry_run'] else ''}, policy {s['policy']}{pre}"
    )


SORT_KEYS = [
    "job_id",
    "user",
    "gpus",
    "state",
    "rho_hat",
    "predicted_remaining_s",
    "next_planned_round",
    "position",
    "expected_start",
]


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Controller config (to find its state directory).",
)
@click.option("--state-dir", default=None, help=f"Controller state directory (default {DEFAULT_STATE}).")
@click.option("--user", default=None, help="Only this user's jobs.")
@click.option("--me", is_flag=True, help="Only my jobs (like squeue --me).")
@click.option(
    "--state",
    "state_filter",
    default=None,
    type=click.Choice(["PENDING", "RUNNING", "HELD", "QUARANTINED"], case_sensitive=False),
    help="Only jobs in this state.",
)
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs (final state, ended early).")
@click.option("--sort", "sort_key", default="job_id", show_default=True, type=click.Choice(SORT_KEYS))
@click.option(
    "--watch",
    "watch",
    default=None,
    type=click.FloatRange(1, 3600),
    help="Redraw every N seconds until interrupted (like watch squeue).",
)
@click.option("--json", "as_json", is_flag=True)
def status(config_path, state_dir, user, me, state_filter, show_all, sort_key, watch, as_json):
    """Cluster summary and one row per managed job: why it waits, its place in the queue, when it starts."""
    cfg = _state_dir(config_path, state_dir)
    if me:
        import getpass

        user = getpass.getuser()
    while True:
        store = _open(cfg)
        try:
            summary, rows = status_rows(store, include_finished=show_all)
        finally:
            store.close()
        if user:
            rows = [r for r in rows if r["user"] == user]
        if state_filter:
            rows = [r for r in rows if r["state"].upper() == state_filter.upper()]
        rows.sort(
            key=lambda r: (r.get(sort_key) is None, r.get(sort_key) if sort_key != "job_id" else int(r["job_id"]))
        )
        if as_json:
            emit_json({"cluster": summary, "jobs": rows})
        else:
            if watch:
                click.clear()
            _print_status(summary, rows)
        if not watch:
            return
        try:
            time.sleep(watch)
        except KeyboardInterrupt:
            return


def _print_status(summary, rows):
    from rich.table import Table

    c = console()
    c.print(esc(_header(summary)))
    for w in summary["warnings"]:
        c.print(f"[bold red]warning:[/] {esc(w)}")
    for line in fairshare_lines(summary.get("fairshare")):  # per account and user (issue 24)
        c.print(esc(line))
    typed = bool(summary.get("gpu_types"))  # a type column only on a cluster of several GPU types
    t = Table()
    for col in (
        "job",
        "user",
        "GPUs",
        *(("type",) if typed else ()),
        "state",
        "pos",
        "bs",
        "epochs",
        "remaining",
        "start",
        "rho^",
        "reason",
    ):
        t.add_column(col)
    for r in rows:
        epochs = f"{r['epochs_done']}/{r['total_epochs']}" if r.get("total_epochs") else "-"
        start = "running" if r["state"] == "RUNNING" and not r.get("finished") else fmt_clock(r.get("expected_start"))
        text = esc(r["reason"]) + "".join(f" [yellow](! {esc(w)})[/]" for w in r.get("warnings") or ())
        kind = (
            (f"{esc(r['gpu_type'])} ({esc(r.get('gpu_type_by') or '?')})" if r.get("gpu_type") else "-",)
            if typed
            else ()
        )
        t.add_row(
            esc(r["job_id"]),
            esc(r["user"]),
            str(r["gpus"]) + (f" (asked {r['gpus_base']})" if r.get("gpus_base") else ""),
            *kind,
            esc(r["state"]),
            str(r.get("position") or "-"),
            str(r.get("batch_size") or "-"),
            epochs,
            fmt_eta(r.get("predicted_remaining_s"), r.get("eta_confidence")) if not r.get("finished") else "-",
            start,
            f"{r['rho_hat']:.2f}" if r.get("rho_hat") is not None else "-",
            text,
        )
    c.print(t)


@click.command()
@click.argument("job_id")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
@click.option("--state-dir", default=None)
@click.option("--json", "as_json", is_flag=True)
def explain(job_id, config_path, state_dir, as_json):
    """The inputs and the decision for one job, exactly as the controller used them this round."""
    store = _open(_state_dir(config_path, state_dir))
    try:
        out = explain_job(store, job_id)
    finally:
        store.close()
    if out is None:
        raise OneLineError(f"job {job_id} is not known to the controller")
    if as_json:
        emit_json(out)
        return
    c = console()
    # every line is plain text (user names, reasons, paths): escaped, never read as markup
    lines = [f"job {job_id} ({out['user']}/{out['account']}, {out['gpus']} GPU(s)): {out['state']}; {out['reason']}"]
    lines += [f"  warning: {w}" for w in out["cluster_warnings"] + (out.get("warnings") or [])]
    if out.get("total_epochs"):
        lines.append(
            f"  progress: {out['epochs_done']}/{out['total_epochs']} epochs, batch size "
            f"{out.get('batch_size')}, weight {out.get('weight')}"
        )
    if out.get("gpu_speeds"):
        lines.append(f"  speed per GPU type (fastest = 1): {out['gpu_speeds']}")
    if out["posterior"]:
        lines.append(
            "  regime posterior (expected remaining epochs per batch size): "
            + ", ".join(f"{k}: {x:.1f}" for k, x in out["posterior"]["regimes"].items())
        )
    if not out.get("finished") and out.get("predicted_remaining_s") is not None:
        lines.append(
            f"  predicted remaining run time: {out['predicted_remaining_s']:.0f} s "
            f"({fmt_eta(out['predicted_remaining_s'], out.get('eta_confidence'))}"
            + (f"; from {out['eta_detail']})" if out.get("eta_detail") else ")")
        )
        lines.append(
            f"  rho-hat {out['rho_hat'] if out.get('rho_hat') is not None else '-'}; expected start "
            f"{fmt_clock(out.get('expected_start'))}; queue position {out.get('position') or '-'}"
        )
        plan = out["plan"]
        lines.append(
            f"  plan: {plan.get('rounds_planned', '-')} of the window's rounds, next in round "
            f"+{plan.get('next_offset', '-')}, path {plan.get('path', '-')}"
        )
        if plan.get("rule"):
            lines.append(f"  placed this round by: {plan['rule']} ({plan.get('rule_text') or ''})")
        if out.get("preempt_cost_s") is not None:
            lines.append(
                f"  preemption cost: {out['preempt_cost_s']:.0f} s (checkpoint + requeue + restart, "
                "measured from its events)"
            )
        if plan.get("critical_path"):
            lines.append("  priority: on the critical path (its remaining time sets the makespan if it waits)")
        elif plan.get("fair_finish_in_s") is not None:
            lines.append(
                f"  priority: fair-finish deadline in {plan['fair_finish_in_s']:.0f} s (earliest first; the "
                "default's is its latest fair start: after it, it would finish less fairly than the worst job now)"
            )
        held = out.get("contention")
        if held and out.get("state") != "RUNNING" and held["gpus_asked"] > held["gpus"]:
            until = fmt_clock(out.get("expected_start")) if out.get("expected_start") else "not in the planned window"
            lines.append(
                f"  held back: {held['gpus_asked']} GPUs asked of {held['gpus']}; {held['ahead']} jobs come first by "
                f"fair-finish deadline, {held['ahead_arrived_later']} of them arrived after it (a burst); "
                f"expected start {until}"
            )
    for a in out["recent_actions"]:
        lines.append(f"  round {a['round']}: {a['verb']} {a['value'] if a['value'] != 'null' else ''} -> {a['status']}")
    for line in lines:
        c.print(esc(line))


@click.command()
@click.argument("job_id")
@click.option(
    "--store", "store_root", default=None, help="Event store root (default: the config's, found as `status` finds it)."
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
@click.option("--json", "as_json", is_flag=True)
def events(job_id, store_root, config_path, as_json):
    """A job's events from the shared store, with rejected lines and their reasons."""
    from slurm_shockwave.events.reader import EventReader
    from slurm_shockwave.events.schema import is_valid_job_id

    if not is_valid_job_id(job_id):
        raise OneLineError(f"not a job id: {job_id!r}")
    root = store_root or _state_dir(config_path, None).event_store
    res = EventReader(root).read_job(job_id)
    evs = [e.to_dict() for e in res.events]
    rejected = [{"file": f, "line": n, "reason": r} for f, n, r in res.rejected]
    if not evs and not rejected:  # an empty table with rc 0 read as "fine": say so, rc 1
        msg = (
            f"no events for job {job_id} in {root}: it has not started under shockwave-run yet, or it reports "
            "to another store (its SHOCKWAVE_STORE)"
        )
        if as_json:
            emit_json({"job_id": job_id, "events": [], "rejected": [], "error": msg})
        else:
            click.echo(msg, err=True)
        raise SystemExit(1)
    if as_json:
        emit_json({"job_id": job_id, "events": evs, "rejected": rejected})
        return
    from rich.table import Table

    t = Table(title=f"events of job {job_id}")
    for col in ("time", "kind", "restart", "epoch", "bs", "detail"):
        t.add_column(col)
    for e in evs:
        detail = {k: v for k, v in e.items() if k not in ("v", "job", "ts", "kind", "restart", "epoch", "batch_size")}
        t.add_row(
            time.strftime("%H:%M:%S", time.localtime(e["ts"])),
            esc(e["kind"]),
            str(e.get("restart", "")),
            str(e.get("epoch", "")),
            str(e.get("batch_size", "")),
            esc(", ".join(f"{k}={v}" for k, v in detail.items())),
        )
    c = console()
    c.print(t)
    for r in rejected:
        c.print(f"[red]rejected[/] {esc(r['file'])}:{r['line']}: {esc(r['reason'])}")
