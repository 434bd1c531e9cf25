"""The 120-job trace on a real 32-GPU local Slurm cluster (8 slurmd), real vs simulated, per policy (issue 23).

    nice -n 5 .venv/bin/python bench/replay.py --time-scale 30                 (as root; ~15 min per policy)
    .venv/bin/python bench/replay.py --time-scale 30 --policies slurm --no-doc   (one policy, no doc)

Runs `shockwave replay` (shockwave_lab/replay/) for each policy one after the other (default: the default
Shockwave policy, then plain Slurm), keeps each result as JSON under bench/results/replay/, and writes
docs/replay.md: for each run the real and simulated figures side by side, the time scale, the machine's load
before and after, the wall time and the command, and whether the targets hold (makespan and average JCT within
5% of the simulator, unfair fraction within 3 points; real Shockwave better than real plain Slurm on makespan,
average JCT, worst rho and unfair fraction).  `--from-json A.json B.json` rewrites the doc from kept results:

    .venv/bin/python bench/replay.py --from-json <bench/results/replay/*.json in date order> --notes reading.md

(reading.md: the doc's "## Reading" sections, which it appends; `--resim` also recomputes each result's simulated
column and spread from the inputs it keeps and writes them back into its JSON).

`--elastic N` (issue 34) replays a generated trace instead, every job elastic from 1 GPU up to N, on `--gpus` GPUs
(`--nodes` nodes, N at most a node's GPUs), and writes its own doc, docs/replay-elastic.md (`elastic_section`):

    nice -n 10 .venv/bin/python bench/replay.py --elastic 8 --jobs 16 --gpus 16 --nodes 2 --time-scale 15
    .venv/bin/python bench/replay.py --elastic-from bench/results/replay/elastic8-....json --notes reading.md
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from shockwave_lab.bench import ROOT
from shockwave_lab.data_files import DEFAULT_EXPERIMENT, experiment_paths
from shockwave_lab.replay.api import replay, start_cost
from shockwave_lab.replay.compare import SPREAD_KEYS as HEADLINE, deviation, render_markdown
from slurm_shockwave.strict_json import dumps

RESULTS = ROOT / "bench" / "results" / "replay"
DOC = ROOT / "docs" / "replay.md"
ELASTIC_DOC = ROOT / "docs" / "replay-elastic.md"
ELASTIC_HEAD = "## Elastic jobs (issue 34)"
ELASTIC_TITLE = ("# Real Slurm with elastic jobs: replay vs simulator\n\nWritten by `bench/replay.py --elastic` "
                 "(issue 34); the setting and the measures are docs/replay.md's.\n\n")
#: the models whose every batch size has a throughput on 1, 2, 4 and 8 GPUs and divides by each: the counts the
#: simulator offers are the controller's (replay/plan.py `check_counts`); LM's batch sizes (5 x 2^k) and
#: Recommendation (profiled on 1 GPU only) would not be
ELASTIC_MODELS = ("ResNet-18", "ResNet-50", "Transformer")

#: runs whose real side is today's: plain Slurm since fair-share is real, Shockwave since its controller starts
#: early rounds at the replay's time scale (and its simulation does too)
SINCE = {"slurm": "2026-11-26 16:00", "shockwave": "2026-11-27 04:00"}
#: simulations in a result's spread (compare.spread)
SPREAD_RUNS = 16


def _ok(b: bool) -> str:
    return "**yes**" if b else "**no**"


def _held(d: dict, what: str) -> list[str]:
    return [f"makespan within 5% of {what}: {_ok(abs(d['makespan_s']) <= 0.05)} ({100 * d['makespan_s']:+.1f}%)",
            f"average JCT within 5%: {_ok(abs(d['avg_jct_s']) <= 0.05)} ({100 * d['avg_jct_s']:+.1f}%)",
            f"unfair fraction within 3 points: {_ok(abs(d['unfair_fraction']) <= 3.0)} "
            f"({d['unfair_fraction']:+.1f} points)"]


def mean_of(spread: dict) -> dict:
    return {k: v["mean"] for k, v in spread.items() if isinstance(v, dict)}


def targets(res: dict) -> list[str]:
    out = _held(res["deviation"], "the simulator")
    spread = res.get("simulated_spread")
    if spread:
        real = res["real"]
        inside = [k for k in HEADLINE if k in spread and spread[k]["min"] <= real[k] <= spread[k]["max"]]
        out += [f"against the mean of the simulated spread: {t}" for t in _held(deviation(real, mean_of(spread)),
                                                                               "the mean")]
        out.append(f"inside the simulated range on {len(inside)} of 4 ({', '.join(inside) or 'none'})")
    return out


def spread_line(res: dict) -> str:
    spread = res.get("simulated_spread")
    if not spread:
        return ""
    fmt = {"makespan_s": ("makespan", "{:,.0f} s"), "avg_jct_s": ("average JCT", "{:,.0f} s"),
           "worst_rho": ("worst rho", "{:.3f}"), "unfair_fraction": ("unfair", "{:.1f}%")}
    parts = [f"{label} {f.format(spread[k]['mean'])} [{f.format(spread[k]['min'])} - {f.format(spread[k]['max'])}]"
             for k, (label, f) in fmt.items() if k in spread]
    return (f"Simulated spread ({spread['runs']} simulations, each arrival moved by up to {spread['jitter_s']:g} "
            f"trace s = 1 wall s; mean [min - max]): " + "; ".join(parts) + ".\n\n")


def aggregate(results: list[dict]) -> str:
    """Per policy and time scale, the mean of today's real runs against the mean of their simulated spreads."""
    groups: dict = {}
    for r in results:
        kind = "slurm" if r["policy"] == "slurm" else "shockwave"
        if r.get("simulated_spread") and r["date"] >= SINCE[kind]:
            groups.setdefault((r["policy"], r["time_scale"]), []).append(r)
    lines = []
    for (policy, scale), rs in sorted(groups.items()):
        real = {k: sum(r["real"][k] for r in rs) / len(rs) for k in HEADLINE}
        sim = {k: sum(mean_of(r["simulated_spread"])[k] for r in rs) / len(rs) for k in HEADLINE}
        lines.append(f"- **{policy}**, time scale {scale:g}, {len(rs)} runs ({', '.join(r['date'][5:16] for r in rs)}): "
                     f"real mean makespan {real['makespan_s']:,.0f} s (simulated mean {sim['makespan_s']:,.0f}), "
                     f"average JCT {real['avg_jct_s']:,.0f} ({sim['avg_jct_s']:,.0f}), worst rho "
                     f"{real['worst_rho']:.3f} ({sim['worst_rho']:.3f}), unfair {real['unfair_fraction']:.1f}% "
                     f"({sim['unfair_fraction']:.1f}%); " + "; ".join(_held(deviation(real, sim), "the simulator")))
    if not lines:
        return ""
    return ("### Every run of today's code against the simulated spread\n\n"
            "One run of this trace is one draw: under plain Slurm a delay of a second in a few arrivals changes which "
            "job ends last, and the makespan by several percent, in the simulator as on the cluster. So the targets "
            "are read here on the mean of the runs against the simulated mean (runs since "
            f"{SINCE['slurm']} for plain Slurm, the first with real fair-share; since {SINCE['shockwave']} for "
            "Shockwave, the first whose controller starts a round early when a job ends while another waits at the "
            "replay's time scale, as its simulation does).\n\n" + "\n".join(lines) + "\n")


