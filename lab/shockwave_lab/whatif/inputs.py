"""What `shockwave whatif` reads: a site's history (`sacct --json` through the importers), its cluster (`scontrol
show nodes --json` / 22.05's `sinfo --json`: GPUs per node and type), its priority settings (`scontrol show config`)
and its association shares (`sshare -a -P ...` or `sshare -a --json`), from files or from the cluster itself.

Every problem is one line naming the file (InputFileError / WorkloadError / ValueError from here); the command
prints it as `Error: ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from shockwave_lab.imports import Rules, Tally, load
from shockwave_lab.imports.common import Row
from slurm_shockwave.loader import InputFileError, read_text

#: what the importers call the two sacct formats
HISTORY_FORMATS = ("sacct-json", "sacct")
#: the type name of GPUs a node lists without a type, on a cluster whose other nodes name theirs
UNTYPED = "untyped"


@dataclass(frozen=True)
class Cluster:
    """GPUs per type (`{solver.types.GPU: n}` for an untyped cluster), the GPUs of each node when every GPU node has
    the same number (else None: each type one pool), and the GPU nodes counted."""

    capacity: dict
    gpus_per_node: int | None
    nodes: int
    source: str
    by_node: tuple = ()  # (node, type, GPUs) as read

    @property
    def typed(self) -> bool:
        from solver.types import GPU

        return set(self.capacity) != {GPU}

    @property
    def total(self) -> int:
        return sum(self.capacity.values())


@dataclass
class Site:
    """The site's priority settings as `scontrol show config` prints them (the ones the model reads)."""

    weight_age: int = 0
    weight_fairshare: int = 0
    weight_job_size: int = 0
    weight_partition: int = 0
    weight_qos: int = 0
    max_age_s: float = 7 * 86400.0
    decay_half_life_s: float = 7 * 86400.0
    calc_period_s: float = 300.0
    favor_small: bool = False
    fair_tree: bool = True  # PriorityFlags without NO_FAIR_TREE (Slurm's default since 19.05)
    priority_type: str = "priority/multifactor"
    preempt: bool = False  # PreemptMode REQUEUE (or CANCEL) with a PreemptType other than preempt/none
    job_requeue: bool = True  # JobRequeue: a job that asked neither --requeue nor --no-requeue may be requeued
    bf_window_s: float = 86400.0
    bf_max_job_test: int = 100
    source: str = "defaults"
    unread: list = field(default_factory=list)  # settings read but not modelled, with their values


# ------------------------------------------------------------------ history
def load_history(path, fmt: str = "sacct-json", max_gpus: int | None = None) -> tuple[list[Row], Tally]:
    """The jobs of a sacct file that ran (importers' rules, docs/trace-import.md) and the tally of the rest; a job
    larger than `max_gpus` (the cluster) is dropped and counted."""
    if fmt not in HISTORY_FORMATS:
        raise ValueError(f"--format: one of {', '.join(HISTORY_FORMATS)}, got {fmt!r}")
    rows, tally = load(fmt, path, Rules(max_gpus=max_gpus))
    if not rows:
        raise InputFileError(path, f"no job of the history ran on GPUs ({tally.summary(0, Path(path).name)})")
    return rows, tally


# ------------------------------------------------------------------ cluster
def cluster_of(nodes, source: str) -> Cluster:
    """The Cluster of SlurmNodes (slurm_shockwave.slurm.models): every node with GPUs, whatever its state now (the
    history ran on it; a node down today may not have been)."""
    from solver.types import GPU

    rows = []
    for n in nodes:
        by_type = dict(n.by_type) or ({GPU: n.gpus} if n.gpus else {})
        for t, g in sorted(by_type.items()):
            if g > 0:
                rows.append((n.name, str(t).lower() if t != GPU else GPU, int(g)))
    if not rows:
        raise InputFileError(source, "no node with GPUs (gres gpu) in it")
    types = {t for _n, t, _g in rows}
    if len(types) > 1 and GPU in types:  # some nodes name their type, others do not
        rows = [(n, UNTYPED if t == GPU else t, g) for n, t, g in rows]
    capacity: dict = {}
    per_node: dict = {}
    for name, t, g in rows:
        capacity[t] = capacity.get(t, 0) + g
        per_node[name] = per_node.get(name, 0) + g
    sizes = {g for _n, _t, g in rows}
    one_type_per_node = len(per_node) == len(rows)
    gpn = sizes.pop() if len(sizes) == 1 and one_type_per_node else None
    return Cluster(dict(sorted(capacity.items())), gpn, len(per_node), source, tuple(rows))


def read_nodes(path) -> Cluster:
    """`scontrol show nodes --json` (23.x and newer) or 22.05's `sinfo --json`, as the product parses them."""
    from slurm_shockwave.slurm.errors import SlurmError
    from slurm_shockwave.slurm.parse import parse_sinfo_json

    text = read_text(path)
    try:
        nodes = parse_sinfo_json(text)
    except SlurmError as e:
        raise InputFileError(path, str(e).splitlines()[0] if str(e) else "not a nodes --json output") from None
    return cluster_of(nodes, str(path))


