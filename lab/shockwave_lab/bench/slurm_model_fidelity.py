"""The plain-Slurm model against Slurm's own history (issue 35): a plain-Slurm replay, read back with `sacct --json`,
imported, simulated by `slurm-multifactor` at the replay site's settings, compared job by job (replay/history.py).

    python bench/slurm_model_fidelity.py [--time-scale 30] [--first N] [--runs 16]
    python bench/slurm_model_fidelity.py --from-json bench/results/slurm-model-fidelity/<run>/result.json
    python bench/slurm_model_fidelity.py --recompute bench/results/slurm-model-fidelity/<run>

Runs `shockwave replay --policy slurm` (the bundled 120-job trace, 32 GPUs on 8 nodes, 4 users; root: it starts a
local Slurm cluster with slurmdbd and MariaDB), keeps `sacct.json`, the imported jobs (`sacct.jobs.jsonl`) and
`result.json` in bench/results/slurm-model-fidelity/<date>/, and writes docs/slurm-model-fidelity.md.  The load
average is sampled every 10 s during the run (the machine's other work moves Slurm's timing, not the model's).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path

from shockwave_lab.bench import ROOT

RESULTS = ROOT / "bench" / "results" / "slurm-model-fidelity"
DOC = ROOT / "docs" / "slurm-model-fidelity.md"


def run(args, out=print) -> dict:
    from shockwave_lab.data_files import DEFAULT_EXPERIMENT, experiment_paths
    from shockwave_lab.replay import compare, history
    from shockwave_lab.replay.api import load
    from shockwave_lab.replay.run import Replay

    paths = experiment_paths(DEFAULT_EXPERIMENT)
    trace, thr = Path(args.trace or paths["trace"]), Path(args.throughputs or paths["throughputs"])
    jobs, specs, table = load(trace, thr, args.gpus, args.users, args.first)
    guess = compare.simulate(specs, table, args.gpus, args.nodes, "slurm", 20.0, args.time_scale)
    expected = guess["makespan_s"] / args.time_scale
    folder = RESULTS / time.strftime("%Y%m%d-%H%M")
    folder.mkdir(parents=True, exist_ok=True)
    sacct = folder / "sacct.json"
    out(
        f"{len(jobs)} jobs on {args.gpus} GPUs, {args.nodes} nodes; plain Slurm at time scale {args.time_scale:g}; "
        f"expected ~{expected:.0f} s; results in {folder}"
    )
    loads, stop = [], threading.Event()

    def sample():
        while not stop.wait(10.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    before = os.getloadavg()
    sampler.start()
    try:
        raw = Replay(
            jobs,
            gpus=args.gpus,
            nodes=args.nodes,
            time_scale=args.time_scale,
            policy="slurm",
            out=out,
            expected_s=expected,
            after_jobs=lambda rep: history.capture(rep, sacct),
        ).run()
    finally:
        stop.set()
    res = history.fidelity(sacct, thr, args.gpus, args.nodes, args.time_scale, args.runs, out_dir=folder)
    names = sorted(res["names"].values())
    if names != sorted(j.name for j in jobs):
        raise SystemExit(f"sacct's jobs do not match the trace's: {len(names)} vs {len(jobs)}")
    res.update(
        trace=str(trace),
        users=args.users,
        first=args.first,
        slurm_version=raw["slurm_version"],
        wall_s=round(raw["wall_s"], 1),
        cpus=os.cpu_count(),
        date=time.strftime("%Y-%m-%d %H:%M %Z"),
        load_before=[round(x, 2) for x in before],
        load_after=[round(x, 2) for x in os.getloadavg()],
        load_during={"mean": round(statistics.fmean(loads), 2), "max": round(max(loads), 2), "samples": len(loads)}
        if loads
        else None,
        command="python bench/slurm_model_fidelity.py " + shlex.join(sys.argv[1:]),
        folder=str(folder),
    )
    (folder / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


#: what a run keeps about itself (not recomputed from its sacct.json)
RUN_KEYS = (
    "trace",
    "users",
    "first",
    "slurm_version",
    "wall_s",
    "cpus",
    "date",
    "load_before",
    "load_after",
    "load_during",
    "command",
    "folder",
)


def recompute(folder: Path, runs: int) -> dict:
    """The comparison again from a kept run's sacct.json (after a change of the model or of the comparison)."""
    from shockwave_lab.data_files import DEFAULT_EXPERIMENT, experiment_paths
    from shockwave_lab.replay import history

    old = json.loads((folder / "result.json").read_text())
    thr = experiment_paths(DEFAULT_EXPERIMENT)["throughputs"]
    res = history.fidelity(
        folder / "sacct.json", thr, old["gpus"], old["nodes"], old["time_scale"], runs, out_dir=folder
    )
    res.update({k: old[k] for k in RUN_KEYS if k in old})
    (folder / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


def _f(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _range(d: dict) -> str:
    return f"{d['median']:,.0f} [{d['min']:,.0f} - {d['max']:,.0f}]"


INTRO = (
    "Written by `bench/slurm_model_fidelity.py` (issue 35; code: `lab/shockwave_lab/replay/history.py`). A "
    "plain-Slurm replay (`shockwave replay --policy slurm`: no controller, the site's multifactor priority with "
    "real fair-share through slurmdbd, backfill; docs/replay.md) runs the trace on a local cluster; at its end, "
    "the cluster still up, `sacct --json -a -D -S <start> -E now` is read back and kept, imported with the "
    "importers (`sacct-json`, docs/trace-import.md: arrival, run time, GPUs, user, account), and that history "
    "is simulated by the `slurm-multifactor` model at the replay site's settings in trace seconds "
    "(`replay/site.py` `model_settings`: PriorityCalcPeriod, time limits in whole wall minutes, decay and age, "
    "the idle root share; rounds of the scheduler pass, 1 wall s; each gang on one node of the same cluster "
    "shape; no start cost: Slurm's run time holds the program's start-up). Each sacct job is matched to its "
    "trace job by its name (`--job-name=t007`). Per job: start error = |model's first start - Slurm's start|, "
    "end error = |model's end - Slurm's end|, in trace seconds (wall seconds x the time scale). Slurm's wait = "
    "its start - its submit.\n\n"
    "Two models: **as it stands**, the model assumes each job's time limit (1.5 x its run time alone at its "
    "first batch size, here the imported run time, in whole minutes: what the importer can give it); **with "
    "Slurm's recorded limits**, the same model code takes each job's limit from sacct (`time.limit`, what "
    "`sbatch --time` asked: 1.5 x the job's work at its first batch size, longer than the imported run time "
    "for a job that adapted its batch size). The noise floor: 16 simulations of the same history with every "
    "arrival moved by a uniform draw of up to 1 wall s (as the replay's simulated spread, `replay/compare.py`), "
    "against the unmoved model and against Slurm: median over the 16 [min - max].\n\n"
    "Each run keeps `sacct.json`, the imported jobs (`sacct.jobs.jsonl`) and `result.json` (per job: Slurm's and "
    "the models' start and end) in its folder; `--recompute FOLDER...` redoes the comparison from a kept "
    "`sacct.json`, and this page is written by `python bench/slurm_model_fidelity.py --from-json "
    "bench/results/slurm-model-fidelity/*/result.json --notes bench/results/slurm-model-fidelity/notes.md`."
)


def _row(label: str, e: dict) -> str:
    keys = ("start_median_s", "start_p90_s", "start_mean_signed_s", "end_median_s", "end_p90_s")
    return f"| {label} | " + " | ".join(_f(e[k]) for k in keys) + " |"


def _spread_rows(sp: dict, wait: float) -> list[str]:
    out = []
    for key, label in (
        ("vs_model", "noise floor: arrivals moved by up to 1 wall s, vs the unmoved model"),
        ("vs_slurm", "arrivals moved by up to 1 wall s, vs Slurm"),
    ):
        d = sp[key]
        out.append(
            f"| {label} | {_range(d['start_median_s'])} | {_range(d['start_p90_s'])} | | "
            f"{_range(d['end_median_s'])} | {_range(d['end_p90_s'])} |"
        )
    r = {k: 100 * v / wait for k, v in sp["vs_slurm"]["start_median_s"].items()} if wait > 0 else None
    if r:
        out.append(
            f"| ratio of the moved ones (median start error / Slurm's median wait) | "
            f"{r['median']:.1f}% [{r['min']:.1f}% - {r['max']:.1f}%]{_under(sp, wait)} | | | | |"
        )
    return out


def _under(sp: dict, wait: float) -> str:
    each = sp.get("start_median_each_s")
    if not each:
        return ""
    return f"; under 10% in {sum(x / wait < 0.10 for x in each)} of {len(each)}"


def _ratio_line(label: str, err: float, wait: float) -> str:
    if wait <= 0:
        return f"- {label}: no job waited, the ratio is undefined"
    ratio = err / wait
    return (
        f"- {label}: **median start error / median wait = {err:,.0f} / {wait:,.0f} = {100 * ratio:.1f}%** "
        f"(target: under 10%): **{'met' if ratio < 0.10 else 'not met'}**"
    )


def section(res: dict) -> list[str]:
    m, wait = res["model"], res["wait_median_s"]
    load = res.get("load_during") or {}
    table = [
        "| | start error median | start p90 | start bias (model - Slurm, mean) | end error median | end p90 |",
        "|---|---:|---:|---:|---:|---:|",
        _row("**model as it stands** vs Slurm", m),
        *_spread_rows(res["spread"], wait),
    ]
    if res.get("model_recorded_limits"):
        table += [
            _row("**model with Slurm's recorded limits** vs Slurm", res["model_recorded_limits"]),
            *_spread_rows(res["spread_recorded_limits"], wait),
        ]
    lines = [
        f"### {res.get('date')}",
        "",
        f"    {res.get('command')}",
        "",
        f"Slurm {res.get('slurm_version')}; {res['jobs']} jobs ({Path(res.get('trace', '')).name}"
        f"{', first ' + str(res['first']) if res.get('first') else ''}), {res['gpus']} GPUs on {res['nodes']} nodes, "
        f"{res.get('users')} users; time scale {res['time_scale']:g} (1 wall s = {res['time_scale']:g} trace s); "
        f"wall {res.get('wall_s', 0):.0f} s; load average (1 min) {load.get('mean', '-')} mean, "
        f"{load.get('max', '-')} max during the run (sampled every 10 s; 1/5/15 min {res.get('load_before')} before, "
        f"{res.get('load_after')} after) on {res.get('cpus')} cores shared with other work; "
        f"{res['requeued']} job(s) requeued by Slurm; every trace job matched to one sacct job. Kept: "
        f"`{Path(res.get('folder', '')).relative_to(ROOT) if res.get('folder') else ''}`.",
        "",
        f"Slurm's wait (start - submit): median **{wait:,.0f} trace s**, p90 {res['wait_p90_s']:,.0f} s; "
        f"{res['waited']} of {res['jobs']} jobs waited longer than one scheduler pass.",
        "",
        *table,
        "",
        _ratio_line("model as it stands", m["start_median_s"], wait),
    ]
    if res.get("model_recorded_limits"):
        w = res["model_recorded_limits"]
        lines.append(
            _ratio_line("with Slurm's recorded limits", w["start_median_s"], wait)
            + f" ({res['limits_longer_than_assumed']} jobs asked for a longer limit than the model assumes "
            f"from the imported run time, {res['limits_shorter_than_assumed']} for a shorter one)"
        )
    lines.append(
        f"- jobs the model starts within one scheduler pass (1 wall s) of Slurm: {m['start_within']} of "
        f"{res['jobs']} as it stands"
        + (
            f", {res['model_recorded_limits']['start_within']} with the recorded limits"
            if res.get("model_recorded_limits")
            else ""
        )
    )
    return lines


def render(results: list[dict], notes: str = "") -> str:
    lines = ["# The plain-Slurm model against Slurm's own history", "", INTRO, "", "## Runs", ""]
    for res in results:
        lines += [*section(res), ""]
    if notes:
        lines += [notes.strip(), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-scale", type=float, default=30.0)
    ap.add_argument("--first", type=int, default=None, help="only the trace's first N jobs")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--throughputs", default=None)
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--runs", type=int, default=16, help="simulations of the noise floor")
    ap.add_argument("--from-json", nargs="*", default=None, help="rewrite the doc from kept result.json files")
    ap.add_argument(
        "--recompute",
        nargs="*",
        default=None,
        help="kept runs' folders: the comparison again from their sacct.json (then the doc from them)",
    )
    ap.add_argument("--notes", default=None, help="a file appended to the doc (what the model does not capture)")
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    if args.recompute:
        results = [recompute(Path(p), args.runs) for p in args.recompute]
    elif args.from_json:
        results = [json.loads(Path(p).read_text()) for p in args.from_json]
    else:
        results = [run(args, lambda m: print(m, flush=True))]
    text = render(results, Path(args.notes).read_text() if args.notes else "")
    print(text)
    if not args.no_doc:
        DOC.write_text(text)
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