def versus(sw: dict, plain: dict) -> list[str]:
    out = []
    for kind in ("real", "simulated"):
        a, b = sw[kind], plain[kind]
        better = [k for k in HEADLINE if a[k] < b[k] or (a[k] == b[k] == 0 and k == "unfair_fraction")]
        out.append(f"{kind}: Shockwave better than plain Slurm on {len(better)} of 4 "
                   f"({', '.join(better) or 'none'}): makespan {a['makespan_s']:,.0f} vs {b['makespan_s']:,.0f} s, "
                   f"average JCT {a['avg_jct_s']:,.0f} vs {b['avg_jct_s']:,.0f} s, worst rho {a['worst_rho']:.3f} vs "
                   f"{b['worst_rho']:.3f}, unfair {a['unfair_fraction']:.1f}% vs {b['unfair_fraction']:.1f}%")
    return out


def section(res: dict) -> str:
    load = " / ".join(f"{x:.1f}" for x in res["load_before"]) + " before, " + \
        " / ".join(f"{x:.1f}" for x in res["load_after"]) + " after"
    real = res["real"]
    extra = (f"restart cost measured {res['restart_cost_s']:.0f} trace s (mean of {real['restart_cost_n']} "
             f"restarts: release to work resumed), checkpoint {real.get('checkpoint_s') or 0:.0f} trace s, "
             f"first-start latency {real.get('start_latency_s') or 0:.0f} trace s"
             if res.get("restart_cost_s") else
             f"programs' start-up {real.get('first_startup_s') or 0:.1f} trace s (the simulated start cost)"
             if res.get("fair_share") else f"first-start latency {real.get('start_latency_s') or 0:.0f} trace s")
    return (f"### policy {res['policy']}, time scale {res['time_scale']:g}\n\n"
            f"    {res.get('command') or 'shockwave replay'}\n\n"
            f"{res['date']}; Slurm {res['slurm_version']}; {res['jobs']} jobs, {res['gpus']} GPUs on {res['nodes']} "
            f"nodes, {res['users']} users; rounds {res['round_seconds']:g} s; wall {res['wall_s']:.0f} s "
            f"({res['wall_s'] / 60:.1f} min); load average (1/5/15 min) {load} on {res['cpus']} cores; {extra}; "
            f"{real.get('rounds') or '-'} controller rounds; fair-share "
            f"{'real (' + res['fair_share'] + ')' if res.get('fair_share') else 'inert (no slurmdbd: before 2026-11-26 16:00)'}."
            "\n\n"
            + render_markdown(res) + "\n\n" + spread_line(res) + "\n".join(f"- {t}" for t in targets(res)) + "\n")


