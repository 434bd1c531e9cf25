"""Plain Slurm's own history against its model (issue 35): `sacct --json` of a plain-Slurm replay, imported, run
through the `slurm-multifactor` model at the replay site's settings, and compared job by job.

* `capture(replay, path)`: the `Replay` hook (run.py `after_jobs`, called once every job ended, the cluster still
  up): waits until slurmdbd shows every submitted job in a final state, then writes `sacct --json -a -D -S <the
  replay's start - 60 s> -E now` to `path` (each job's `steps` list emptied, as the recorded test data: not read).
* `read_history(path)`: the import (imports/ `load("sacct-json")`: arrival, run time of the run that finished,
  GPUs, user, account) and, from the same file, what the importer does not keep: each job's name (the replay
  submits trace job `t007` as `--job-name=t007`), its first start and its last end, and its time limit.
* `model_runs(...)`: the imported jobs as job-spec entries (imports/entries.py: the reference model at the measured
  run time), in trace seconds (wall x the time scale), simulated by `slurm-multifactor` with site.py
  `model_settings` on the cluster's nodes, rounds of its scheduler pass, no start cost (Slurm's run time holds the
  program's start-up): each job's first start (the round it first runs in) and finish.  With `limits` the model
  takes each job's time limit from sacct instead of its own assumption (1.5 x the run time alone at the first
  batch size): an adaptive job's real run is shorter than that, so the model's assumption from the imported run
  time is shorter than what the user asked.
* `fidelity(path, ...)`: per job |model - Slurm| of start and end (trace seconds), median and p90, Slurm's median
  wait (start - submit), the ratio median start error / median wait (the target: under 10%), the same with
  Slurm's recorded limits, and the noise floor: `runs` simulations with every arrival moved by up to 1 wall s
  (compare.py `spread`), against the unmoved model and against Slurm, for the model with either limits.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from shockwave_lab.baselines.slurm_multifactor import SlurmConfig, SlurmMultifactor
from shockwave_lab.imports import Rules, load
from shockwave_lab.imports.entries import to_entries
from shockwave_lab.imports.slurm_runs import FINISHED
from shockwave_lab.replay.errors import ReplayError
from shockwave_lab.replay.site import model_round_s, model_settings
from shockwave_lab.simulate import load_workload, run_simulation

MODEL = "slurm-multifactor"
NO_VAL = 0xFFFFFFFE
#: the target: the model's median start error under this share of Slurm's median wait
TARGET = 0.10


# ------------------------------------------------------------------ sacct, while the cluster is up
def capture(replay, path: Path, timeout: float = 180.0) -> str:
    """Write the cluster's `sacct --json` to `path` once every job the replay submitted shows a final state."""
    cluster = replay.cluster
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(replay.t0 - 60))
    names = set(replay.submitted)
    deadline = time.monotonic() + timeout
    while True:
        r = cluster.run(["sacct", "-a", "-X", "-n", "-P", "-S", since, "-E", "now", "-o", "JobName,State"])
        done = {
            ln.split("|")[0] for ln in r.stdout.splitlines() if "|" in ln and ln.split("|")[1].split(" ")[0] in FINISHED
        }
        if r.returncode == 0 and names <= done:
            break
        if time.monotonic() > deadline:
            raise ReplayError(
                f"sacct shows {len(names - done)} job(s) not finished {timeout:.0f} s after the last "
                f"ended: {sorted(names - done)[:5]} ({r.stderr.strip()[-200:]})"
            )
        time.sleep(1.0)
    r = cluster.run(["sacct", "--json", "-a", "-D", "-S", since, "-E", "now"], timeout=120)
    if r.returncode != 0:
        raise ReplayError(f"sacct --json failed: {r.stderr.strip()[-300:]}")
    data = json.loads(r.stdout)
    for job in data.get("jobs", []):
        job["steps"] = []
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    return str(path)


# ------------------------------------------------------------------ the history
@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm ran it (epoch seconds)."""

    job_id: str
    name: str
    submit: float
    start: float
    end: float
    limit_s: float | None  # its time limit, wall seconds (None: unlimited or not shown)
    runs: int  # 1 + its requeues


def _num(v):
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite"):
            return None
        v = v.get("number")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v >= NO_VAL:
        return None
    return float(v)


def _ident(job: dict) -> str:
    """The importer's id of a job object (sacct_json.py): `<array job>_<task>`, `<het job>+<offset>` or its id."""
    array, het = job.get("array") or {}, job.get("het") or {}
    if _num(array.get("job_id")) and _num(array.get("task_id")) is not None:
        return f"{int(_num(array['job_id']))}_{int(_num(array['task_id']))}"
    if _num(het.get("job_id")) and _num(het.get("job_offset")) is not None:
        return f"{int(_num(het['job_id']))}+{int(_num(het['job_offset']))}"
    return str(int(_num(job["job_id"])))


