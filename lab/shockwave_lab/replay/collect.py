"""The replay's real figures, from what the run left: Slurm's records, the jobs' events, the emulated programs'
timelines and the controller's journal; and the checks that make a replay fail loudly.

Times are converted to trace seconds (wall seconds x the time scale, from the moment the replay began
submitting = the trace's time 0), so they compare with the simulator's directly.

* JCT: from our `sbatch` call (Slurm resets a requeued job's submit time) to the wrapper's `exit` event of
  the run that completed the job (Slurm's end time, to the second, where there is none).
* restart cost of a preemption: from the controller's `release` of the requeued job (the journal's action,
  done at the start of the round that planned it again) to the moment the next run's program resumes its
  work (its timeline: process start-up, checkpoint load, and the wait for the GPUs the preempted jobs free).
  The simulator charges its `restart_penalty` the same way: a job that resumes at a round's start loses it.
* start latency (diagnostic, not charged by the simulator): a job's first run, from the later of its
  submission and its release to the start of its work: Slurm's scheduling latency plus process start.
* per-user GPU share: each user's share of the GPU-seconds of work done while every user had a job in the
  system (from the latest first arrival of a user to the earliest last completion), from the timelines.
* checks: every job COMPLETED, every epoch reported exactly once over all its runs (none lost, none
  repeated), the epochs' batch sizes as the schedule says.
* elastic jobs: each run's GPU count from the wrapper's `start` event (what `SHOCKWAVE_GPUS` told the program);
  `count_changes`: a first run on another count than the job asked for, and each run on another count than the run
  before (what Slurm did); `resizes`: the controller's own count (`ResizeLog`, its state's "resizes": the
  `shockwave_resizes_total{outcome}` metric); `requests`: each job's GPU requests its journal's `update_gpus` actions
  set (a change decided and then changed again before the job started shows there, not in its runs).  GPU-seconds
  (busy GPUs, per-user shares) count each run at its own count.
"""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

from slurm_shockwave.backends.base import JobRecord
from slurm_shockwave.events.reader import EventReader
from shockwave_lab.metrics import compute
from shockwave_lab.replay.errors import ReplayError


def _journal(root: Path) -> dict:
    db = root / "state" / "state.sqlite"
    out = {"release": {}, "rounds": [], "preemptions": {}, "resizes": {}, "requests": {}}
    if not db.exists():
        return out
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        for job, rc, ts in con.execute("SELECT job_id, restart_count, ts FROM actions WHERE verb='release' AND "
                                       "status='done' ORDER BY ts"):
            out["release"].setdefault((str(job), int(rc or 0)), []).append(float(ts))
        out["rounds"] = [float(t) for (t,) in con.execute("SELECT started FROM rounds WHERE started IS NOT NULL "
                                                         "ORDER BY round")]
        for key in ("preemptions", "resizes"):
            row = con.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
            if row:
                out[key] = (json.loads(row[0]) or {}).get("counts", {})
        for job, value in con.execute("SELECT job_id, value FROM actions WHERE verb='update_gpus' AND status='done' "
                                      "ORDER BY id"):
            per_node, _, nodes = json.loads(value).partition("/")     # [type:]N per node, /k on k nodes
            out["requests"].setdefault(str(job), []).append(int(per_node.split(":")[-1]) * int(nodes or 1))
    finally:
        con.close()
    return out


