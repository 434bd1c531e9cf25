"""The comparison `shockwave whatif` reports: per account and per user, under the site's Slurm and under the
default, the jobs, mean and median wait (first start - submit), mean and median JCT (finish - submit), worst and
95th-percentile dynamic finish-time fairness (metrics.dynamic_ftf: the job's JCT against the GPU-time share it was
entitled to while it lived) and GPU share; and the jobs that gain or lose most (JCT under the default - under Slurm).

GPU share: each group's share of the GPU-seconds held **while the cluster was contended** (some job that had
arrived was not running): when every job runs at once any split is what the jobs ask for, so only contended time
says who the scheduler favoured.  A history that never contends counts all GPU-seconds (`contended_s` 0).  The
shares of one grouping sum to 1.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics

from shockwave_lab.metrics import percentile
from shockwave_lab.whatif.run import Run

GROUPS = ("account", "user")
FIELDS = ("wait_mean_s", "wait_median_s", "jct_mean_s", "jct_median_s", "ftf_worst", "ftf_p95", "gpu_share")


def contended(run: Run) -> list[tuple[float, float]]:
    """Disjoint sorted intervals where some arrived, unfinished job was not running."""
    delta: dict = {}
    for j in run.jobs.values():
        delta[j.arrival] = delta.get(j.arrival, 0) + 1
        delta[j.finish] = delta.get(j.finish, 0) - 1
    for _jid, a, b, _g in run.usage:
        delta[a] = delta.get(a, 0) - 1
        delta[b] = delta.get(b, 0) + 1
    out: list = []
    waiting = 0
    times = sorted(delta)
    for t0, t1 in itertools.pairwise(times):
        waiting += delta[t0]
        if waiting > 0 and t1 > t0:
            if out and out[-1][1] == t0:
                out[-1] = (out[-1][0], t1)
            else:
                out.append((t0, t1))
    return out


def gpu_shares(run: Run, group: str) -> tuple[dict, float]:
    """({group: share of the contended GPU-seconds}, contended seconds); all GPU-seconds when never contended."""
    windows = contended(run)
    starts = [a for a, _b in windows]
    of = {jid: getattr(j, group) for jid, j in run.jobs.items()}
    held: dict = dict.fromkeys(sorted(set(of.values())), 0.0)
    for jid, a, b, g in run.usage:
        if jid not in of:
            continue
        if not windows:
            held[of[jid]] += (b - a) * g
            continue
        for k in range(max(0, bisect.bisect_right(starts, a) - 1), len(windows)):
            lo, hi = windows[k]
            if lo >= b:
                break
            held[of[jid]] += max(0.0, min(b, hi) - max(a, lo)) * g
    total = sum(held.values())
    return ({k: v / total for k, v in held.items()} if total > 0 else dict.fromkeys(held, 0.0)), sum(
        b - a for a, b in windows
    )


def _stats(jobs: list, share: float) -> dict:
    waits = [j.wait for j in jobs]
    jcts = [j.jct for j in jobs]
    ftf = [j.ftf for j in jobs if math.isfinite(j.ftf)]
    return {
        "jobs": len(jobs),
        "wait_mean_s": statistics.fmean(waits),
        "wait_median_s": statistics.median(waits),
        "jct_mean_s": statistics.fmean(jcts),
        "jct_median_s": statistics.median(jcts),
        "ftf_worst": max(ftf, default=math.nan),
        "ftf_p95": percentile(ftf, 95) if ftf else math.nan,
        "gpu_share": share,
    }


def compare(slurm: Run, default: Run, top: int = 10) -> dict:
    """The report's data: `overall`, `by_account`, `by_user` ({name: {"slurm": stats, "default": stats}}), `gain`
    and `lose` (the `top` jobs whose JCT drops / grows most under the default), `contended_s` per run."""
    if set(slurm.jobs) != set(default.jobs):
        missing = sorted(set(slurm.jobs) ^ set(default.jobs))[:5]
        raise RuntimeError(f"the two simulations finished different jobs (e.g. {missing})")
    out: dict = {"jobs": len(slurm.jobs), "contended_s": {}}
    for g in GROUPS:
        table: dict = {}
        for key, run in (("slurm", slurm), ("default", default)):
            shares, span = gpu_shares(run, g)
            out["contended_s"][key] = span
            by: dict = {}
            for j in run.jobs.values():
                by.setdefault(getattr(j, g), []).append(j)
            for name in sorted(by):
                table.setdefault(name, {})[key] = _stats(by[name], shares.get(name, 0.0))
        out[f"by_{g}"] = table
    out["overall"] = {
        key: _stats(list(run.jobs.values()), 1.0) for key, run in (("slurm", slurm), ("default", default))
    }
    deltas = []
    for jid, s in slurm.jobs.items():
        d = default.jobs[jid]
        deltas.append(
            {
                "job": jid,
                "user": s.user,
                "account": s.account,
                "gpus": s.gpus,
                "runtime_s": s.runtime,
                "wait_slurm_s": s.wait,
                "wait_default_s": d.wait,
                "jct_slurm_s": s.jct,
                "jct_default_s": d.jct,
                "jct_change_s": d.jct - s.jct,
            }
        )
    deltas.sort(key=lambda x: (x["jct_change_s"], x["job"]))
    out["gain"] = [x for x in deltas[:top] if x["jct_change_s"] < 0]
    out["lose"] = [x for x in reversed(deltas[-top:]) if x["jct_change_s"] > 0]
    out["runs"] = {
        key: {"policy": run.policy, "rounds": run.rounds}  # wall times: the command's `timings`
        for key, run in (("slurm", slurm), ("default", default))
    }
    out["per_job"] = deltas
    return out