def read_history(path) -> tuple[list, dict[str, SlurmJob]]:
    """(the imported rows, {job id: SlurmJob} of those rows) of a `sacct --json` file."""
    rows, _tally = load("sacct-json", path, Rules())
    data = json.loads(Path(path).read_text())
    runs: dict[str, list[dict]] = {}
    for job in data["jobs"]:
        runs.setdefault(_ident(job), []).append(job)
    out = {}
    for r in rows:
        group = sorted(runs[r.id], key=lambda j: _num(j["time"].get("start")) or 0.0)
        first, last = group[0], group[-1]
        out[r.id] = SlurmJob(
            r.id,
            str(last.get("name") or r.id),
            r.submit,
            _num(first["time"]["start"]),
            _num(last["time"]["end"]),
            r.limit,  # the importer's (sacct_json.py, slurm_runs.py)
            len(group),
        )
    return rows, out


# ------------------------------------------------------------------ the model
def workload(rows, table, scale: float, path: Path):
    """The imported jobs in trace seconds as job-spec entries (written to `path`, JSON Lines) and their JobSpecs."""
    scaled = [dataclasses.replace(r, submit=r.submit * scale, runtime=r.runtime * scale) for r in rows]
    entries = to_entries(scaled, table)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return load_workload(path, table, None)


def model_runs(specs, table, gpus: int, nodes: int, scale: float, limits: dict | None = None) -> dict:
    """{job id: (first start, finish)} in trace seconds of the model on `specs`."""
    from shockwave_lab.sim.cluster import SimulatedCluster
    from slurm_shockwave.controller.loop import RoundLoop

    if limits is None:
        r = run_simulation(
            specs,
            table,
            gpus,
            MODEL,
            round_length=model_round_s(scale),
            policy_config=model_settings(scale),
            keep_round_log=True,
            restart_penalty=0.0,
            gpus_per_node=gpus // nodes,
            mode="authoritative",
        )
        records, finished = r.round_log, r.records
    else:  # the same loop as run_simulation's, with the recorded limits
        cluster = SimulatedCluster(
            specs, table, gpus, round_length=model_round_s(scale), restart_penalty=0.0, gpus_per_node=gpus // nodes
        )
        loop = RoundLoop(
            cluster,
            SlurmMultifactor(SlurmConfig(**model_settings(scale)), limits),
            keep_records=True,
            mode="authoritative",
        )
        loop.run()
        records, finished = loop.records, cluster.finished
    start: dict = {}
    for rec in records:
        for jid in rec.decision.run:
            start.setdefault(str(jid), float(rec.view.now))
    return {str(f.job_id): (start[str(f.job_id)], float(f.finish_time)) for f in finished}


