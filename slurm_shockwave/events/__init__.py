"""Job event store: schema v1, append-only writers, a defensive incremental reader.

Controller-facing API::

    from slurm_shockwave.events import EventReader, summarize, JobProgress
    reader = EventReader(root, system_uids=(0, slurm_uid))
    new = reader.poll({job_id: uid, ...})        # {job_id: [Event, ...]} since last call
    progress = summarize(all_events_of_job)      # JobProgress
"""
from slurm_shockwave.events.reader import EventReader, JobEvents
from slurm_shockwave.events.schema import (KINDS, MAX_LINE_BYTES, SCHEMA_VERSION, SYSTEM_KINDS, Event, JobIdError,
                     check_job_id, decode_line, encode_line, is_valid_job_id, make_record,
                     validate)
from slurm_shockwave.events.store import (FileRejected, ensure_job_dir, job_event_path, list_job_ids,
                    system_event_path)
from slurm_shockwave.events.summary import JobProgress, ProgressState, summarize
from slurm_shockwave.events.writer import EventWriter, append_event

__all__ = [
    "EventReader", "JobEvents", "Event", "JobProgress", "ProgressState", "summarize", "EventWriter",
    "append_event", "KINDS", "SYSTEM_KINDS", "SCHEMA_VERSION", "MAX_LINE_BYTES", "JobIdError",
    "check_job_id", "is_valid_job_id", "decode_line", "encode_line", "make_record", "validate",
    "FileRejected", "ensure_job_dir", "job_event_path", "system_event_path", "list_job_ids",
]
