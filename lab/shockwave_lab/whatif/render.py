"""`shockwave whatif`'s outputs: the text tables (rich), the JSON document (`--json`, via emit_json) and the HTML
page with its figures, drawn with the report's machinery (report/plots.py `render`, `time_unit`; report/html.py's
style), self-contained (PNGs as data URIs, no scripts).  Every output is built from the same `compare.compare`
dictionary, so they agree; none holds a date or a wall time except the JSON's `timings`.
"""

from __future__ import annotations

import base64
import math
from html import escape

from shockwave_lab.whatif.compare import FIELDS, GROUPS

RUNS = (("slurm", "Slurm (site)"), ("default", "default"))
HEADERS = {
    "wait_mean_s": "mean wait",
    "wait_median_s": "median wait",
    "jct_mean_s": "mean JCT",
    "jct_median_s": "median JCT",
    "ftf_worst": "worst FTF",
    "ftf_p95": "p95 FTF",
    "gpu_share": "GPU share",
}
COLOURS = {"slurm": "#7f7f7f", "default": "#d62728"}  # the report's Slurm grey and Shockwave red


#: the columns of the jobs that gain or lose most, in the text tables and on the page
JOB_COLUMNS = ("job", "user", "account", "GPUs", "run time", "wait Slurm", "wait default", "JCT Slurm", "JCT default",
               "change")