# ------------------------------------------------------------------ the comparison
def pct(values, q: float) -> float:
    """The q-th percentile (0-100), linear between ranks."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def errors(real: dict, model: dict, tol: float = 0.0) -> dict:
    """Figures of |model - real| per job; `real` and `model`: {job id: (start, end)} in trace seconds; `start_within`:
    the jobs whose start error is at most `tol` (one scheduler pass)."""
    ids = sorted(real)
    missing = [i for i in ids if i not in model]
    if missing:
        raise ReplayError(f"the model did not run {len(missing)} job(s): {missing[:5]}")
    ds = [model[i][0] - real[i][0] for i in ids]
    de = [model[i][1] - real[i][1] for i in ids]
    return {
        "jobs": len(ids),
        "start_median_s": pct([abs(x) for x in ds], 50),
        "start_p90_s": pct([abs(x) for x in ds], 90),
        "start_mean_signed_s": statistics.fmean(ds),
        "end_median_s": pct([abs(x) for x in de], 50),
        "end_p90_s": pct([abs(x) for x in de], 90),
        "end_mean_signed_s": statistics.fmean(de),
        "start_within": sum(abs(x) <= tol + 1e-6 for x in ds),
    }


def fidelity(
    path, throughputs, gpus: int, nodes: int, scale: float, runs: int = 16, seed: int = 0, out_dir: Path | None = None
) -> dict:
    """Slurm's history in `path` (sacct --json of a replay at time scale `scale`) against the model."""
    from shockwave_lab.workload.throughputs import ThroughputTable

    table = ThroughputTable.load(throughputs)
    rows, hist = read_history(path)
    if not rows:
        raise ReplayError(f"{path}: no finished GPU job to compare")
    t0 = min(r.submit for r in rows)
    real = {i: ((j.start - t0) * scale, (j.end - t0) * scale) for i, j in hist.items()}
    waits = [(j.start - j.submit) * scale for j in hist.values()]
    out_dir = Path(out_dir or Path(path).parent)
    specs = workload(rows, table, scale, out_dir / (Path(path).stem + ".jobs.jsonl"))
    model = model_runs(specs, table, gpus, nodes, scale)
    limits = {i: j.limit_s * scale for i, j in hist.items() if j.limit_s is not None}
    head = errors(real, model, scale)
    wait = statistics.median(waits)
    res = {
        "sacct": str(path),
        "jobs": len(rows),
        "time_scale": scale,
        "gpus": gpus,
        "nodes": nodes,
        "names": {i: j.name for i, j in hist.items()},
        "requeued": sum(j.runs > 1 for j in hist.values()),
        "wait_median_s": wait,
        "wait_p90_s": pct(waits, 90),
        "waited": sum(w > scale for w in waits),
        "model": head,
        "ratio": head["start_median_s"] / wait if wait > 0 else None,
        "per_job": {
            i: {
                "name": hist[i].name,
                "submit": round((hist[i].submit - t0) * scale, 1),
                "slurm": [round(x, 1) for x in real[i]],
                "model": [round(x, 1) for x in model[i]],
            }
            for i in sorted(real, key=lambda i: real[i][0])
        },
    }
    if limits:
        recorded = model_runs(specs, table, gpus, nodes, scale, limits)
        with_limits = errors(real, recorded, scale)
        res["model_recorded_limits"] = with_limits
        for i, job in res["per_job"].items():
            job["model_recorded_limits"] = [round(x, 1) for x in recorded[i]]
            job["limit"] = limits.get(i)
        res["ratio_recorded_limits"] = with_limits["start_median_s"] / wait if wait > 0 else None
        unit = model_settings(scale)["time_limit_unit_s"]
        assumed = {str(s.job_id): unit * math.ceil(1.5 * s.isolated_runtime / unit - 1e-9) for s in specs}
        res["limits_longer_than_assumed"] = sum(limits[i] > assumed[i] + 1e-6 for i in limits if i in assumed)
        res["limits_shorter_than_assumed"] = sum(limits[i] < assumed[i] - 1e-6 for i in limits if i in assumed)
    res["spread"] = spread(specs, table, gpus, nodes, scale, real, model, runs, seed)
    if limits:
        res["spread_recorded_limits"] = spread(specs, table, gpus, nodes, scale, real, recorded, runs, seed, limits)
    return res


def spread(specs, table, gpus, nodes, scale, real, model, runs: int, seed: int, limits: dict | None = None) -> dict:
    """The noise floor: `runs` simulations, every arrival moved by a uniform draw in [0, scale] trace s (up to 1
    wall s, as compare.spread), against the unmoved model and against Slurm: median [min - max] over the runs."""
    rng = random.Random(seed)
    vs_model, vs_slurm = [], []
    for _ in range(runs):
        moved = [dataclasses.replace(s, arrival_time=s.arrival_time + rng.uniform(0.0, scale)) for s in specs]
        got = model_runs(moved, table, gpus, nodes, scale, limits)
        vs_model.append(errors(model, got))
        vs_slurm.append(errors(real, got))
    out = {"runs": runs, "jitter_s": scale, "start_median_each_s": [round(f["start_median_s"], 1) for f in vs_slurm]}
    for name, figs in (("vs_model", vs_model), ("vs_slurm", vs_slurm)):
        out[name] = {
            k: {
                "median": statistics.median(f[k] for f in figs),
                "min": min(f[k] for f in figs),
                "max": max(f[k] for f in figs),
            }
            for k in ("start_median_s", "start_p90_s", "end_median_s", "end_p90_s")
        }
    return out
