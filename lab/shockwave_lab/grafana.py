"""The Grafana dashboard of the controller's Prometheus metrics (docs/grafana/), built with grafana-foundation-sdk.

`build_dashboard()` returns the dashboard as a dict, `dashboard_json()` as the text committed in
docs/grafana/shockwave-dashboard.json (`shockwave grafana -o FILE` writes it; lab/tests/test_grafana.py checks that
the committed file is what this module builds and that every metric a panel plots is one the controller exports).

Every panel reads the metrics of slurm_shockwave/controller/metrics_server.py through the `datasource` variable
(a Prometheus data source chosen on import).  The row "Accounts and users" plots per-account and per-user metrics
(`OWNER_METRICS`); it and the `account`/`user` variables are built only when the controller exports those metrics,
so the dashboard never plots a series that does not exist (`missing_owner_metrics()` names what is missing).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import bargauge, stat, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, StackingConfig, VizLegendOptions
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DatasourceVariable,
    IntervalVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BarGaugeDisplayMode,
    LegendDisplayMode,
    LegendPlacement,
    StackingMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

UID = "shockwave-controller"
TITLE = "Shockwave controller"
#: every panel and variable queries the data source picked in this variable
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
#: the window of the increase()/quantile panels (a variable: rounds are minutes apart, a scrape interval is too short)
WINDOWS = ("30m", "1h", "6h", "1d", "7d")
#: per account and user series the "Accounts and users" row plots (docs/grafana/README.md proposes them):
#: GPUs the plan gives the user's jobs this round, GPU-rounds placed for them since start, and the worst
#: predicted finish-time fairness (rho-hat) of their active jobs this round; labels account, user
OWNER_METRICS = ("shockwave_user_gpus_planned", "shockwave_user_gpu_rounds_total", "shockwave_user_rho_hat_max")
OWNER = '{account=~"$account", user=~"$user"}'

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
}


def exported_series() -> set[str]:
    """Names of the series a Prometheus server stores from the controller's endpoint: each metric family of a fresh
    controller registry with the suffixes of its type (a counter `x` is `x_total`, a histogram `x_bucket`...)."""
    from slurm_shockwave.controller.metrics_server import ControllerMetrics

    names = set()
    for family in ControllerMetrics().registry.collect():
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
    return names


def missing_owner_metrics(series: set[str] | None = None) -> list[str]:
    """The per-account/per-user metrics (`OWNER_METRICS`) the controller does not export."""
    series = exported_series() if series is None else series
    return [m for m in OWNER_METRICS if m not in series]


# ---------------------------------------------------------------------------------------------------- panels
def _q(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> Dataquery:
    q = Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE).legend_format(legend or "__auto")
    return q.instant() if instant else q.range()


def _thresholds(*steps: tuple[float | None, str]) -> ThresholdsConfig:
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in steps])


def _series(title: str, desc: str, unit: str, *targets: Dataquery, w: int = 12, stack: bool = False) -> Builder[Any]:
    p = timeseries.Panel().title(title).description(desc).unit(unit).datasource(DATASOURCE).height(8).span(w)
    p = p.legend(VizLegendOptions().display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM)
                 .show_legend(True))  # fmt: skip
    if stack:
        p = p.stacking(StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(60)
    for t in targets:
        p = p.with_target(t)
    return p


def _stat(title: str, desc: str, unit: str, target: Dataquery, thresholds: ThresholdsConfig) -> Builder[Any]:
    return (
        stat.Panel().title(title).description(desc).unit(unit).datasource(DATASOURCE).height(4).span(4)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])).thresholds(thresholds).with_target(target)
    )  # fmt: skip


def _bars(title: str, desc: str, unit: str, target: Dataquery, w: int = 12) -> Builder[Any]:
    return (
        bargauge.Panel().title(title).description(desc).unit(unit).datasource(DATASOURCE).height(8).span(w)
        .display_mode(BarGaugeDisplayMode.GRADIENT).orientation(VizOrientation.HORIZONTAL)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])).min(0).with_target(target)
    )  # fmt: skip


def _quantile(q: float, metric: str, extra: str = "") -> str:
    return f"histogram_quantile({q}, sum by (le) (increase({metric}_bucket{extra}[$window])))"


RED, GREEN, ORANGE = "red", "green", "orange"


def _health() -> list[Builder[Any]]:
    return [
        _stat("Controller up", "1 while rounds complete; 0 while Slurm is unreachable or the state is not writable "
              "(alert on shockwave_up == 0).", "none", _q("shockwave_up", instant=True),
              _thresholds((None, RED), (1, GREEN))),
        _stat("Enacting", "1 when decisions are enacted; 0 in dry run (shadow mode) or while the state is not "
              "writable.", "none", _q("shockwave_enacting", instant=True), _thresholds((None, ORANGE), (1, GREEN))),
        _stat("Since the last round", "Seconds since a round last completed; alert when it exceeds three round "
              "lengths (stuck controller).", "s",
              _q("time() - shockwave_last_round_completed_timestamp_seconds", instant=True),
              _thresholds((None, GREEN), (360, ORANGE), (1800, RED))),
        _stat("Round", "Index of the last completed round.", "none", _q("shockwave_round", instant=True),
              _thresholds((None, GREEN))),
        _stat("Wasted preemptions", "Preemptions that did not pay in the window (at most one round of work left, or "
              "restarted before the next round boundary); target 0.", "none",
              _q('sum(increase(shockwave_preemptions_total{outcome="wasted"}[$window])) or vector(0)', instant=True),
              _thresholds((None, GREEN), (1, RED))),
        _stat("Enactment errors", "Slurm actions (hold, release, signal, priority...) that failed in the window.",
              "none", _q("sum(increase(shockwave_enact_errors_total[$window])) or vector(0)", instant=True),
              _thresholds((None, GREEN), (1, RED))),
    ]  # fmt: skip


def _rounds() -> list[Builder[Any]]:
    return [
        _series("Round time", "Mean time between completed rounds over the window (elapsed time of the completion "
                "timestamps over the rounds completed), the configured round length, and the time since the last "
                "round. Rounds start early when a job ends and frees GPUs while another waits.", "s",
                _q("delta(shockwave_last_round_completed_timestamp_seconds[$window]) / delta(shockwave_round[$window])",
                   "mean round time"),
                _q("shockwave_round_length_seconds", "configured round length", "B"),
                _q("time() - shockwave_last_round_completed_timestamp_seconds", "since the last round", "C")),
        _series("Decision time", "Policy decision time per round (solver), quantiles over the window.", "s",
                _q(_quantile(0.5, "shockwave_solve_seconds"), "p50"),
                _q(_quantile(0.95, "shockwave_solve_seconds"), "p95", "B"),
                _q("increase(shockwave_solve_seconds_sum[$window]) / increase(shockwave_solve_seconds_count[$window])",
                   "mean", "C")),
        _series("Rounds by outcome", "Round attempts in the window: done, slurm_error, state_error; and rounds that "
                "started before their boundary (early).", "none",
                _q("sum by (status) (increase(shockwave_rounds_total[$window]))", "{{status}}"),
                _q("increase(shockwave_early_rounds_total[$window])", "started early", "B")),
        _series("Fallbacks", "Rounds decided by a fallback in the window (loop: the policy failed or ran out of time; "
                "solver: the solver's own fallback).", "none",
                _q("sum by (kind) (increase(shockwave_solver_fallbacks_total[$window]))", "{{kind}}")),
    ]  # fmt: skip


def _gpus() -> list[Builder[Any]]:
    return [
        _series("GPUs", "GPUs in the managed partition, GPUs the plan gives jobs this round, GPUs held by running "
                "managed jobs.", "none",
                _q("shockwave_gpus_capacity", "capacity"), _q("shockwave_gpus_planned", "planned", "B"),
                _q("shockwave_gpus_used", "used", "C")),
        _series("Managed jobs", "Managed jobs by state (running: ran the last round; pending).", "none",
                _q("shockwave_jobs", "{{state}}"), stack=True),
    ]  # fmt: skip


def _fairness() -> list[Builder[Any]]:
    rho = "shockwave_rho_hat"
    return [
        _series("Finish-time fairness (rho-hat)", "Predicted finish-time fairness of the active jobs, one "
                "observation per job and round, quantiles over the window: rho = finish time shared / finish "
                "time alone on 1/N of the cluster; above 1 a job finishes later than its fair share would let it.",
                "none", _q(_quantile(0.5, rho), "p50"), _q(_quantile(0.9, rho), "p90", "B"),
                _q(_quantile(0.99, rho), "p99", "C")),
        _series("Jobs predicted unfair", "Share of the job-rounds of the window whose rho-hat exceeded 1.1 (a bucket "
                "bound of shockwave_rho_hat).", "percentunit",
                _q(f'1 - sum(increase({rho}_bucket{{le="1.1"}}[$window])) / sum(increase({rho}_count[$window]))',
                   "rho-hat > 1.1")),
    ]  # fmt: skip


def _rules() -> list[Builder[Any]]:
    return [
        _series("Rule shares this round", "Share of each round's planned GPUs placed by each rule (market, "
                "critical_path, deadline, finishing, backfill, guard, fallback, kept, policy).", "percentunit",
                _q("shockwave_round_rule_share > 0", "{{rule}}"), stack=True),
        _bars("Rule shares over the window", "GPU-rounds placed by each rule in the window, as a share of all.",
              "percentunit", _q("sum by (rule) (increase(shockwave_gpu_rounds_total[$window])) / scalar(sum("
                                "increase(shockwave_gpu_rounds_total[$window])))", "{{rule}}", instant=True)),
    ]  # fmt: skip


def _preemptions() -> list[Builder[Any]]:
    return [
        _series("Preemptions", "Preemptions by outcome in the window: preempted (checkpoint signal sent), kept (the "
                "gate kept a job running: preempting it would not pay), wasted and why (wasted_last_round, "
                "wasted_restarted_early; each wasted one is also counted as wasted).", "none",
                _q("sum by (outcome) (increase(shockwave_preemptions_total[$window]))", "{{outcome}}")),
        _series("Enactment actions", "Slurm actions issued (and failed) by verb in the window.", "none",
                _q("sum by (verb) (increase(shockwave_enact_actions_total[$window]))", "{{verb}}"),
                _q("sum by (verb) (increase(shockwave_enact_errors_total[$window]))", "{{verb}} failed", "B")),
        _series("GPU count changes and type moves", "Elastic jobs' GPU count changes by outcome in the window "
                "(started, done, wasted: changed again before it ran a round at its count; target wasted 0), and "
                "running jobs moved to a faster GPU type, from and to.", "none",
                _q("sum by (outcome) (increase(shockwave_resizes_total[$window]))", "count change {{outcome}}"),
                _q("sum by (from_type, to_type) (increase(shockwave_type_moves_total[$window]))",
                   "{{from_type}} -> {{to_type}}", "B")),
    ]  # fmt: skip


def _plumbing() -> list[Builder[Any]]:
    return [
        _series("Slurm reads", "Latency of reading the Slurm queue (p95 over the window) and failed reads.", "s",
                _q(_quantile(0.95, "shockwave_slurm_read_seconds"), "read p95"),
                _q("increase(shockwave_slurm_failures_total[$window])", "failed reads", "B"), w=8),
        _series("State and config", "Rounds abandoned because the state could not be written, SIGHUP reloads by "
                "result (ok, rejected), in the window.", "none",
                _q("increase(shockwave_state_write_failures_total[$window])", "state write failures"),
                _q("sum by (result) (increase(shockwave_config_reloads_total[$window]))", "reload {{result}}", "B"),
                w=8),
        _series("Event lines", "Event lines of the jobs accepted and rejected (by reason) in the window.", "none",
                _q("increase(shockwave_event_lines_accepted_total[$window])", "accepted"),
                _q("sum by (reason) (increase(shockwave_event_lines_rejected_total[$window]))", "rejected {{reason}}",
                   "B"), w=8),
    ]  # fmt: skip


def _owners() -> list[Builder[Any]]:
    planned, rounds, rho = OWNER_METRICS
    by = "sum by (account, user)"
    return [
        _series("GPU share by user (this round)", "Share of this round's planned GPUs that the plan gives each "
                "user's jobs (per account).", "percentunit",
                _q(f"{by} ({planned}{OWNER}) / scalar(sum({planned}))", "{{account}}/{{user}}"), stack=True),
        _bars("GPU share by account over the window", "GPU-rounds placed for each account's jobs in the window, as "
              "a share of all.", "percentunit",
              _q(f"sum by (account) (increase({rounds}{OWNER}[$window])) / scalar(sum(increase({rounds}[$window])))",
                 "{{account}}", instant=True)),
        _series("Finish-time fairness by user", "The worst predicted finish-time fairness (rho-hat) of each user's "
                "active jobs, per round; above 1 the user's job finishes later than its fair share would let it.",
                "none", _q(f"max by (account, user) ({rho}{OWNER})", "{{account}}/{{user}}")),
        _bars("GPU share by user over the window", "GPU-rounds placed for each user's jobs in the window, as a share "
              "of all.", "percentunit",
              _q(f"{by} (increase({rounds}{OWNER}[$window])) / scalar(sum(increase({rounds}[$window])))",
                 "{{account}}/{{user}}", instant=True)),
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------------- dashboard
def _variables(owners: bool) -> list[Builder[Any]]:
    window = (
        IntervalVariable("window").label("Window").description("Window of the increase and quantile panels")
        .values(",".join(WINDOWS)).current(VariableOption(selected=True, text="1h", value="1h"))
    )  # fmt: skip
    out: list[Builder[Any]] = [DatasourceVariable("datasource").label("Data source").type("prometheus"), window]
    if owners:
        planned = OWNER_METRICS[0]
        for name, query in (("account", f"label_values({planned}, account)"),
                            ("user", f'label_values({planned}{{account=~"$account"}}, user)')):  # fmt: skip
            out.append(
                QueryVariable(name).label(name.capitalize()).datasource(DATASOURCE).query(query)
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
                .multi(True).include_all(True).all_value(".*")
                .current(VariableOption(selected=True, text="All", value="$__all"))
            )  # fmt: skip
    return out


def build_dashboard(owners: bool | None = None) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model.  `owners`: build the "Accounts and users" row and the account/user
    variables; None (the default): when the controller exports `OWNER_METRICS`."""
    if owners is None:
        owners = not missing_owner_metrics()
    d = (
        Dashboard(TITLE).uid(UID).tags(["shockwave", "slurm", "gpu"]).editable().refresh("1m")
        .time("now-6h", "now").timezone("browser").tooltip(DashboardCursorSync.CROSSHAIR)
        .description("Rounds, GPU shares, finish-time fairness, rules and preemptions of the shockwave controller "
                     "(generated by shockwave_lab/grafana.py: `shockwave grafana -o FILE`)")
    )  # fmt: skip
    for v in _variables(owners):
        d = d.with_variable(v)
    rows = [
        ("Health", _health()),
        ("Rounds", _rounds()),
        ("GPUs and jobs", _gpus()),
        ("Finish-time fairness", _fairness()),
        ("Rules: what placed the GPUs", _rules()),
        ("Preemptions and enactment", _preemptions()),
        ("Slurm, state and events", _plumbing()),
    ]
    if owners:
        rows.insert(3, ("Accounts and users", _owners()))
    panel_id = 0
    for title, panels in rows:
        panel_id += 1
        d = d.with_row(Row(title).id(panel_id))
        for p in panels:
            panel_id += 1
            d = d.with_panel(p.id(panel_id))  # type: ignore[attr-defined]
    out: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(d.build()))
    return out


def dashboard_json(owners: bool | None = None) -> str:
    """The dashboard as the text committed in docs/grafana/shockwave-dashboard.json."""
    return json.dumps(build_dashboard(owners), indent=2, sort_keys=True) + "\n"