def write_doc(results: list[dict], notes: str = "") -> None:
    """docs/replay.md (the setting, the comparison, the reading) and each run's section in the runs file of its day
    (docs/replay-runs-<day>.md)."""
    plain = [r for r in results if r["policy"] == "slurm"]
    sw = [r for r in results if r["policy"] != "slurm" and plain and r["time_scale"] == plain[-1]["time_scale"]]
    days: dict[str, list[str]] = {}
    for r in results:
        days.setdefault(str(r["date"])[:10], []).append(section(r))
    for day, sections in days.items():
        DOC.with_name(f"replay-runs-{day}.md").write_text(
            f"# Replay runs of {day} (`docs/{DOC.name}`: the setting, the comparison, the reading)\n\n"
            + "\n".join(sections))
    parts = [DOC_HEAD, "Each run's section, by day: "
             + ", ".join(f"`docs/replay-runs-{day}.md`" for day in days) + ".\n"]
    if sw and plain:
        parts.append(f"### Shockwave vs plain Slurm (time scale {plain[-1]['time_scale']:g})\n\n"
                     + "\n".join(f"- {t}" for t in versus(sw[-1], plain[-1])) + "\n")
    summary = aggregate(results)
    if summary:
        parts.append(summary)
    if notes:
        parts.append(notes)
    DOC.write_text("\n".join(parts))


