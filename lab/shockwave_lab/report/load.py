"""Read and merge the results files written by `shockwave simulate -o results.json`.

Each file is `{"workload", "gpus", "round_length", "results": {policy: {...}}, "reference": {name: {...}}}`.
Policies from several files are merged in the order the files are given; a policy present in two files is
taken from the later one (with a warning).  Anything unusable raises `ReportError` with a one-line message.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from solver.policies import policy_class, policy_names

# Metrics every policy's result must carry (the four bar panels).
REQUIRED_METRICS = ("makespan", "avg_jct", "worst_rho", "unfair_fraction")
# Metrics copied into the summary table when present.
TABLE_METRICS = ("jobs", "gpus", "makespan", "avg_jct", "worst_rho", "unfair_fraction", "unfair_fraction_1_1",
                 "ftf_dynamic_worst", "ftf_dynamic_p95", "ftf_dynamic_unfair",
                 "utilization", "rounds", "fallbacks", "wall_seconds", "decide_seconds")
REFERENCE_METRICS = ("makespan", "avg_jct", "worst_rho", "unfair_fraction", "utilization")


class ReportError(Exception):
    """Bad input: the message is one line and names the file."""


@dataclass
class Merged:
    """All policies of all results files, merged."""

    results: dict = field(default_factory=dict)       # policy -> result dict (as written by simulate)
    sources: dict = field(default_factory=dict)       # policy -> file it came from
    reference: dict = field(default_factory=dict)     # reference name -> {makespan, avg_jct, ...}
    files: list = field(default_factory=list)         # [{path, workload, gpus, round_length, policies}]
    warnings: list = field(default_factory=list)

    @property
    def policies(self) -> list[str]:
        return ordered(self.results)

    def reference_for(self, policy: str) -> dict | None:
        return self.reference.get(reference_name(policy))

    def reference_only(self) -> list[str]:
        """Reference rows that match none of our policies (e.g. shockwave when it was not simulated)."""
        used = {reference_name(p) for p in self.results}
        return [name for name in ordered(self.reference) if name not in used]

    def gpus_of(self, policy: str) -> int | None:
        g = self.results[policy].get("gpus")
        if isinstance(g, (int, float)) and g > 0:
            return int(g)
        for f in self.files:
            if f["path"] == self.sources[policy] and isinstance(f.get("gpus"), (int, float)) and f["gpus"] > 0:
                return int(f["gpus"])
        return None

    def table(self) -> list[dict]:
        """Metric rows: for each of our policies its row then its reference row, then reference-only rows."""
        rows = []
        for p in self.policies:
            r = self.results[p]
            rows.append({"policy": p, "label": label(p), "kind": "ours", "source": self.sources[p],
                         **{k: r[k] for k in TABLE_METRICS if k in r}})
            ref = self.reference_for(p)
            if ref:
                rows.append({"policy": p, "label": label(p), "kind": "reference", "reference_name": reference_name(p),
                             **{k: ref[k] for k in REFERENCE_METRICS if k in ref}})
        for name in self.reference_only():
            rows.append({"policy": name, "label": label(name), "kind": "reference", "reference_name": name,
                         **{k: self.reference[name][k] for k in REFERENCE_METRICS if k in self.reference[name]}})
        return rows


def known(name: str):
    """The registry's class of a results file's policy name (its name, an alias or its reference name), or
    None for a policy the registry does not know."""
    try:
        return policy_class(name)
    except ValueError:
        return None


def reference_name(policy: str) -> str | None:
    """The name of the same policy in the reference's shipped results."""
    cls = known(policy)
    return policy if cls is None else cls.reference_name


def label(policy: str) -> str:
    cls = known(policy)
    return policy if cls is None else cls.label


def ordered(names) -> list[str]:
    """Known policies in the registry's order (reference names too), others after them in their given order."""
    rank = {p: i for i, p in enumerate(policy_names())}
    names = list(names)
    return sorted(names, key=lambda n: (rank.get(getattr(known(n), "name", None), len(rank)), names.index(n)))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def read_results(path) -> dict:
    """One results file, checked enough for the report to be drawn from it."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ReportError(f"{path}: is a directory, expected a results JSON file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot read: {e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ReportError(f"{path}: not JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or "results" not in data:
        raise ReportError(f"{path}: no \"results\" object (expected the output of `shockwave simulate -o`)")
    results = data["results"]
    if not isinstance(results, dict) or not results:
        raise ReportError(f"{path}: \"results\" is empty or not an object of policy results")
    for policy, r in results.items():
        if not isinstance(r, dict):
            raise ReportError(f"{path}: results.{policy} is not an object")
        for k in REQUIRED_METRICS:
            if not _number(r.get(k)):
                raise ReportError(f"{path}: results.{policy}.{k} is missing or not a number")
        for k in ("jobs_detail", "utilization_timeline"):
            if k in r and not isinstance(r[k], list):
                raise ReportError(f"{path}: results.{policy}.{k} is not a list")
        for i, j in enumerate(r.get("jobs_detail", [])):
            if not isinstance(j, dict):
                raise ReportError(f"{path}: results.{policy}.jobs_detail[{i}] is not an object")
        for i, seg in enumerate(r.get("utilization_timeline", [])):
            if not (isinstance(seg, list) and len(seg) == 3 and all(_number(x) for x in seg)):
                raise ReportError(f"{path}: results.{policy}.utilization_timeline[{i}] is not [start, end, busy]")
    reference = data.get("reference") or {}
    if not isinstance(reference, dict) or not all(isinstance(v, dict) for v in reference.values()):
        raise ReportError(f"{path}: \"reference\" is not an object of reference rows")
    return data


def load_results(paths) -> Merged:
    """Merge several results files (later files win for a policy present twice)."""
    if not paths:
        raise ReportError("no results files given")
    merged = Merged()
    for path in paths:
        data = read_results(path)
        path = str(path)
        merged.files.append({"path": path, "workload": data.get("workload"), "gpus": data.get("gpus"),
                             "round_length": data.get("round_length"), "policies": list(data["results"])})
        for policy, r in data["results"].items():
            if policy in merged.results:
                merged.warnings.append(f"policy {policy} is in both {merged.sources[policy]} and {path}; "
                                       f"using {path}")
            merged.results[policy] = r
            merged.sources[policy] = path
        merged.reference.update({k: v for k, v in data.get("reference", {}).items()
                                 if all(_number(v.get(m)) for m in REQUIRED_METRICS)})
    for key in ("workload", "gpus", "round_length"):
        values = {str(f[key]) for f in merged.files if f[key] is not None}
        if len(values) > 1:
            merged.warnings.append(f"the results files differ in {key} ({', '.join(sorted(values))}); "
                                   f"their policies are not directly comparable")
    return merged
