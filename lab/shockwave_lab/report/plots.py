"""The report's figures, drawn with matplotlib's object API (no pyplot, no GUI: PNG via the Agg canvas).

Each figure function takes a `Merged` and returns a `matplotlib.figure.Figure`; `render` turns a figure
into PNG bytes.  Every policy keeps the same colour in every figure.
"""
from __future__ import annotations

import io
import math

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, NullFormatter

from solver.policies import policy_names

from shockwave_lab.report.load import Merged, known

UNFAIR_RHO = 1.05
_RHO_TICKS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
DPI = 100

# the i-th policy of the registry's order has the i-th colour, whichever policies a figure shows
_PALETTE = ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#17becf", "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
_LINESTYLES = ("-", "--", "-.", ":")


def colours(policies) -> dict[str, str]:
    """Registered policies keep their colour in every figure; others take the colours after theirs."""
    names = policy_names()
    out, spare = {}, 0
    for p in policies:
        cls = known(p)
        if cls is not None:
            out[p] = _PALETTE[names.index(cls.name) % len(_PALETTE)]
        else:
            out[p] = _PALETTE[(len(names) + spare) % len(_PALETTE)]
            spare += 1
    return out


def ours(policy: str) -> bool:
    """The default policy and the paper's Shockwave are drawn solid and thick."""
    cls = known(policy)
    return cls is not None and (cls.default or cls.reference_name == "shockwave")


def linestyle(policy: str, index: int) -> str:
    return "-" if ours(policy) else _LINESTYLES[index % len(_LINESTYLES)]


