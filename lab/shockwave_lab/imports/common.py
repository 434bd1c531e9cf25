"""What every importer shares: the imported job, the checks of a row's values, the common drop/clip rules and the
one-line summary of what was dropped or clipped (docs/trace-import.md).

A reader (one module per source format) turns each row of its file into a `Row` (its own rules: which run of a
requeued job counts, which states mean "never started", ...) or drops it with a reason in the `Tally`; `admit` then
applies the rules every format shares: no GPUs, never started, zero run time, fractional GPUs, larger than the
cluster.  Bad input (a value that is not a number, NaN or infinite, negative, absurd) is a `WorkloadError` naming
the file, the row (line) and the field: one line, never a traceback.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from shockwave_lab.workload.errors import WorkloadError

#: a job asking for more GPUs than this is bad input, not a big job (the job spec's own bound)
MAX_GPUS = 100_000
#: seconds: no time or duration in any trace comes near (about 317 years)
MAX_SECONDS = 1e10
#: words that mean "no value" in the traces (sacct's Unknown/None, Philly's None, pandas' NaN never: it is an error)
MISSING = ("", "unknown", "none", "null", "n/a")


@dataclass(frozen=True)
class Row:
    """One job as its source defines it.  `submit` is seconds on the source's own clock (only differences are
    used); `runtime` the seconds of the run that counts (None: it never started or never finished, `unfinished`
    says which); `gpus` may be fractional (Alibaba PAI's plan_gpu) until `admit` rounds it."""

    id: str
    submit: float
    runtime: float | None
    gpus: float
    user: str | None = None
    account: str | None = None
    gpu_type: str | None = None
    preemptible: bool | None = None
    unfinished: bool = False  # started, still running when the trace was taken
    limit: float | None = None  # seconds: the time limit it asked (Slurm's TimeLimit); None: unknown or unlimited


class Tally:
    """Rows dropped and jobs clipped, by reason, in the order first seen."""

    def __init__(self):
        self.dropped: Counter[str] = Counter()
        self.clipped: Counter[str] = Counter()

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] += n

    def clip(self, reason: str, n: int = 1) -> None:
        self.clipped[reason] += n

    def summary(self, n: int, source) -> str:
        """`imported N jobs from FILE (dropped: 12 no GPUs, 3 never started; clipped: 1 over 64 GPUs)`."""
        parts = []
        for name, counts in (("dropped", self.dropped), ("clipped", self.clipped)):
            if counts:
                parts.append(f"{name}: " + ", ".join(f"{k} {reason}" for reason, k in counts.items()))
        return f"imported {n} job{'' if n == 1 else 's'} from {source}" + (f" ({'; '.join(parts)})" if parts else "")


@dataclass(frozen=True)
class Rules:
    """The choices a site makes on import (`shockwave trace import` options)."""

    max_gpus: int | None = None  # the cluster's GPUs: a larger job is dropped or clipped (`over`)
    over: str = "drop"  # drop | clip
    fractional: str = "round-up"  # round-up | drop (a job asking for a fraction of a GPU in all)


def admit(rows, tally: Tally, rules: Rules) -> list[Row]:
    """The rows that become jobs, with whole GPU counts; every other one counted in `tally` by reason."""
    out = []
    for r in rows:
        if r.gpus <= 0:
            tally.drop("no GPUs")
            continue
        if r.runtime is None:
            tally.drop("still running" if r.unfinished else "never started")
            continue
        if r.runtime <= 0:
            tally.drop("zero run time")
            continue
        gpus = r.gpus
        if gpus != int(gpus):
            if rules.fractional == "drop":
                tally.drop("fractional GPUs")
                continue
            tally.clip("fractional GPUs rounded up")
            gpus = max(1, math.ceil(gpus - 1e-9))  # a sliver of a GPU is one, never none
        gpus = int(gpus)
        if rules.max_gpus is not None and gpus > rules.max_gpus:
            if rules.over == "drop":
                tally.drop(f"over {rules.max_gpus} GPUs")
                continue
            tally.clip(f"over {rules.max_gpus} GPUs")
            gpus = rules.max_gpus
        out.append(replace(r, gpus=gpus))
    return out


# ------------------------------------------------------------------ checks of one row's values
def missing(text) -> bool:
    return text is None or (isinstance(text, str) and text.strip().lower() in MISSING)


