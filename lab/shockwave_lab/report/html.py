"""A self-contained HTML page: inline CSS, figures embedded as base64 PNG data URIs, no scripts, no remote assets."""
from __future__ import annotations

import base64
import datetime as _dt
import math
from html import escape
from pathlib import PurePath

from slurm_shockwave import __version__
from shockwave_lab.report.load import Merged
from shockwave_lab.report.plots import FIGURES

# (key, header, format, lower is better?)  None: not ranked.
COLUMNS = (
    ("jobs", "jobs", "{:,.0f}", None),
    ("makespan", "makespan (s)", "{:,.0f}", True),
    ("avg_jct", "avg JCT (s)", "{:,.0f}", True),
    ("worst_rho", "worst ρ", "{:.3f}", True),
    ("unfair_fraction", "unfair % (ρ > 1.05)", "{:.2f}", True),
    ("unfair_fraction_1_1", "unfair % (ρ > 1.1)", "{:.2f}", True),
    ("ftf_dynamic_worst", "worst dynamic FTF", "{:.3f}", True),
    ("ftf_dynamic_p95", "p95 dynamic FTF", "{:.3f}", True),
    ("ftf_dynamic_unfair", "unfair % (dynamic FTF > 1.05)", "{:.2f}", True),
    ("utilization", "utilisation", "{:.3f}", False),
    ("rounds", "rounds", "{:,.0f}", None),
    ("fallbacks", "fallbacks", "{:,.0f}", None),
    ("wall_seconds", "wall (s)", "{:.1f}", None),
)

