"""Pure parsers for Slurm CLI output (``squeue --json``, ``sinfo --json``/``scontrol show nodes
--json``, ``sprio``) of every supported version (22.05, 24.11, 26.05; shapes in :mod:`.shapes`).

Facts about 22.05.8's JSON (OpenAPI ``v0.0.38``), from outputs recorded in
``tests/data/slurm/22.05/`` (newer versions: numbers as ``{set, infinite, number}``,
``job_state`` a list, a ``hold`` field, ``squeue -j/-t`` still listing everything):

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

Only a wholly unreadable output raises :class:`SlurmError` (not JSON, ``errors`` non-empty, no
list): one bad record yields a job with ``problem`` set (or is skipped when even its id is
unreadable), so the caller can quarantine that job instead of failing the round.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from slurm_shockwave.slurm.errors import SlurmError, one_line
from slurm_shockwave.slurm.gpu_types import gpu_entry as _gpu_entry
from slurm_shockwave.slurm.gpu_types import gpus_by_type, request_type
from slurm_shockwave.slurm.gpu_types import split_top as _split_top
from slurm_shockwave.slurm.hints import signal_value
from slurm_shockwave.slurm.models import FINISHED_STATES, HELD_REASONS, SlurmJob, SlurmNode
from slurm_shockwave.slurm.shapes import (
    JobRecord,
    Meta,
    NodeRecord,
    SprioRow,
    check_job_fields,
    check_node_fields,
    check_version,
    job_state_of,
    log,
    node_state_of,
    output_version,
    warn_once,
)
from slurm_shockwave.validation import describe

_UINT32 = 2**32
_INT32_MAX = 2**31 - 1
#: ``--signal=X`` / ``--signal X`` in 26.05's ``submit_line`` (printed space-joined, unquoted), before ``--wrap``
_SUBMIT_SIGNAL = re.compile(r"(?:^|\s)--signal(?:=|\s+)(\S+)")


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


def _time(value: int | None) -> int | None:
    return None if not value else int(value)


class NoNodeList(SlurmError):
    """``sinfo --json`` of Slurm >= 23.x: no per-node list (use ``scontrol show nodes --json``)."""


def _load_data(text: str | bytes, what: str, key: str) -> tuple[list, Meta]:
    """Decode Slurm JSON, check ``errors`` is empty and ``key`` is a list; return it and the
    declared version. Only a wholly unreadable output raises :class:`SlurmError`."""
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
    meta = output_version(data)
    if not isinstance(items, list):
        if key == "nodes" and isinstance(data.get("sinfo"), list):
            raise NoNodeList(
                f"{what}: Slurm {meta.release or '>= 23'} `sinfo --json` has no per-node list; "
                "read nodes with `scontrol show nodes --json`"
            )
        raise SlurmError(f"{what}: no '{key}' list in output")
    check_version(meta, what)
    return items, meta


def _load(text: str | bytes, what: str, key: str) -> list:
    return _load_data(text, what, key)[0]


def _gpus_of(rec: JobRecord) -> tuple[int, int | None]:
    """(total GPUs, GPUs per node or None) of a squeue job record."""
    nodes = rec.node_count or 1
    per_node = parse_gpu_count(rec.tres_per_node)
    if per_node is not None:
        return per_node * nodes, per_node
    per_job = parse_gpu_count(rec.tres_per_job)
    if per_job is not None:
        return per_job, None
    per_task = parse_gpu_count(rec.tres_per_task)
    if per_task is not None:
        return per_task * (rec.tasks or 1), None
    for spec in (rec.tres_alloc_str, rec.tres_req_str):
        total = parse_gpu_count(spec)
        if total is not None:
            return total, None
    return 0, None


def _validation_line(exc: ValidationError) -> str:
    return "; ".join(describe(exc)[:3])


def _problem_job(job_id: int, raw: dict, problem: str) -> SlurmJob:
    """A stand-in for a record that could not be read: only the id is trusted."""

    def text(key: str) -> str:
        v = raw.get(key)
        return v if isinstance(v, str) else ""

    return SlurmJob(
        job_id=job_id,
        name=text("name"),
        user=text("user_name"),
        user_id=None,
        account=text("account"),
        partition=text("partition"),
        state="UNKNOWN",
        state_reason="",
        gpus=0,
        gpus_per_node=None,
        num_nodes=1,
        nodes="",
        priority=0,
        nice=0,
        submit_time=None,
        eligible_time=None,
        start_time=None,
        end_time=None,
        restart_count=0,
        comment=text("comment"),
        requeue=False,
        held=False,
        site_factor=None,
        command="",
        working_dir="",
        std_out="",
        std_err="",
        time_limit=None,
        admin_comment=text("admin_comment"),
        problem=one_line(problem, 300),
    )


def job_from_record(rec: JobRecord) -> SlurmJob:
    """The job of one record, with its GPU request, type and constraint (slurm/gpu_types.py)."""
    state, flags = job_state_of(rec.job_state)
    reason = rec.state_reason
    priority = rec.priority or 0
    gpus, gpus_per_node = _gpus_of(rec)
    held = bool(rec.hold) and state not in FINISHED_STATES
    held = held or (state == "PENDING" and (reason in HELD_REASONS or priority == 0))
    held = held or (state not in FINISHED_STATES and reason in HELD_REASONS)
    request = rec.tres_per_node or rec.tres_per_job or rec.tres_per_task
    return SlurmJob(
        job_id=rec.job_id,
        name=rec.name,
        user=rec.user_name,
        user_id=rec.user_id,
        account=rec.account,
        partition=rec.partition,
        state=state,
        state_reason=reason,
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        num_nodes=rec.node_count or 1,
        nodes=rec.nodes,
        priority=priority,
        nice=_signed32(rec.nice),
        submit_time=_time(rec.submit_time),
        eligible_time=_time(rec.eligible_time),
        start_time=_time(rec.start_time),
        end_time=_time(rec.end_time),
        restart_count=rec.restart_cnt or 0,
        comment=rec.comment,
        requeue=rec.requeue is not False,  # not shown: Slurm's default (JobRequeue=1)
        held=held,
        site_factor=None,
        command=rec.command,
        working_dir=rec.current_working_directory,
        std_out=rec.standard_output,
        std_err=rec.standard_error,
        time_limit=rec.time_limit,
        gres_detail=tuple(rec.gres_detail),
        admin_comment=rec.admin_comment,
        problem=None,
        state_flags=flags,
        required_nodes=rec.required_nodes,
        gpu_request=request,
        gpu_type=request_type(request)[0],
        features=rec.features,
    )


def job_from_dict(raw: Any, meta: Meta | None = None) -> SlurmJob | None:
    """A :class:`SlurmJob` from one ``squeue --json`` record of any supported version.

    A record that cannot be read gives a job with ``problem`` set if its ``job_id`` is a
    positive integer, else ``None`` (logged); it never raises.
    """
    meta = meta or Meta()
    if not isinstance(raw, dict):
        warn_once(
            f"squeue-record:{type(raw).__name__}",
            f"squeue --json: skipped a record that is not an object: {one_line(repr(raw)[:120])}",
        )
        return None
    check_job_fields(raw, meta)
    try:
        job = job_from_record(JobRecord.model_validate(raw))
        line = raw.get("submit_line")
        m = _SUBMIT_SIGNAL.search(line.split(" --wrap")[0]) if isinstance(line, str) else None
        return replace(job, signal=signal_value(m.group(1)) or "") if m else job
    except ValidationError as exc:
        problem = f"unreadable squeue record (Slurm {meta.release or '?'}): {_validation_line(exc)}"
    except (TypeError, ValueError, OverflowError) as exc:
        problem = f"unreadable squeue record (Slurm {meta.release or '?'}): {exc}"
    job_id = raw.get("job_id")
    if isinstance(job_id, int) and not isinstance(job_id, bool) and job_id > 0:
        log.warning("squeue --json: job %s: %s", job_id, problem)
        return _problem_job(job_id, raw, problem)
    log.warning("squeue --json: skipped a record without a readable job_id: %s", problem)
    return None


def parse_squeue_json(text: str | bytes) -> list[SlurmJob]:
    """All jobs in ``squeue --json`` output (any supported version), in Slurm's order.

    Raises SlurmError only for a wholly unreadable output (not JSON, ``errors`` non-empty, no
    ``jobs`` list); a bad record becomes a job with ``problem`` set, or is skipped (logged).
    """
    return parse_squeue_meta(text)[0]


def parse_squeue_meta(text: str | bytes) -> tuple[list[SlurmJob], Meta]:
    """:func:`parse_squeue_json` plus the version the output declares."""
    items, meta = _load_data(text, "squeue --json", "jobs")
    jobs = (job_from_dict(raw, meta) for raw in items)
    return [j for j in jobs if j is not None], meta


def squeue_version(text: str | bytes) -> str:
    """Major.minor that an output declares (``""`` if none); never raises."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return ""
    return output_version(data).version if isinstance(data, dict) else ""