# ------------------------------------------------------------------ priority settings
_DURATION = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def duration_s(text: str, minutes: bool = True) -> float:
    """Slurm's time format in seconds: `7-00:00:00`, `00:05:00`, `5` (minutes, as slurm.conf reads a bare number),
    `14-0`; ValueError otherwise."""
    s = text.strip()
    if s.upper() in ("NONE", "0", ""):
        return 0.0
    m = _DURATION.match(s)
    if not m:
        raise ValueError(f"not a Slurm duration: {text!r}")
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        parts += [0] * (3 - len(parts))
        return int(days) * 86400.0 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    if len(parts) == 1:
        return parts[0] * (60.0 if minutes else 1.0)
    if len(parts) == 2:  # MM:SS
        return parts[0] * 60.0 + parts[1]
    return parts[0] * 3600.0 + parts[1] * 60 + parts[2]


def parse_config(text: str, source: str = "scontrol show config") -> Site:
    """A Site from `scontrol show config` (`Key = Value` lines; any version).  A value the model needs that cannot
    be read is an error naming the key."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            values.setdefault(key.strip(), value.strip())
    if "PriorityType" not in values and not any(k.startswith("PriorityWeight") for k in values):
        raise ValueError(f"{source}: no PriorityType or PriorityWeight* line (not `scontrol show config` output?)")
    site = Site(source=source)

    def whole(key, attr):
        if key in values:
            try:
                v = int(values[key])
            except ValueError:
                raise ValueError(f"{source}: {key}: not a whole number: {values[key]!r}") from None
            if not 0 <= v < 2**32:
                raise ValueError(f"{source}: {key}: out of range: {v}")
            setattr(site, attr, v)

    def seconds(key, attr):
        if key in values:
            try:
                setattr(site, attr, duration_s(values[key]))
            except ValueError as e:
                raise ValueError(f"{source}: {key}: {e}") from None

    whole("PriorityWeightAge", "weight_age")
    whole("PriorityWeightFairShare", "weight_fairshare")
    whole("PriorityWeightFairshare", "weight_fairshare")
    whole("PriorityWeightJobSize", "weight_job_size")
    whole("PriorityWeightPartition", "weight_partition")
    whole("PriorityWeightQOS", "weight_qos")
    seconds("PriorityMaxAge", "max_age_s")
    seconds("PriorityDecayHalfLife", "decay_half_life_s")
    seconds("PriorityCalcPeriod", "calc_period_s")
    site.favor_small = values.get("PriorityFavorSmall", "No").strip().lower() in ("yes", "1", "true")
    flags = {f.strip().upper() for f in values.get("PriorityFlags", "").split(",") if f.strip()}
    site.fair_tree = "NO_FAIR_TREE" not in flags
    site.priority_type = values.get("PriorityType", site.priority_type)
    if site.priority_type != "priority/multifactor":  # priority/basic: first come, first served (+ backfill)
        site.weight_age = site.weight_fairshare = site.weight_job_size = 0
    mode = values.get("PreemptMode", "OFF").upper()
    ptype = values.get("PreemptType", "preempt/none").lower()
    site.preempt = ptype != "preempt/none" and any(m in mode for m in ("REQUEUE", "CANCEL"))
    site.job_requeue = values.get("JobRequeue", "1").strip() != "0"
    for part in values.get("SchedulerParameters", "").split(","):
        k, _, v = part.strip().partition("=")
        try:
            if k == "bf_window":
                site.bf_window_s = max(60.0, int(v) * 60.0)
            elif k == "bf_max_job_test":
                site.bf_max_job_test = max(1, int(v))
        except ValueError:
            raise ValueError(f"{source}: SchedulerParameters: {k}: not a number: {v!r}") from None
    for key in ("PriorityWeightPartition", "PriorityWeightQOS", "PriorityWeightAssoc", "PriorityWeightTRES"):
        v = values.get(key)
        if v not in (None, "0", "(null)", ""):
            site.unread.append(f"{key}={v}")
    if flags - {"NO_FAIR_TREE"}:
        site.unread.append("PriorityFlags=" + ",".join(sorted(flags - {"NO_FAIR_TREE"})))
    return site


def read_config(path) -> Site:
    try:
        return parse_config(read_text(path), str(path))
    except ValueError as e:
        raise InputFileError(path, str(e).removeprefix(f"{path}: ")) from None


# ------------------------------------------------------------------ shares
def read_shares(path) -> list:
    """ShareRows of `sshare -a --json` or `sshare -a -P -o Account,User,RawShares,...` (slurm/shares.py)."""
    from slurm_shockwave.slurm.shares import SharesError, parse_sshare_json, parse_sshare_text

    text = read_text(path)
    try:
        rows = parse_sshare_json(text) if text.lstrip().startswith("{") else parse_sshare_text(text)
    except SharesError as e:
        raise InputFileError(path, str(e)) from None
    if not rows:
        raise InputFileError(path, "no associations (sshare of a cluster without accounting?)")
    return rows


# ------------------------------------------------------------------ the cluster itself
def from_slurm(cli, start: str, end: str, out_dir: Path) -> tuple[Path, Cluster, Site, list]:
    """Run `sacct --json -a -D -S START -E END`, the nodes query, `scontrol show config` and sshare through the
    product's SlurmCLI; the history is written to `out_dir/sacct.json` (the importers read files)."""
    from slurm_shockwave.slurm.shares import read_shares as sshare

    history = Path(out_dir) / "sacct.json"
    history.write_text(cli.run(["sacct", "--json", "-a", "-D", "-S", start, "-E", end], timeout=600).stdout)
    cluster = cluster_of(cli.sinfo_nodes(), "scontrol show nodes --json")
    site = parse_config(cli.run(["scontrol", "show", "config"]).stdout)
    try:
        shares = sshare(cli)
    except Exception:  # noqa: BLE001 - no accounting: every association gets one share (said in the report)
        shares = []
    return history, cluster, site, shares