def fmt(key: str, v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if key.endswith("_s"):
        return hms(v)
    if key == "gpu_share":
        return f"{100 * v:.1f}%"
    return f"{v:.2f}"


def hms(s: float) -> str:
    sign, s = ("-" if s < 0 else ""), abs(s)
    if s >= 3600:
        return f"{sign}{s / 3600:.1f}h"
    if s >= 60:
        return f"{sign}{s / 60:.1f}m"
    return f"{sign}{s:.0f}s"


def document(data: dict, meta: dict) -> dict:
    """The --json document: the inputs, the assumptions and the comparison (per-job changes included)."""
    return {"inputs": meta, **data}


# ------------------------------------------------------------------ text
def text(data: dict, meta: dict, console) -> None:
    from rich.table import Table

    console.print(
        f"whatif: {data['jobs']} jobs of {meta['history']} on {meta['cluster']['gpus']} GPUs "
        f"({meta['cluster']['summary']}); site: {meta['site']['summary']}"
    )
    for note in meta.get("notes", []):
        console.print(f"note: {note}")
    for g in ("overall", *GROUPS):
        t = Table(title=f"per {g}" if g != "overall" else "all jobs", title_justify="left")
        t.add_column(g if g != "overall" else "", justify="left")
        t.add_column("jobs", justify="right")
        t.add_column("policy", justify="left")
        for f in FIELDS:
            t.add_column(HEADERS[f], justify="right")
        rows = {"all": data["overall"]} if g == "overall" else data[f"by_{g}"]
        for name, by in rows.items():
            for i, (key, label) in enumerate(RUNS):
                st = by[key]
                t.add_row(
                    name if i == 0 else "", str(st["jobs"]) if i == 0 else "", label, *(fmt(f, st[f]) for f in FIELDS)
                )
        console.print(t)
    for what, title in (("gain", "jobs that gain most under the default"), ("lose", "jobs that lose most")):
        t = Table(title=title, title_justify="left")
        for c in JOB_COLUMNS:
            t.add_column(c, justify="left" if c in ("job", "user", "account") else "right")
        for x in data[what]:
            t.add_row(
                x["job"],
                x["user"],
                x["account"],
                str(x["gpus"]),
                hms(x["runtime_s"]),
                hms(x["wait_slurm_s"]),
                hms(x["wait_default_s"]),
                hms(x["jct_slurm_s"]),
                hms(x["jct_default_s"]),
                hms(x["jct_change_s"]),
            )
        console.print(t if data[what] else f"{title}: none")


# ------------------------------------------------------------------ figures
def _group_bars(data: dict, group: str):
    """Per group: mean wait, mean JCT, GPU share; Slurm beside the default."""
    from matplotlib.figure import Figure

    from shockwave_lab.report.plots import time_unit

    rows = data[f"by_{group}"]
    names = list(rows)[:40]
    panels = (("wait_mean_s", "mean wait"), ("jct_mean_s", "mean JCT"), ("gpu_share", "GPU share (contended)"))
    fig = Figure(figsize=(max(8.0, 0.5 * len(names) + 4), 7.5), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True)
    xs = range(len(names))
    for ax, (key, title) in zip(axes, panels, strict=True):
        top = max((rows[n][k][key] for n in names for k, _ in RUNS), default=1.0)
        scale, unit = time_unit(top) if key.endswith("_s") else (100.0, "%")
        for i, (k, label) in enumerate(RUNS):
            ax.bar(
                [x + (i - 0.5) * 0.4 for x in xs],
                [rows[n][k][key] * scale for n in names],
                0.4,
                color=COLOURS[k],
                label=label,
            )
        ax.set_ylabel(f"{title} ({unit})")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[-1].set_xticks(
        list(xs), names, rotation=45 if len(names) > 8 else 0, ha="right" if len(names) > 8 else "center", fontsize=8
    )
    fig.suptitle(f"Per {group}: the site's Slurm and the default")
    return fig


def _change_cdf(data: dict):
    """CDF over jobs of the JCT change (default - Slurm) and of each run's wait."""
    from matplotlib.figure import Figure

    from shockwave_lab.report.plots import time_unit

    per = data["per_job"]
    fig = Figure(figsize=(11, 4), layout="constrained")
    a, b = fig.subplots(1, 2)
    ch = sorted(x["jct_change_s"] for x in per)
    scale, unit = time_unit(max((abs(v) for v in ch), default=1.0))
    ys = [(i + 1) / len(ch) for i in range(len(ch))]
    a.step([v * scale for v in ch], ys, where="post", color=COLOURS["default"])
    a.axvline(0, color="#444", lw=0.8, ls=":")
    a.set_xlabel(f"JCT under the default - under Slurm ({unit}); left of 0: sooner")
    a.set_ylabel("share of jobs")
    a.grid(alpha=0.3)
    top = max((max(x["wait_slurm_s"], x["wait_default_s"]) for x in per), default=1.0)
    scale, unit = time_unit(top)
    for k, label in RUNS:
        w = sorted(x[f"wait_{k}_s"] for x in per)
        b.step([v * scale for v in w], ys, where="post", color=COLOURS[k], label=label)
    b.set_xlabel(f"wait: first start - submit ({unit})")
    b.legend(loc="lower right", fontsize=8)
    b.grid(alpha=0.3)
    fig.suptitle("Per job")
    return fig


def figures(data: dict) -> dict[str, bytes]:
    from shockwave_lab.report.plots import render

    return {
        "accounts": render(_group_bars(data, "account")),
        "users": render(_group_bars(data, "user")),
        "jobs": render(_change_cdf(data)),
    }


CAPTIONS = {
    "accounts": "Per account (at most 40 shown; every one is in the tables): mean wait (first start - submit), mean "
    "JCT (finish - submit) and share of the GPU-seconds held while some job waited, under the site's Slurm (grey) "
    "and the default (red).",
    "users": "The same per user.",
    "jobs": "Left: the distribution over jobs of the change of JCT if the default had scheduled the history. "
    "Right: the distributions of wait under each.",
}


# ------------------------------------------------------------------ HTML
def _table(rows: dict, first: str) -> str:
    head = "".join(f"<th>{escape(HEADERS[f])}</th>" for f in FIELDS)
    body = []
    for name, by in rows.items():
        for i, (k, label) in enumerate(RUNS):
            cells = "".join(f"<td>{escape(fmt(f, by[k][f]))}</td>" for f in FIELDS)
            lead = f'<td class="name" rowspan="2">{escape(name)}</td><td rowspan="2">{by[k]["jobs"]}</td>'
            lead = lead if i == 0 else ""
            body.append(f'<tr>{lead}<td class="name">{escape(label)}</td>{cells}</tr>')
    return (
        f'<table><tr><th class="name">{escape(first)}</th><th>jobs</th><th class="name">policy</th>{head}</tr>'
        + "".join(body)
        + "</table>"
    )


def _jobs(items: list) -> str:
    if not items:
        return '<p class="meta">none</p>'
    cols = JOB_COLUMNS
    rows = "".join(
        "<tr>"
        + "".join(f'<td class="name">{escape(str(x[k]))}</td>' for k in ("job", "user", "account"))
        + f"<td>{x['gpus']}</td>"
        + "".join(
            f"<td>{escape(hms(x[k]))}</td>"
            for k in ("runtime_s", "wait_slurm_s", "wait_default_s", "jct_slurm_s", "jct_default_s", "jct_change_s")
        )
        + "</tr>"
        for x in items
    )
    return "<table><tr>" + "".join(f"<th>{escape(c)}</th>" for c in cols) + "</tr>" + rows + "</table>"


def html(data: dict, meta: dict, pngs: dict[str, bytes]) -> str:
    from shockwave_lab.report.html import _CSS

    notes = "".join(f'<div class="warn">{escape(n)}</div>' for n in meta.get("notes", []))
    figs = "".join(
        f'<figure><img src="data:image/png;base64,{base64.b64encode(b).decode("ascii")}" alt="{escape(name)}">'
        f"<figcaption>{escape(CAPTIONS[name])}</figcaption></figure>"
        for name, b in pngs.items()
    )
    site = meta["site"]
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>What the default would have done</title><style>{_CSS}</style></head>
<body>
<h1>What the default would have done</h1>
<p class="meta">{data["jobs"]} jobs of <code>{escape(str(meta["history"]))}</code> ({escape(meta["imported"])}) on
{meta["cluster"]["gpus"]} GPUs ({escape(meta["cluster"]["summary"])}), simulated under the site's Slurm
({escape(site["summary"])}) and under the default policy <code>{escape(meta["default_policy"])}</code>.
Each job runs for its measured run time on its GPUs (docs/whatif.md).</p>
{notes}
<h2>All jobs</h2>{_table({"all": data["overall"]}, "")}
<h2>Per account</h2>{_table(data["by_account"], "account")}
<h2>Per user</h2>{_table(data["by_user"], "user")}
<h2>Jobs that gain most under the default</h2>{_jobs(data["gain"])}
<h2>Jobs that lose most</h2>{_jobs(data["lose"])}
<h2>Figures</h2>{figs}
</body>
</html>
"""
