"""Pure parsers for Slurm 22.05 CLI output (``squeue --json``, ``sinfo --json``, ``sprio``).

Facts about 22.05.8's JSON (OpenAPI ``v0.0.38``), from outputs recorded in
``tests/data/slurm/``:

* ``squeue --json`` ignores ``-t``/``-j``/``-u`` and always lists every job the controller
  still holds, finished ones included (for ``MinJobAge`` seconds); filter on the client.
* ``nice`` is ``null`` when 0; a negative nice is printed as uint32 (``-999`` ->
  ``4294966297``).
* No hold field: ``scontrol hold`` sets ``priority`` to 0 and ``state_reason`` to
  ``JobHeldAdmin`` (``JobHeldUser`` for a user hold; ``requeuehold`` shows
  ``job_requeued_in_held_state`` first).
* GPUs: ``--gres=gpu:N``/``--gpus-per-node=N`` -> ``tres_per_node: "gres:gpu:N"``,
  ``--gpus=N`` -> ``tres_per_job: "gres:gpu:N"``, ``--gpus-per-task`` -> ``tres_per_task``.
  ``tres_req_str``/``tres_alloc_str`` carry ``gres/gpu=N`` only if ``AccountingStorageTRES``
  lists ``gres/gpu``. A running job's ``gres_detail`` is e.g. ``["gpu:2(IDX:0-1)"]``.
* ``site_factor`` is absent (nor in ``scontrol show job`` or any ``squeue -O`` field);
  ``sprio -o '%i|%S'`` (weighted admin/site priority) shows it, but only for pending jobs whose
  priority factors were computed: eligible at submit, or after the next ``PriorityCalcPeriod``
  (not a future ``--begin``, a dependency or a job just released from a hold). The job's
  ``priority`` reflects a SiteFactor at once.
* Unset times are 0; ``time_limit`` is ``null`` when unset (minutes otherwise).
* Non-empty ``errors`` means the listing cannot be trusted.

Every parser raises :class:`SlurmError` on anything malformed instead of returning part of
the list.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable

from .errors import SlurmError, one_line
from .models import FINISHED_STATES, HELD_REASONS, SlurmJob, SlurmNode

_UINT32 = 2 ** 32
_INT32_MAX = 2 ** 31 - 1
_COUNT_RE = re.compile(r"^\d+$")


def _split_top(spec: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:2(IDX:0,2)`` stays whole)."""
    parts, depth, cur = [], 0, []
    for ch in spec:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _gpu_entry(item: str) -> tuple[str | None, int] | None:
    """``(type, count)`` of one GPU GRES/TRES item, or None if the item is not a GPU.

    Accepts ``gres:gpu:2``, ``gres/gpu:2``, ``gpu:2``, ``gpu``, ``gres:gpu:a100:2``,
    ``gres/gpu=2``, ``gres/gpu:a100=2``, ``gpu:(null):2(IDX:0-1)``.
    """
    item = item.replace("(null)", "").split("(", 1)[0]
    for prefix in ("gres:", "gres/"):
        if item.startswith(prefix):
            item = item[len(prefix):]
    if "=" in item:
        item, count_s = item.split("=", 1)
        item = f"{item}:{count_s}"
    fields = item.split(":")
    if fields[0] != "gpu":
        return None
    rest = fields[1:]
    if rest and _COUNT_RE.match(rest[-1]):
        count = int(rest[-1])
        rest = rest[:-1]
    else:
        count = 1
    gtype = rest[0] if rest and rest[0] not in ("", "(null)") else None
    return gtype, count


def parse_gpu_count(spec: str | None) -> int | None:
    """GPU count in a GRES/TRES string, or None if it names no GPU.

    If both an untyped and typed entries are present (``gres/gpu=4,gres/gpu:a100=4``) the
    untyped total wins; otherwise typed entries are summed.
    """
    if not spec:
        return None
    untyped, typed, seen = 0, 0, False
    for item in _split_top(spec):
        entry = _gpu_entry(item)
        if entry is None:
            continue
        seen = True
        if entry[0] is None:
            untyped += entry[1]
        else:
            typed += entry[1]
    if not seen:
        return None
    return untyped if untyped else typed


def _signed32(value: Any) -> int:
    """Undo 22.05's uint32 printing of negative numbers; ``None`` -> 0."""
    if value is None:
        return 0
    v = int(value)
    return v - _UINT32 if v > _INT32_MAX else v