def node_from_dict(raw: Any, meta: Meta | None = None) -> SlurmNode | None:
    """A :class:`SlurmNode` from a 22.05 ``sinfo --json`` or newer ``scontrol show nodes --json``
    record; ``None`` (logged) if it cannot be read."""
    meta = meta or Meta()
    if not isinstance(raw, dict):
        log.warning("nodes --json: skipped a record that is not an object")
        return None
    check_node_fields(raw, meta)
    try:
        rec = NodeRecord.model_validate(raw)
    except ValidationError as exc:
        log.warning("nodes --json: skipped unreadable node %r: %s", raw.get("name"), _validation_line(exc))
        return None
    state, flags = node_state_of(rec.state, rec.state_flags)
    return SlurmNode(
        name=rec.name,
        state=state,
        state_flags=flags,
        gpus=parse_gpu_count(rec.gres) or 0,
        gpus_used=parse_gpu_count(rec.gres_used) or 0,
        cpus=rec.cpus or 0,
        alloc_cpus=rec.alloc_cpus or 0,
        partitions=tuple(rec.partitions),
        reason=rec.reason,
        address=rec.address,
        port=rec.port,
        by_type=tuple(sorted(gpus_by_type(rec.gres).items())),
        features=rec.active_features or rec.features,
    )