def _timeline(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def gather(replay) -> dict:
    """Everything measured in one run, per job; raises ReplayError on a lost or repeated epoch."""
    reader = EventReader(replay.store)
    journal = _journal(replay.root)
    problems, jobs = [], []
    for j in replay.jobs:
        sub = replay.submitted.get(j.name)
        if sub is None:
            problems.append(f"{j.name}: never submitted")
            continue
        jid = sub["job_id"]
        slurm = replay.ended.get(jid)
        events = reader.read_job(str(jid)).events
        epochs = Counter(int(e.epoch) for e in events if e.kind == "epoch_end")
        lost = sorted(set(range(j.epochs)) - set(epochs))
        repeated = sorted(e for e, n in epochs.items() if n > 1)
        extra = sorted(e for e in epochs if e >= j.epochs)
        if lost or repeated or extra:
            problems.append(f"{j.name} (job {jid}): epochs lost {lost[:10]}, repeated {repeated[:10]}, "
                            f"beyond the last {extra[:10]}")
        wrong_bs = sorted({int(e.epoch) for e in events if e.kind == "epoch_end" and int(e.epoch) < j.epochs
                           and int(e.batch_size) != j.schedule[int(e.epoch)]})
        if wrong_bs:
            problems.append(f"{j.name}: epochs {wrong_bs[:10]} reported at another batch size than the schedule's")
        exits = [e for e in events if e.kind == "exit" and e.exit_code == 0]
        finish = max(e.ts for e in exits) if exits else (slurm.end_time if slurm and slurm.end_time else None)
        tl = _timeline(replay.workdir(j.user) / f"{j.name}.timeline.jsonl")
        runs: dict[int, dict] = {}
        for rec in tl:
            runs.setdefault(int(rec["run"]), {})[rec["ev"]] = float(rec["t"])
        started = {int(e.restart): e.ts for e in events if e.kind == "start"}
        counts = [int(e.gpus or j.gpus) for e in sorted((e for e in events if e.kind == "start"),
                                                       key=lambda e: int(e.restart))]
        segments = [(r["work_start"], r.get("work_end", finish or r["work_start"]), gpus_of(tl, n, j.gpus))
                    for n, r in runs.items() if "work_start" in r]
        restart_costs, placement, startup = [], [], []
        for r, rec in sorted(runs.items()):
            if "work_start" not in rec:
                continue
            rel = [t for t in journal["release"].get((str(jid), r), []) if t <= rec["work_start"]]
            if r == 0:
                first = max([sub["submit"], *rel[-1:]])
                rec["latency"] = rec["work_start"] - first
                if 0 in started and started[0] <= rec["work_start"]:
                    rec["startup"] = rec["work_start"] - started[0]       # the program's own start, no queue
            elif rel:
                restart_costs.append(rec["work_start"] - rel[-1])
                if r in started and started[r] >= rel[-1]:
                    placement.append(started[r] - rel[-1])          # Slurm: a free node, the start, the launch
                    startup.append(rec["work_start"] - started[r])  # the program: start-up, checkpoint load
        sig = {int(e.restart): e.ts for e in events if e.kind == "signal" and (e.reason or "").startswith("checkpoint")}
        ends = {int(e.restart): e.ts for e in events if e.kind == "exit"}
        checkpoint_s = [ends[r] - t for r, t in sig.items() if r in ends and ends[r] >= t]
        jobs.append({"name": j.name, "job_id": jid, "user": j.user, "gpus": j.gpus, "submit": sub["submit"],
                     "finish": finish, "state": slurm.state if slurm else "?",
                     "restarts": slurm.restart_count if slurm else max(runs, default=0),
                     "segments": segments, "restart_costs": restart_costs, "checkpoint_s": checkpoint_s,
                     "placement_s": placement, "startup_s": startup,
                     "latency": runs.get(0, {}).get("latency"), "first_startup": runs.get(0, {}).get("startup"),
                     "epochs": sum(epochs.values()), "counts": counts,
                     "nodes": [r.get("node") for r in sorted(tl, key=lambda r: int(r["run"])) if r["ev"] == "work_start"],
                     "requests": journal["requests"].get(str(jid), []),
                     "count_changes": sum(a != b for a, b in zip([j.gpus, *counts], counts, strict=False))})
    if problems:
        raise ReplayError("the replay lost or repeated work:\n  " + "\n  ".join(problems[:20]))
    return {"jobs": jobs, "t0": replay.t0, "journal": {"preemptions": journal["preemptions"],
                                                     "rounds": len(journal["rounds"]), "resizes": journal["resizes"],
                                                     "gpu_updates": sum(map(len, journal["requests"].values()))},
            "root": str(replay.root), "slurm_version": replay.cluster.slurm_version}


def gpus_of(timeline: list[dict], run: int, asked: int) -> int:
    """The GPUs run `run` worked on (its timeline's `work_start`), else the job's own count."""
    for rec in timeline:
        if int(rec["run"]) == run and rec["ev"] == "work_start" and rec.get("gpus"):
            return int(rec["gpus"])
    return asked


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def user_share(intervals, arrivals: dict, finishes: dict) -> dict:
    """{user: share} of the GPU-seconds in `intervals` ((user, start, end, gpus), any unit) that fall in the
    window where every user has a job in the system (the latest first arrival to the earliest last finish;
    the whole run when that window is empty)."""
    users = sorted(arrivals)
    lo = max(min(a) for a in arrivals.values())
    hi = min(max(f) for f in finishes.values())
    if hi <= lo:
        lo, hi = float("-inf"), float("inf")
    used = {u: 0.0 for u in users}
    for u, a, b, g in intervals:
        x, y = max(a, lo), min(b, hi)
        if y > x:
            used[u] += (y - x) * g
    total = sum(used.values())
    return {u: (v / total if total else None) for u, v in used.items()}


def measure(raw: dict, jobs, scale: float, gpus: int, policy: str) -> dict:
    """The real column, in trace seconds: the simulator's metrics (metrics.compute) and the replay's own."""
    by = {j.name: j for j in jobs}
    t0 = raw["t0"]
    records, intervals, arrivals, finishes = [], [], {}, {}
    for r in raw["jobs"]:
        j = by[r["name"]]
        a, f = (r["submit"] - t0) * scale, (r["finish"] - t0) * scale
        busy = sum(y - x for x, y, _g in r["segments"]) * scale
        records.append(JobRecord(j.index, j.user, j.gpus, a, f, j.isolated_s, busy, 0, r["restarts"]))
        intervals += [(j.user, (x - t0) * scale, (y - t0) * scale, g) for x, y, g in r["segments"]]
        arrivals.setdefault(j.user, []).append(a)
        finishes.setdefault(j.user, []).append(f)
    m = compute(f"real {policy}", records, gpus, n_trace=len(jobs),
                busy_gpu_seconds=sum((y - x) * g for _u, x, y, g in intervals),
                start_time=min(j.arrival_s for j in jobs))
    costs = [c for r in raw["jobs"] for c in r["restart_costs"]]
    out = figures(m)
    out.update(restarts=sum(r["restarts"] for r in raw["jobs"]), user_share=user_share(intervals, arrivals, finishes),
               restart_cost_s=(_mean(costs) * scale if costs else None), restart_cost_n=len(costs),
               checkpoint_s=_mean([c * scale for r in raw["jobs"] for c in r["checkpoint_s"]]),
               restart_placement_s=_mean([c * scale for r in raw["jobs"] for c in r.get("placement_s", [])]),
               restart_startup_s=_mean([c * scale for r in raw["jobs"] for c in r.get("startup_s", [])]),
               start_latency_s=((_mean([r["latency"] for r in raw["jobs"]]) or 0.0) * scale
                                if policy != "slurm" else None),    # without a controller: the queue wait
               first_startup_s=_mean([r["first_startup"] * scale for r in raw["jobs"]
                                      if r.get("first_startup") is not None]),
               epochs=sum(r["epochs"] for r in raw["jobs"]))
    counts = raw["journal"].get("preemptions") or {}
    if counts:
        out["wasted_preemptions"] = counts.get("wasted", 0)
        out["preemptions"] = counts.get("preempted", 0)
    resizes = raw["journal"].get("resizes") or {}
    if resizes or any(j.gpus_range for j in jobs):
        out.update(resizes=resizes.get("started", 0), resizes_done=resizes.get("done", 0),
                   wasted_resizes=resizes.get("wasted", 0), gpu_updates=raw["journal"].get("gpu_updates", 0),
                   count_changes=sum(r.get("count_changes", 0) for r in raw["jobs"]))
    if any(not j.requeue for j in jobs):             # submitted with --no-requeue: the controller never restarts them
        out["no_requeue_restarts"] = sum(r["restarts"] for r in raw["jobs"] if not by[r["name"]].requeue)
    out["rounds"] = raw["journal"].get("rounds") or None
    out["per_job"] = {r["name"]: round((r["finish"] - r["submit"]) * scale, 1) for r in raw["jobs"]}
    out["jobs_detail"] = [{"name": r["name"], "job_id": r["job_id"], "user": r["user"], "gpus": r["gpus"],
                           "mode": by[r["name"]].mode, "model": by[r["name"]].model, "state": r["state"],
                           "epochs": f"{r['epochs']}/{by[r['name']].epochs}", "restarts": r["restarts"],
                           "counts": r.get("counts"), "requests": r.get("requests"),
                           "submit_s": round((r["submit"] - t0) * scale, 1),
                           "jct_s": round((r["finish"] - r["submit"]) * scale, 1)} for r in raw["jobs"]]
    out["completed"] = sum(r["state"] == "COMPLETED" for r in raw["jobs"])
    return out


def figures(m) -> dict:
    """The keys both columns share, from a metrics.Metrics."""
    return {"jobs": m.jobs, "makespan_s": m.makespan, "avg_jct_s": m.avg_jct, "worst_rho": m.worst_rho,
            "unfair_fraction": m.unfair_fraction, "ftf_dynamic_worst": m.ftf_dynamic_worst,
            "ftf_dynamic_p95": m.ftf_dynamic_p95, "ftf_dynamic_unfair": m.ftf_dynamic_unfair,
            "utilization": m.utilization}