DOC_HEAD = """# Real Slurm at the paper's scale: replay vs simulator

Written by `bench/replay.py` (issue 23). `shockwave replay` starts a local Slurm cluster of 8 slurmd with 4 fake
GPUs each, submits every job of the bundled 120-job trace at its arrival / S (S: the time scale) as one of 4
users, round robin, and runs it to the end: with the controller in authoritative mode (rounds of 120 s / S) or,
for policy `slurm`, with no controller (Slurm's multifactor priority and backfill). Fair-share is real since
2026-11-26 16:00 (slurmdbd and MariaDB beside the cluster, one account per user at 1 share; the site's settings and
their trace-time model: `lab/shockwave_lab/replay/site.py`); the runs before had it inert. Every job is an
emulated training program (`lab/shockwave_lab/replay/emujob.py`) under
the real wrapper (`shockwave-run`), reporting every epoch through the Training API to the real event store,
checkpointing after each epoch (every k-th for epochs shorter than 0.25 s of wall time) and on Slurm's signal,
and resuming after the requeue; an epoch sleeps its profiled duration at its batch size (GNS / Accordion
schedule) on its GPUs, divided by S. The replay fails if a job does not complete, an epoch is lost or repeated,
or a daemon is left behind.

The simulated column runs the same trace (same users) in the simulator with the restart cost measured in the
real run (from the controller's release of a requeued job to the moment its program resumes work) as the
restart penalty and as the preemption gate's cost; plain Slurm is simulated by the `slurm-multifactor` model with
the cluster's settings in trace time (`lab/shockwave_lab/replay/site.py`): its PriorityCalcPeriod (1 wall minute),
time limits in whole wall minutes, rounds of its scheduler pass (1 wall second) and, since 2026-11-26 22:30, the
fair-share and job-size factors as sprio and sshare show them on this cluster (below: "The model of plain Slurm").
Each result also holds the simulated spread: 16 simulations with every arrival moved by up to 1 wall second.
Every run's simulated columns (docs/replay-runs-<day>.md) were recomputed on 2026-11-26 23:00 with that model from
the inputs each result keeps (`--resim`); what a run printed itself is kept in its JSON as `simulated_at_run`. Runs
after that carry the simulation made at their end.
Since 2026-11-26 19:00 both the controller and the simulator put each gang on one node (`solver/nodes.py`;
the controller pins each job it releases to its node), and the simulated column runs on the cluster's 8 nodes of
4 GPUs; runs before that planned and simulated a pool of 32 GPUs while Slurm placed the gangs on nodes itself.
Since 2026-11-27 04:00 the controller starts a round early when a job ends while another waits, as in production,
its poll and minimum gap scaled from production's 5 s to 0.5 wall s (`replay/site.py` `controller_timing`), and
the simulated column follows the same rule in trace seconds (`sim/cluster.py` early rounds); before, the gap was
the whole round, so the rule never fired, and the simulator had no such rule.
Since 2026-11-28 04:00 the simulated column of a controller run models Slurm's own starts (`sim/slurm_starts.py`):
a job no round has seen yet starts on its asked count as soon as its gang fits, as Slurm starts it between the
controller's rounds. The runs before that date were simulated without it; re-simulated with it, the makespan and
average JCT ratios (real / simulated) of the 2026-11-27 04:23 run at S = 30 go from 0.996 and 0.932 to 0.997 and 0.925,
those of the 2026-11-26 13:22 run at S = 15 from 1.087 and 0.888 to 1.092 and 0.899 (their tables keep the old column).
Since 2026-11-28 07:00 a simulated round of a controller run lasts its length when its jobs all end early, unless
GPUs are freed while a job waits, as the controller's (`slurm/timing.py`; the reference's round ended with its last
job): against the mean of the simulated spread the S = 30 runs of 2026-11-27 01:38, 04:04 and 04:23 read as before
(makespan 0.996-1.012, average JCT 0.920-0.931, each within 0.001); one unmoved simulation moves more (04:23: 0.997
and 0.925 to 1.026 and 0.908).
Since 2026-11-28 07:45 the simulated column runs each job's whole epochs, as the emulated program does
(`replay/api.py` `whole_epochs`; a trace's steps may end mid-epoch, where the simulator used to stop): against the
mean of the simulated spread the S = 30 controller runs of 2026-11-27 01:23-04:23 read makespan 0.994-1.029 and
average JCT 0.908-0.921 (before: 0.996-1.012 and 0.920-0.931), the plain-Slurm runs of 2026-11-26 22:37 and 23:13
makespan 1.081 and 0.916, average JCT 1.003 and 0.998 (before: 1.072 and 0.908, 1.018 and 1.013).
All times are trace seconds (wall seconds x S). Definitions: `docs/fairness.md`; measurement details:
`lab/shockwave_lab/replay/collect.py`.

## Runs
"""


def elastic_trace(path: Path, jobs: int, seed: int, table, hours: tuple[float, float] = (0.1, 0.5)) -> Path:
    """A generated trace of `jobs` jobs of ELASTIC_MODELS (1-4 GPUs, `hours` long on them, the CI trace's mix): the
    first of a longer generated one whose model is one of them, with their arrivals as generated."""
    from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text
    opts = GeneratorOptions(jobs=6 * jobs, seed=seed, interarrival=40, min_hours=hours[0], max_hours=hours[1],
                            gpu_mix=(0.5, 0.35, 0.15, 0.0), max_gpus=4)
    kept = [j for j in generate(opts, table) if j.model in ELASTIC_MODELS][:jobs]
    if len(kept) < jobs:
        raise ValueError(f"only {len(kept)} jobs of {', '.join(ELASTIC_MODELS)} in {opts.jobs} generated")
    path.write_text(trace_text(kept))
    return path