def _time(value: Any) -> int | None:
    if value in (None, 0, ""):
        return None
    return int(value)


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _load(text: str | bytes, what: str, key: str) -> list:
    """Decode Slurm JSON, check ``errors`` is empty and ``key`` is a list; return it."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="strict")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError) as exc:
        raise SlurmError(f"{what}: output is not valid JSON ({exc}); head: {one_line(text[:200])!r}") from exc
    if not isinstance(data, dict):
        raise SlurmError(f"{what}: expected a JSON object, got {type(data).__name__}")
    errors = data.get("errors") or []
    if errors:
        raise SlurmError(f"{what}: Slurm reported errors: {one_line(json.dumps(errors))}")
    items = data.get(key)
    if not isinstance(items, list):
        raise SlurmError(f"{what}: no '{key}' list in output")
    return items


def _gpus_of(raw: dict) -> tuple[int, int | None]:
    """(total GPUs, GPUs per node or None) of a squeue job record."""
    nodes = int(raw.get("node_count") or 1)
    per_node = parse_gpu_count(raw.get("tres_per_node"))
    if per_node is not None:
        return per_node * nodes, per_node
    per_job = parse_gpu_count(raw.get("tres_per_job"))
    if per_job is not None:
        return per_job, None
    per_task = parse_gpu_count(raw.get("tres_per_task"))
    if per_task is not None:
        return per_task * int(raw.get("tasks") or 1), None
    for key in ("tres_alloc_str", "tres_req_str"):
        total = parse_gpu_count(raw.get(key))
        if total is not None:
            return total, None
    return 0, None


def job_from_dict(raw: dict) -> SlurmJob:
    """Build a :class:`SlurmJob` from one ``squeue --json`` record; raise on malformed input."""
    if not isinstance(raw, dict) or not isinstance(raw.get("job_id"), int):
        raise SlurmError(f"squeue --json: job record without an integer job_id: {one_line(repr(raw)[:200])}")
    try:
        state = _str(raw.get("job_state")).upper()
        reason = _str(raw.get("state_reason"))
        priority = int(raw.get("priority") or 0)
        gpus, gpus_per_node = _gpus_of(raw)
        held = state == "PENDING" and (reason in HELD_REASONS or priority == 0)
        held = held or (state not in FINISHED_STATES and reason in HELD_REASONS)
        return SlurmJob(
            job_id=raw["job_id"],
            name=_str(raw.get("name")),
            user=_str(raw.get("user_name")),
            user_id=raw.get("user_id"),
            account=_str(raw.get("account")),
            partition=_str(raw.get("partition")),
            state=state,
            state_reason=reason,
            gpus=gpus,
            gpus_per_node=gpus_per_node,
            num_nodes=int(raw.get("node_count") or 1),
            nodes=_str(raw.get("nodes")),
            priority=priority,
            nice=_signed32(raw.get("nice")),
            submit_time=_time(raw.get("submit_time")),
            eligible_time=_time(raw.get("eligible_time")),
            start_time=_time(raw.get("start_time")),
            end_time=_time(raw.get("end_time")),
            restart_count=int(raw.get("restart_cnt") or 0),
            comment=_str(raw.get("comment")),
            requeue=bool(raw.get("requeue")),
            held=held,
            site_factor=None,
            command=_str(raw.get("command")),
            working_dir=_str(raw.get("current_working_directory")),
            std_out=_str(raw.get("standard_output")),
            std_err=_str(raw.get("standard_error")),
            time_limit=raw.get("time_limit"),
            gres_detail=tuple(_str(g) for g in raw.get("gres_detail") or ()),
        )
    except (TypeError, ValueError) as exc:
        raise SlurmError(f"squeue --json: malformed record for job {raw.get('job_id')}: {exc}") from exc


def parse_squeue_json(text: str | bytes) -> list[SlurmJob]:
    """All jobs in ``squeue --json`` output, in Slurm's order. Raises SlurmError if malformed."""
    return [job_from_dict(raw) for raw in _load(text, "squeue --json", "jobs")]


def node_from_dict(raw: dict) -> SlurmNode:
    if not isinstance(raw, dict) or not raw.get("name"):
        raise SlurmError(f"sinfo --json: node record without a name: {one_line(repr(raw)[:200])}")
    try:
        return SlurmNode(
            name=_str(raw["name"]),
            state=_str(raw.get("state")).lower(),
            state_flags=tuple(_str(f).upper() for f in raw.get("state_flags") or ()),
            gpus=parse_gpu_count(raw.get("gres")) or 0,
            gpus_used=parse_gpu_count(raw.get("gres_used")) or 0,
            cpus=int(raw.get("cpus") or 0),
            alloc_cpus=int(raw.get("alloc_cpus") or 0),
            partitions=tuple(_str(p) for p in raw.get("partitions") or ()),
            reason=_str(raw.get("reason")),
            address=_str(raw.get("address")),
            port=raw.get("port"),
        )
    except (TypeError, ValueError) as exc:
        raise SlurmError(f"sinfo --json: malformed record for node {raw.get('name')}: {exc}") from exc


def parse_sinfo_json(text: str | bytes) -> list[SlurmNode]:
    """Nodes in ``sinfo --json`` output, one per node name (first record kept)."""
    nodes: dict[str, SlurmNode] = {}
    for raw in _load(text, "sinfo --json", "nodes"):
        node = node_from_dict(raw)
        nodes.setdefault(node.name, node)
    return list(nodes.values())


def parse_sprio_site(text: str) -> dict[int, int]:
    """``sprio -h -o '%i|%S'`` -> {job_id: site factor}. Raises on a malformed line."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 2 or not parts[0].isdigit():
            raise SlurmError(f"sprio: cannot parse line {line!r}")
        try:
            out[int(parts[0])] = int(float(parts[1]))
        except ValueError as exc:
            raise SlurmError(f"sprio: cannot parse line {line!r}") from exc
    return out


def parse_sbatch_parsable(text: str) -> int:
    """``sbatch --parsable`` prints ``<jobid>`` or ``<jobid>;<cluster>``."""
    first = (text or "").strip().splitlines()
    head = first[-1].split(";", 1)[0].strip() if first else ""
    if not head.isdigit():
        raise SlurmError(f"sbatch: no job id in output {one_line(text)!r}")
    return int(head)


def filter_jobs(jobs: Iterable[SlurmJob], job_ids: Iterable[int] | None = None,
                states: Iterable[str] | None = None) -> list[SlurmJob]:
    """Client-side filtering (22.05's ``squeue --json`` ignores ``-j``/``-t``)."""
    ids = {int(j) for j in job_ids} if job_ids is not None else None
    wanted = {s.upper() for s in states} if states is not None else None
    return [j for j in jobs
            if (ids is None or j.job_id in ids) and (wanted is None or j.state in wanted)]
