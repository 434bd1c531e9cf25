"""A job's own speed on each GPU type of a cluster of several types (the site gave ``controller.gpu_type_speeds``):
what its view says it would do on each type (`JobView.throughput_by_type`, solver/type_moves.py decides on it).

* Measured (`TypeRates`, kept in the state as "type_throughput"): while a job runs on a type, its last reported
  throughput over its batch size (iterations/s) at that batch size and GPU count, taken only when the run that
  reported it is the one running (its restart count, `JobProgress.last_throughput_run`, is Slurm's): a report of the
  run before a move is never taken for the type it moved to.
* Its relative speeds (`relative`): the site's speeds; over them its ``speed=v100x1/k80x0.3`` hint (slurm/hints.py:
  the types it lists at its factors, each other type at the site's speed times the hint's geometric-mean ratio to
  the site over the types both give); then its measured rates: each type it ran on at a batch size and count it also
  ran at on the reference type takes the measured ratio.  A type of the partition left without a speed: no speeds at
  all (no moves), as without the site's table.
* Its throughput on each type (`by_type`): the view's, read as on its reference type (the type it runs on; waiting:
  the fastest for it), times the relative speeds; but where it was measured at its batch size and count, the
  reference's rate is its measured one (on the reference type, else scaled from another type's): a job's events
  give one mean epoch time per batch size over every type it ran on, which says nothing of the type.
"""

from __future__ import annotations

import math

from slurm_shockwave.slurm.kept_rates import KeptRates, positive, saved_dict


class TypeRates(KeptRates):
    """Each job's measured iterations/s per GPU type at (batch size, GPUs), from its events, and the type of its last
    report taken (`last`; module docstring)."""

    KEY = "type_throughput"

    def __init__(self, state):
        super().__init__(state)
        saved = saved_dict(state, self.KEY)
        rates, last = saved.get("rates"), saved.get("last")
        self.by_job: dict[str, dict[str, dict[str, float]]] = {
            str(k): {str(t): dict(r) for t, r in v.items() if isinstance(r, dict)}
            for k, v in (rates.items() if isinstance(rates, dict) else ())
            if isinstance(v, dict)
        }
        self.last: dict[str, str] = {str(k): str(v) for k, v in (last.items() if isinstance(last, dict) else ())}

    def update(self, job, running_type: str | None, progress) -> None:
        """Record the running job's last report on the type it runs on, when the running run made it."""
        if running_type is None or job.state != "RUNNING" or progress.last_throughput_run != job.restart_count:
            return
        thr, bs, n = positive(progress.last_throughput), progress.last_throughput_bs, progress.last_throughput_gpus
        if thr is None or not isinstance(bs, int) or not isinstance(n, int) or bs < 1 or n < 1:
            return
        jid = str(job.job_id)
        entry = self.by_job.setdefault(jid, {}).setdefault(str(running_type), {})
        if entry.get(f"{bs}/{n}") != thr / bs or self.last.get(jid) != running_type:
            entry[f"{bs}/{n}"] = thr / bs
            self.last[jid] = str(running_type)
            self._dirty = True

    def of(self, job_id) -> dict[str, dict[tuple[int, int], float]]:
        """{type: {(batch size, GPUs): iterations/s}} of a job (values not finite and positive are dropped)."""
        out: dict[str, dict[tuple[int, int], float]] = {}
        for t, rates in self.by_job.get(str(job_id), {}).items():
            for key, v in rates.items():
                bs, _, n = str(key).partition("/")
                if bs.isdigit() and n.isdigit() and (r := positive(v)) is not None:
                    out.setdefault(t, {})[(int(bs), int(n))] = r
        return out

    def tables(self) -> tuple[dict, ...]:
        return self.by_job, self.last

    def saved(self):
        return {"rates": self.by_job, "last": self.last}


def relative(types, site: dict, hint=None, measured=None, ref: str | None = None) -> dict[str, float] | None:
    """{type: the job's relative speed} for every type of `types`, or None when one is left without (module
    docstring); `hint`: its ``speed=`` pairs; `measured`: `TypeRates.of`; `ref`: the type measured ratios are taken
    against (the type it runs or last ran on)."""
    return sourced(types, site, hint, measured, ref)[0]


def sourced(
    types, site: dict, hint=None, measured=None, ref: str | None = None
) -> tuple[dict[str, float] | None, dict[str, str]]:
    """(`relative`'s speeds, {type: where its speed comes from}): "site", "hint", "site, scaled to the hint" (a type
    the hint does not give), "measured" (a ratio to `ref` measured at the same batch size and count)."""
    rel = {t: float(site[t]) for t in types if positive(site.get(t)) is not None}
    why = dict.fromkeys(rel, "site")
    given = {t: f for t, f in (hint or ()) if t in types}
    if given:
        both = [math.log(f / rel[t]) for t, f in given.items() if t in rel]
        scale = math.exp(sum(both) / len(both)) if both else None
        rel = {**({t: s * scale for t, s in rel.items()} if scale is not None else {}), **given}
        why = {**dict.fromkeys(rel, "site, scaled to the hint"), **dict.fromkeys(given, "hint")}
    rates = measured or {}
    if ref in rel and ref in rates:
        for t, at in rates.items():
            common = sorted(set(at) & set(rates[ref]))
            if t != ref and t in types and common:
                rel[t] = rel[ref] * at[common[-1]] / rates[ref][common[-1]]
                why[t] = why[ref] = "measured"
    return (rel, why) if types and all(t in rel for t in types) else (None, {})


def describe(rel: dict, why: dict) -> str:
    """What status shows of a job's speeds: "v100 1 (site), k80 0.31 (measured)", fastest first, relative to it."""
    top = max(rel.values())
    return ", ".join(f"{t} {rel[t] / top:.2g} ({why.get(t, '?')})" for t in sorted(rel, key=lambda t: (-rel[t], t)))


def by_type(
    throughput: float, rel: dict, ref: str, key: tuple[int, int], measured=None, src: str | None = None
) -> dict[str, float]:
    """{type: iterations/s} of a job on each type of `rel`, read on its reference type `ref` at `key` (its batch
    size, its GPUs): its measured rate there (on `ref`, else on another type, scaled), else its view's `throughput`,
    taken as on `src` (the type of its last report taken; None: `ref`), scaled; then times the relative speeds."""
    at = {t: r[key] for t, r in (measured or {}).items() if key in r and t in rel}
    if ref in at:
        thr = at[ref]
    elif at:
        t = src if src in at else sorted(at)[-1]
        thr = at[t] * rel[ref] / rel[t]
    else:
        thr = throughput * rel[ref] / rel[src] if src in rel else throughput
    return {t: thr * s / rel[ref] for t, s in rel.items()}