def elastic_section(res: dict, notes: str = "") -> str:
    real, sim, dev = res["real"], res["simulated"], res["deviation"]
    load = " / ".join(f"{x:.1f}" for x in res["load_before"]) + " before, " + \
        " / ".join(f"{x:.1f}" for x in res["load_after"]) + " after"
    met = [f"makespan within 5% of the simulator: {_ok(abs(dev['makespan_s']) <= 0.05)} "
           f"(real / simulated {real['makespan_s'] / sim['makespan_s']:.3f})",
           f"average JCT within 5%: {_ok(abs(dev['avg_jct_s']) <= 0.05)} "
           f"(real / simulated {real['avg_jct_s'] / sim['avg_jct_s']:.3f})",
           f"every count change counted: {_ok(real['count_changes'] == real['resizes_done'])} ({real['count_changes']} "
           f"runs on another count than the run before, {real['resizes_done']} resizes done)",
           f"none wasted: {_ok(real['wasted_resizes'] == 0)} ({real['wasted_resizes']} wasted of "
           f"{real['resizes']} started; simulated {sim['wasted_resizes']} of {sim['resizes']})"]
    return (f"{ELASTIC_HEAD}\n\n"
            f"    {res.get('command')}\n\n"
            f"{res['date']}; Slurm {res['slurm_version']}; {res['jobs']} jobs of {', '.join(ELASTIC_MODELS)} (a "
            f"generated trace, `elastic_trace`), every one elastic from 1 GPU up to {res['elastic']}; {res['gpus']} "
            f"GPUs on {res['nodes']} nodes, {res['users']} users; policy {res['policy']}; rounds {res['round_seconds']:g} s; "
            f"wall {res['wall_s']:.0f} s ({res['wall_s'] / 60:.1f} min); load average (1/5/15 min) {load} on "
            f"{res['cpus']} cores; restart cost measured {res['restart_cost_s'] or 0:.0f} trace s (mean of "
            f"{real['restart_cost_n']}); {real.get('rounds') or '-'} controller rounds. Real count changes: the "
            f"controller's `shockwave_resizes_total{{outcome}}` (its ResizeLog) started {real['resizes']}, done "
            f"{real['resizes_done']}, wasted {real['wasted_resizes']}; {real['gpu_updates']} `scontrol update` of a "
            f"request; simulated: {sim['grown']} grown, {sim['shrunk']} shrunk, {sim['wasted_resizes']} changed "
            "again within a round.\n\n"
            + render_markdown(res) + "\n\n" + "\n".join(f"- {t}" for t in met) + "\n"
            + (f"\n{notes.strip()}\n" if notes.strip() else ""))


def write_elastic(res: dict, notes: str = "") -> None:
    """docs/replay-elastic.md from one kept result; `notes`: its reading."""
    ELASTIC_DOC.write_text(ELASTIC_TITLE + elastic_section(res, notes))