def render(fig: Figure) -> bytes:
    """PNG bytes of a figure (deterministic: no software/date metadata)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- bars
_PANELS = (  # key, title, y label ({unit} filled in for times), is a time
    ("makespan", "Makespan", "makespan ({unit})", True),
    ("avg_jct", "Average job completion time", "average JCT ({unit})", True),
    ("unfair_fraction", "Unfair fraction (jobs with ρ > 1.05)", "jobs with ρ > 1.05 (%)", False),
    ("worst_rho", "Worst finish-time fairness ρ", "worst ρ (JCT / fair-share JCT)", False),
)


def time_unit(max_seconds: float) -> tuple[float, str]:
    """Scale factor and unit name that keep times readable: hours, or minutes/seconds for short runs."""
    if max_seconds >= 2 * 3600:
        return 1 / 3600, "h"
    if max_seconds >= 120:
        return 1 / 60, "min"
    return 1.0, "s"


def _short(v: float) -> str:
    """Bar label: three significant digits, never scientific notation."""
    if not math.isfinite(v):
        return str(v)
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _bar(ax, x, v, width, style, label_colour):
    """One labelled bar; an infinite value (e.g. a job with zero exclusive run time) is marked, not drawn."""
    if math.isfinite(v):
        bars = ax.bar(x, v, width, **style)
        ax.bar_label(bars, [_short(v)], padding=2, fontsize=7.5, color=label_colour)
    else:
        ax.annotate("∞", xy=(x, 0), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                    fontsize=12, color=label_colour)


def metrics_figure(m: Merged) -> Figure:
    """2x2 bars: makespan, average JCT, unfair fraction, worst rho; hatched reference bars beside ours."""
    policies = m.policies
    col = colours(policies)
    has_ref = any(m.reference_for(p) for p in policies)
    width_in = max(10.0, 1.0 + 0.75 * len(policies) * (2 if has_ref else 1))
    fig = Figure(figsize=(min(width_in, 16.0), 8.0), layout="constrained")
    axes = fig.subplots(2, 2)
    bar_w = 0.4 if has_ref else 0.7
    for ax, (key, title, ylabel, is_time) in zip(axes.flat, _PANELS):
        scale, unit = 1.0, ""
        if is_time:
            values = [m.results[p][key] for p in policies]
            values += [m.reference_for(p)[key] for p in policies if m.reference_for(p) and key in m.reference_for(p)]
            scale, unit = time_unit(max([v for v in values if math.isfinite(v)] or [0]))
        for i, p in enumerate(policies):
            ref = m.reference_for(p) if has_ref else None
            paired = bool(ref) and key in ref
            x = i - bar_w / 2 if paired else i
            _bar(ax, x, m.results[p][key] * scale, bar_w, dict(color=col[p], edgecolor="black", linewidth=0.6),
                 "black")
            if paired:
                _bar(ax, i + bar_w / 2, ref[key] * scale, bar_w,
                     dict(color=col[p], alpha=0.35, hatch="///", edgecolor=col[p], linewidth=0.8), "#555555")
        if key == "worst_rho":
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel.format(unit=unit))
        ax.set_xticks(range(len(policies)))
        ax.set_xticklabels(policies, rotation=30, ha="right", fontsize=8.5)
        ax.set_xlim(-0.6, len(policies) - 0.4)
        ax.margins(y=0.12)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    handles = [Patch(facecolor="#9a9a9a", edgecolor="black", label="ours (simulated)")]
    if has_ref:
        handles.append(Patch(facecolor="#9a9a9a", alpha=0.35, hatch="///", edgecolor="#555555",
                             label="reference (Shockwave repository's shipped results)"))
    handles.append(Line2D([], [], color="black", linewidth=0.8, linestyle=":", label="ρ = 1 (fair share)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False, fontsize=9.5)
    fig.suptitle(_title("Per-policy metrics", m), fontsize=13)
    return fig


# ---------------------------------------------------------------------------------------------- CDFs
def _cdf(values):
    xs = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def cdf_figure(m: Merged) -> Figure:
    """CDFs of job completion time and of rho, one line per policy, with the unfairness threshold marked."""
    policies = [p for p in m.policies if m.results[p].get("jobs_detail")]
    col = colours(m.policies)
    fig = Figure(figsize=(14, 5.4), layout="constrained")
    ax_jct, ax_rho = fig.subplots(1, 2)
    min_rho, max_rho = 1.0, 1.0
    all_jct = [j.get("jct") for p in policies for j in m.results[p]["jobs_detail"]]
    scale, unit = time_unit(max([v for v in all_jct if isinstance(v, (int, float)) and math.isfinite(v)] or [0]))
    for i, p in enumerate(policies):
        jobs = m.results[p]["jobs_detail"]
        xs, ys = _cdf([j.get("jct") * scale for j in jobs if isinstance(j.get("jct"), (int, float))])
        style = dict(color=col[p], linestyle=linestyle(p, i), linewidth=2.2 if ours(p) else 1.5,
                     label=p, where="post", zorder=3 if ours(p) else 2)
        if xs:
            ax_jct.step([0.0] + xs, [0.0] + ys, **style)
        xs, ys = _cdf([j.get("rho") for j in jobs if isinstance(j.get("rho"), (int, float)) and j["rho"] > 0])
        if xs:
            ax_rho.step([xs[0]] + xs, [0.0] + ys, **style)
            min_rho, max_rho = min(min_rho, xs[0]), max(max_rho, xs[-1])
    ax_jct.set_title("Job completion time", fontsize=11)
    ax_jct.set_xlabel(f"JCT ({unit}, finish − arrival)")
    ax_rho.set_title("Finish-time fairness ρ", fontsize=11)
    ax_rho.set_xlabel("ρ = JCT / (exclusive run time × max(1, jobs / GPUs))")
    ax_rho.axvline(UNFAIR_RHO, color="black", linewidth=1.0, linestyle=":")
    ax_rho.annotate(f"ρ = {UNFAIR_RHO} (unfair beyond)", xy=(UNFAIR_RHO, 0.02), xytext=(4, 0),
                    textcoords="offset points", fontsize=8.5, ha="left", va="bottom")
    # log scale: spreads out the crowded region around rho = 1 and keeps long unfair tails visible
    ax_rho.set_xscale("log")
    ax_rho.xaxis.set_major_locator(FixedLocator([v for v in _RHO_TICKS if min_rho / 1.5 <= v <= max_rho * 1.5]))
    ax_rho.xaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
    ax_rho.xaxis.set_minor_formatter(NullFormatter())
    for ax in (ax_jct, ax_rho):
        ax.set_ylabel("fraction of jobs")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    ax_jct.set_xlim(left=0)
    if policies:
        fig.legend(*ax_jct.get_legend_handles_labels(), loc="outside right center", fontsize=9, frameon=False,
                   title="policy", title_fontsize=9.5)
    else:
        for ax in (ax_jct, ax_rho):
            ax.text(0.5, 0.5, "no per-job detail in the results", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(_title("CDFs of JCT and ρ", m), fontsize=13)
    return fig


# ---------------------------------------------------------------------------------------------- utilisation
def _steps(timeline, gpus):
    """Edges and values for a stairs plot; gaps between segments are drawn as idle."""
    edges, values = [], []
    for start, end, busy in sorted(timeline):
        if end <= start:
            continue
        if edges and start > edges[-1] + 1e-6:
            values.append(0.0)
            edges.append(start)
        elif edges and start < edges[-1]:
            start = edges[-1]
            if end <= start:
                continue
        if not edges:
            edges.append(start)
        values.append(busy / gpus)
        edges.append(end)
    return edges, values


def utilization_figure(m: Merged) -> Figure:
    """Busy GPUs / GPUs over time: one small panel per policy, shared axes, mean utilisation dashed."""
    policies = m.policies
    col = colours(policies)
    ncols = 2 if len(policies) > 1 else 1
    nrows = math.ceil(len(policies) / ncols)
    fig = Figure(figsize=(13, 1.0 + 2.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    ends = [seg[1] for p in policies for seg in (m.results[p].get("utilization_timeline") or [])]
    scale, unit = time_unit(max(ends or [0]))
    for ax, p in zip(axes.flat, policies):
        r = m.results[p]
        gpus = m.gpus_of(p)
        timeline = r.get("utilization_timeline") or []
        if gpus and timeline:
            edges, values = _steps(timeline, gpus)
            edges = [e * scale for e in edges]
            ax.stairs(values, edges, fill=True, color=col[p], alpha=0.3)
            ax.stairs(values, edges, color=col[p], linewidth=1.0)
        else:
            ax.text(0.5, 0.5, "no utilisation timeline", ha="center", va="center", transform=ax.transAxes)
        util = r.get("utilization")
        label = p
        if isinstance(util, (int, float)):
            ax.axhline(util, color="black", linestyle="--", linewidth=0.9)
            label += f"  (mean {util:.0%}"
            ref = m.reference_for(p)
            if ref and isinstance(ref.get("utilization"), (int, float)):
                label += f"; reference {ref['utilization']:.0%}"
            label += f", {gpus} GPUs)" if gpus else ")"
        ax.set_title(label, fontsize=10, loc="left")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0%}")
    for ax in axes.flat[len(policies):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("busy GPUs / GPUs")
    for c in range(ncols):
        visible = [ax for ax in axes[:, c] if ax.get_visible()]
        if visible:
            visible[-1].set_xlabel(f"simulated time ({unit})")
            visible[-1].xaxis.set_tick_params(labelbottom=True)
    fig.suptitle(_title("Cluster utilisation over time (dashed: mean over the makespan)", m), fontsize=13)
    return fig


FIGURES = {
    "metrics": (metrics_figure, "Per-policy metrics"),
    "cdf": (cdf_figure, "CDFs of job completion time and finish-time fairness ρ"),
    "utilization": (utilization_figure, "Cluster utilisation over time"),
}


def _title(what: str, m: Merged) -> str:
    jobs = {r.get("jobs") for r in m.results.values()}
    gpus = {m.gpus_of(p) for p in m.results}
    bits = []
    if len(jobs) == 1 and None not in jobs:
        bits.append(f"{jobs.pop()} jobs")
    if len(gpus) == 1 and None not in gpus:
        bits.append(f"{gpus.pop()} GPUs")
    return what + (f" — {', '.join(bits)}" if bits else "")


def render_all(m: Merged) -> dict[str, bytes]:
    """PNG bytes of every figure, by figure name (in FIGURES order)."""
    return {name: render(fn(m)) for name, (fn, _caption) in FIGURES.items()}


__all__ = ["FIGURES", "colours", "render", "render_all", "metrics_figure", "cdf_figure",
           "utilization_figure"]