CAPTIONS = {
    "metrics": "Makespan and average job completion time (hours), the share of jobs whose finish-time fairness "
               "ρ exceeds 1.05, and the worst ρ, per policy. Solid bars are this simulator; hatched, lighter bars "
               "next to them are the reference's shipped results for the same policy (when the workload is the "
               "bundled 120-job trace on 32 GPUs). Lower is better in every panel.",
    "cdf": "Cumulative distributions over jobs of the job completion time (finish − arrival, hours) and of ρ. "
           "Jobs right of the dotted line at ρ = 1.05 count as unfairly treated; a curve that reaches 1.0 "
           "left of the line means every job got at least its fair share.",
    "utilization": "Busy GPUs as a share of the cluster over simulated time, per scheduling round, one panel per "
                   "policy (shared axes). The dashed line is the mean utilisation over the makespan "
                   "(busy GPU-seconds / (GPUs × makespan)). A long low tail is a few stragglers holding up the "
                   "makespan.",
}

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1320px;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta { color: #555; font-size: 0.92em; } .meta code { font-size: 0.95em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.6em 0; }
th, td { padding: 0.28em 0.7em; border-bottom: 1px solid #e3e3e3; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; position: sticky; top: 0; } td.name, th.name { text-align: left; }
tr.ref td { color: #777; font-style: italic; background: #fafafa; } td.best { font-weight: bold; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.4em; vertical-align: baseline; }
figure { margin: 1em 0 2em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.92em; max-width: 70em; }
.warn { background: #fff6e0; border-left: 4px solid #e0a800; padding: 0.4em 0.8em; margin: 0.3em 0; }
"""


def _fmt(value, fmt: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return escape(str(value))
    return fmt.format(value)


def metrics_table(m: Merged, colours: dict) -> str:
    rows = m.table()
    ours = [r for r in rows if r["kind"] == "ours"]
    best = {}
    for key, _h, _f, lower in COLUMNS:
        vals = [r[key] for r in ours if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        if lower is not None and len(vals) > 1:
            best[key] = min(vals) if lower else max(vals)
    out = ['<table class="metrics">', "<thead><tr>", '<th class="name">policy</th>', '<th class="name">row</th>']
    out += [f"<th>{escape(h)}</th>" for _k, h, _f, _l in COLUMNS]
    out += ['<th class="name">source</th>', "</tr></thead>", "<tbody>"]
    for r in rows:
        is_ref = r["kind"] == "reference"
        colour = colours.get(r["policy"])
        swatch = f'<span class="swatch" style="background:{colour}"></span>' if colour and not is_ref else ""
        name = escape(r["policy"]) + (f" ({escape(r['label'])})" if r.get("label", r["policy"]) != r["policy"] else "")
        if is_ref:
            label = "reference" if r["policy"] in m.results else "reference only (not simulated)"
            source = f"reference: {escape(r['reference_name'])}"
        else:
            label = "ours"
            source = f'<span title="{escape(r["source"])}">{escape(PurePath(r["source"]).name)}</span>'
        cells = []
        for key, _h, fmt, _lower in COLUMNS:
            v = r.get(key)
            cls = ' class="best"' if not is_ref and key in best and v == best[key] else ""
            cells.append(f"<td{cls}>{_fmt(v, fmt)}</td>")
        out.append(f'<tr class="{"ref" if is_ref else "ours"}"><td class="name">{swatch}{name}</td>'
                   f'<td class="name">{label}</td>{"".join(cells)}<td class="name">{source}</td></tr>')
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


def users_section(m: Merged) -> str:
    """Per user (and per account, when they differ): the GPU share while every user had an active job and the
    worst dynamic FTF, per policy; empty when no result has more than one user (slurm_shockwave/metrics.py)."""
    out = []
    for key, fair_key, worst, who in (("user_gpu_share", "user_fair_share", "user_ftf_dynamic_worst", "user"),
                                      ("account_gpu_share", "account_fair_share", "account_ftf_dynamic_worst",
                                       "account")):
        names = sorted({u for r in m.results.values() for u in (r.get(key) or {})})
        if not names or (who == "account" and all(r.get(key) == r.get("user_gpu_share") for r in m.results.values())):
            continue
        rows = []
        for p in m.policies:
            r = m.results[p]
            share, fair, bad = r.get(key) or {}, r.get(fair_key) or {}, r.get(worst) or {}
            cells = "".join(f"<td>{_fmt(100 * share[u], '{:.1f}%') if u in share else '-'}"
                            f" ({_fmt(100 * fair.get(u, 0), '{:.1f}%')}) / {_fmt(bad.get(u), '{:.2f}') or '-'}</td>"
                            for u in names)
            rows.append(f'<tr><td class="name">{escape(p)}</td>{cells}</tr>')
        out.append(f"<h2>Per {who}</h2><p class=\"meta\">Each {who}'s share of the GPU-seconds held while every "
                   f"{who} had an active job (in brackets its max-min fair share of them, by the GPUs its jobs "
                   "demanded) / its jobs' worst dynamic finish-time fairness.</p><table><thead><tr>"
                   "<th class=\"name\">policy</th>"
                   + "".join(f"<th>{escape(u)}</th>" for u in names) + "</tr></thead><tbody>" + "".join(rows)
                   + "</tbody></table>")
    return "\n".join(out)


def build_html(m: Merged, pngs: dict[str, bytes], colours: dict, title: str = "Shockwave simulation report") -> str:
    files = "".join(
        f"<li><code>{escape(f['path'])}</code>: {escape(', '.join(f['policies']))}"
        + (f" — workload <code title=\"{escape(str(f['workload']))}\">{escape(PurePath(str(f['workload'])).name)}</code>"
           if f.get("workload") else "")
        + (f", {escape(str(f['gpus']))} GPUs" if f.get("gpus") is not None else "")
        + (f", {escape(str(f['round_length']))} s rounds" if f.get("round_length") is not None else "")
        + "</li>" for f in m.files)
    warnings = "".join(f'<div class="warn">Warning: {escape(w)}</div>' for w in m.warnings)
    figures = []
    for name, (_fn, heading) in FIGURES.items():
        if name not in pngs:
            continue
        data = base64.b64encode(pngs[name]).decode("ascii")
        figures.append(f'<figure id="fig-{escape(name)}"><h2>{escape(heading)}</h2>'
                       f'<img src="data:image/png;base64,{data}" alt="{escape(heading)}">'
                       f"<figcaption>{escape(CAPTIONS.get(name, ''))}</figcaption></figure>")
    ref_note = ("Reference rows (grey, italic) are the Shockwave repository's shipped results for the same "
                "experiment." if any(r["kind"] == "reference" for r in m.table()) else
                "No reference rows: the reference's shipped results exist only for the bundled 120-job trace "
                "on 32 GPUs with 120 s rounds.")
    stamp = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{escape(title)}</h1>
<p class="meta">Generated {escape(stamp)} by <code>shockwave report</code> (slurm-shockwave {escape(__version__)})
from {len(m.files)} results file(s), {len(m.results)} polic{"y" if len(m.results) == 1 else "ies"}.</p>
<ul class="meta">{files}</ul>
{warnings}
<h2>Metrics</h2>
<p class="meta">Lower is better for makespan, JCT, ρ and unfair fractions; higher for utilisation. The best
simulated value of each column is in bold. ρ = JCT / (exclusive run time × max(1, jobs / GPUs)).
{escape(ref_note)}</p>
{metrics_table(m, colours)}
{users_section(m)}
{"".join(figures)}
</body>
</html>
"""