def run_elastic(args) -> dict:
    from shockwave_lab.workload.throughputs import ThroughputTable
    from slurm_shockwave.policy_settings import default_name
    thr = experiment_paths(DEFAULT_EXPERIMENT)["throughputs"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M")
    hours = tuple(float(h) for h in args.hours.split(","))
    long = "" if hours == (0.1, 0.5) else f"-{args.hours.replace(',', '-')}h"
    trace = elastic_trace(RESULTS / f"elastic-{args.jobs}jobs-seed{args.seed}{long}.trace", args.jobs, args.seed,
                          ThroughputTable.load(thr), hours)
    cmd = ["--trace", str(trace.relative_to(ROOT)), "--gpus", str(args.gpus), "--nodes", str(args.nodes),
           "--users", "4", "--time-scale", f"{args.time_scale:g}", "--elastic", str(args.elastic)]
    res = replay(str(trace), str(thr), gpus=args.gpus, nodes=args.nodes, time_scale=args.time_scale,
                 policy=default_name(), users=4, out=lambda m: print(m, flush=True), argv=["replay", *cmd],
                 elastic=args.elastic, keep=args.keep)
    res["command"] = (f"nice -n 10 .venv/bin/python bench/replay.py --elastic {args.elastic} --jobs {args.jobs} "
                      f"--seed {args.seed} --gpus {args.gpus} --nodes {args.nodes} --time-scale {args.time_scale:g}"
                      f"{'' if not long else ' --hours ' + args.hours}  (= shockwave replay {' '.join(cmd)})")
    path = RESULTS / f"elastic{args.elastic}-s{args.time_scale:g}{long}-{stamp}.json"
    path.write_text(dumps(res, indent=1))
    print(f"elastic: wall {res['wall_s']:.0f} s; deviation {res['deviation']}; kept {path}", flush=True)
    return res


def _inputs(res: dict):
    """(specs, table, GPUs, start cost, time scale) of a kept result: the simulator's inputs (on several GPU types
    {type: GPUs} and a table per type: bench/replay_typed.py)."""
    from shockwave_lab.data_files import TRACES
    from shockwave_lab.replay.api import load, type_capacity
    thr = experiment_paths(DEFAULT_EXPERIMENT)["throughputs"]
    trace = Path(res["trace"])
    if not trace.exists():                  # kept on another checkout: the one generated here, or the bundled one
        trace = RESULTS / trace.name if (RESULTS / trace.name).exists() else TRACES / trace.name
    _jobs, specs, table = load(trace, thr, res["gpus"], res["users"], elastic=res.get("elastic"),
                               gpu_types=res.get("gpu_types") or (), uniform=bool(res.get("uniform_speeds")))
    gpus = type_capacity(res["gpus"], res["gpu_types"]) if res.get("gpu_types") else res["gpus"]
    cost = start_cost(res["real"]) if res.get("fair_share") else res.get("restart_cost_s") or 20.0
    return specs, table, gpus, cost, res["time_scale"] if res.get("fair_share") else None


def resimulate(res: dict) -> None:
    """The simulated column again, from the result's own inputs (a fix of the model after the run)."""
    from shockwave_lab.replay import compare
    specs, table, gpus, cost, scale = inputs = _inputs(res)
    res.setdefault("simulated_at_run", res["simulated"])          # what the run itself printed
    res["simulated"] = compare.simulate(specs, table, gpus, res["nodes"], res["policy"], cost, scale)
    res["deviation"] = compare.deviation(res["real"], res["simulated"])
    add_spread(res, inputs)


def add_spread(res: dict, inputs=None) -> None:
    from shockwave_lab.replay import compare
    specs, table, gpus, cost, scale = inputs or _inputs(res)
    if scale:
        res["simulated_spread"] = compare.spread(specs, table, gpus, res["nodes"], res["policy"], cost, scale,
                                                 SPREAD_RUNS)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-scale", type=float, default=30.0)
    ap.add_argument("--policies", default="default,slurm", help="comma-separated; 'default': the default policy")
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--from-json", nargs="*", default=None, help="rewrite the doc from these kept results")
    ap.add_argument("--notes", default="", help="a file whose text is appended to the doc (the reading)")
    ap.add_argument("--resim", action="store_true", help="with --from-json: recompute the simulated columns and "
                    "spreads (the simulator's inputs are in the result: trace, restart cost) and keep them")
    ap.add_argument("--elastic", type=int, default=None, help="every job elastic up to N GPUs: a generated trace "
                    "(--jobs, --seed) on --gpus/--nodes; writes the doc's elastic section only")
    ap.add_argument("--elastic-from", default=None, help="rewrite the elastic section from this kept result "
                    "(with --notes: its reading)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's folder (logs, journal)")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--hours", default="0.1,0.5", help="with --elastic: MIN,MAX hours of the generated jobs")
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=2)
    args = ap.parse_args(argv)
    notes = Path(args.notes).read_text() if args.notes else ""
    if args.elastic_from:
        write_elastic(json.loads(Path(args.elastic_from).read_text()), notes)
        return
    if args.elastic:
        res = run_elastic(args)
        if not args.no_doc:
            write_elastic(res, notes)
            print(f"wrote the elastic section of {DOC}")
        print(f"load average at the end: {os.getloadavg()}")
        return
    if args.from_json:
        results = [json.loads(Path(p).read_text()) for p in args.from_json]
        if args.resim:
            for path, res in zip(args.from_json, results):
                resimulate(res)
                Path(path).write_text(dumps(res, indent=1))
        write_doc(results, notes)
        return
    from slurm_shockwave.policy_settings import default_name
    results = []
    RESULTS.mkdir(parents=True, exist_ok=True)
    for p in [x.strip() for x in args.policies.split(",") if x.strip()]:
        policy = default_name() if p == "default" else p
        cmd = ["--time-scale", f"{args.time_scale:g}", "--policy", policy]
        paths = experiment_paths(DEFAULT_EXPERIMENT)
        res = replay(str(paths["trace"]), str(paths["throughputs"]),
                     gpus=32, nodes=8, time_scale=args.time_scale, policy=policy, users=4,
                     out=lambda m: print(m, flush=True), argv=["replay", *cmd], keep=args.keep)
        res["command"] = "shockwave replay " + " ".join(cmd)
        add_spread(res)
        path = RESULTS / f"{policy}-s{args.time_scale:g}-{time.strftime('%Y%m%d-%H%M')}.json"
        path.write_text(dumps(res, indent=1))
        print(f"{policy}: wall {res['wall_s']:.0f} s; deviation {res['deviation']}; kept {path}", flush=True)
        results.append(res)
    if not args.no_doc:
        write_doc(results, notes)
        print(f"wrote {DOC}")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