def number(path, row, field: str, value, *, hi: float = MAX_SECONDS, what: str = "") -> float:
    """A finite number in [0, hi] from a cell (text or a JSON number); WorkloadError naming path, row and field."""
    if isinstance(value, bool) or value is None:
        raise WorkloadError(path, row, field, f"not a number: {value!r}")
    if isinstance(value, (int, float)):
        x = float(value)
    else:
        try:
            x = float(str(value).strip())
        except ValueError:
            raise WorkloadError(path, row, field, f"not a number: {value!r}") from None
    if not math.isfinite(x):
        raise WorkloadError(path, row, field, f"not a finite number: {value!r}")
    if x < 0:
        raise WorkloadError(path, row, field, f"must not be negative, got {value!r}")
    if x > hi:
        raise WorkloadError(path, row, field, f"{value!r} is absurd{what} (at most {hi:g})")
    return x


def gpus(path, row, field: str, value) -> float:
    return number(path, row, field, value, hi=MAX_GPUS, what=" for a GPU count")


def stamp(path, row, field: str, text) -> float | None:
    """Seconds since the epoch of a date-time cell (`2020-06-09 18:41:01`, `...T...`, with or without a UTC offset
    such as `+08:00`; no offset: read as UTC, only differences are used); None when the cell says there is none."""
    if missing(text):
        return None
    s = str(text).strip()
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        raise WorkloadError(path, row, field, f"not a date and time: {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


def span(path, row, start_field: str, start, end_field: str, end) -> float | None:
    """end - start (None if either is missing); an end before its start is an error naming the end's field."""
    if start is None or end is None:
        return None
    if end < start:
        raise WorkloadError(path, row, end_field, f"ends before its {start_field} ({end - start:g} s)")
    return end - start


#: sacct's words for a job without a limit of its own (none, or its partition's)
UNLIMITED = ("unlimited", "partition_limit", "invalid")


def time_limit(path, row, field: str, text) -> float | None:
    """Seconds of a Slurm time limit in any of sbatch's forms (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
    `D-HH:MM:SS`; sacct prints `HH:MM:SS` or `D-HH:MM:SS`); None for UNLIMITED, Partition_Limit, 0 (sbatch's "no
    limit") or a missing cell."""
    if missing(text) or str(text).strip().lower() in UNLIMITED:
        return None
    s = str(text).strip()
    if len(s) > 32:
        raise WorkloadError(path, row, field, f"not a time limit: {s[:32]!r}...")
    days, dash, clock = s.partition("-")
    if not dash:
        days, clock = "0", s
    parts = clock.split(":")
    if not days.isdigit() or not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise WorkloadError(path, row, field, f"not a time limit: {text!r}")
    n = [int(p) for p in parts]
    if dash:
        h, m, sec = (n + [0, 0])[:3]
    else:
        h, m, sec = {1: (0, n[0], 0), 2: (0, *n), 3: tuple(n)}[len(n)]
    seconds = 86400 * int(days) + 3600 * h + 60 * m + sec
    if seconds > MAX_SECONDS:
        raise WorkloadError(path, row, field, f"over {MAX_SECONDS:g} s: {text!r}")
    return float(seconds) or None


def name(value) -> str | None:
    """A user/account/type name from a cell (None when missing)."""
    if value is None or (isinstance(value, str) and missing(value)):
        return None
    s = str(value).strip()
    return s[:200] or None


def csv_rows(path, required, names=None):
    """(line, {column: cell}) for every data row of a CSV file.  With a header line, columns are found by name
    (`required` must be there, others are kept); a headerless file (Alibaba PAI's tables) gives `names`, and a
    first row equal to them is skipped.  A row with the wrong number of cells (a truncated file) is an error
    naming its line."""
    import csv
    import io

    from slurm_shockwave.loader import read_text

    text = read_text(path)
    reader = csv.reader(io.StringIO(text))
    header = list(names) if names else None
    rows = []
    try:
        for cells in reader:
            if not cells or not any(c.strip() for c in cells):
                continue
            line = reader.line_num
            if header is None or (names and line == 1 and [c.strip() for c in cells] == list(names)):
                header = [c.strip() for c in cells]
                lacking = [c for c in required if c not in header]
                if lacking:
                    raise WorkloadError(path, line, "header", f"missing column(s) {', '.join(lacking)}")
                continue
            if len(cells) != len(header):
                raise WorkloadError(
                    path,
                    line,
                    "row",
                    f"expected {len(header)} comma-separated fields, found {len(cells)} (a truncated file?)",
                )
            rows.append((line, dict(zip(header, cells, strict=True))))
    except csv.Error as e:
        raise WorkloadError(path, reader.line_num, "row", f"not CSV: {e}") from None
    if header is None:
        raise WorkloadError(path, 0, "file", "empty")
    return rows