def parse_sinfo_json(text: str | bytes) -> list[SlurmNode]:
    """Nodes in 22.05's ``sinfo --json`` or a newer ``scontrol show nodes --json``, one per
    node name (first record kept). A node that cannot be read is skipped (logged); a wholly
    unreadable output, or one without any readable node although it lists some, raises."""
    items, meta = _load_data(text, "nodes --json", "nodes")
    nodes: dict[str, SlurmNode] = {}
    for raw in items:
        node = node_from_dict(raw, meta)
        if node is not None:
            nodes.setdefault(node.name, node)
    if items and not nodes:
        raise SlurmError(f"nodes --json: none of the {len(items)} node records could be read")
    return list(nodes.values())


parse_nodes_json = parse_sinfo_json


def parse_sprio_site(text: str) -> dict[int, int]:
    """``sprio -h -o '%i|%S'`` -> {job_id: site factor} (rows checked by :class:`SprioRow`). A
    malformed line means the format is not the one asked for: raises."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 2 or not parts[0].isdigit():
            raise SlurmError(f"sprio: cannot parse line {line!r}")
        try:
            factor = float(parts[1])
            site_factor = int(factor) if factor.is_integer() else factor  # a fraction: rejected (StrictInt)
            row = SprioRow.model_validate({"job_id": int(parts[0]), "site_factor": site_factor})
        except (ValueError, OverflowError, ValidationError) as exc:
            raise SlurmError(f"sprio: cannot parse line {line!r}") from exc
        out[row.job_id] = row.site_factor
    return out


def parse_sbatch_parsable(text: str) -> int:
    """``sbatch --parsable`` prints ``<jobid>`` or ``<jobid>;<cluster>``."""
    first = (text or "").strip().splitlines()
    head = first[-1].split(";", 1)[0].strip() if first else ""
    if not head.isdigit():
        raise SlurmError(f"sbatch: no job id in output {one_line(text)!r}")
    return int(head)


def filter_jobs(
    jobs: Iterable[SlurmJob], job_ids: Iterable[int] | None = None, states: Iterable[str] | None = None
) -> list[SlurmJob]:
    """Client-side filtering (22.05's ``squeue --json`` ignores ``-j``/``-t``)."""
    ids = {int(j) for j in job_ids} if job_ids is not None else None
    wanted = {s.upper() for s in states} if states is not None else None
    return [j for j in jobs if (ids is None or j.job_id in ids) and (wanted is None or j.state in wanted)]
