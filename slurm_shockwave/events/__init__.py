"""Job event store: schema v1, append-only writers, a defensive incremental reader.

Controller-facing API::

    from slurm_shockwave.events import EventReader, summarize, JobProgress
    reader = EventReader(root, system_uids=(0, slurm_uid))
    new = reader.poll({job_id: uid, ...})        # {job_id: [Event, ...]} since last call
    progress = summarize(all_events_of_job)      # JobProgress
"""

from slurm_shockwave.events.progress import JobProgress
from slurm_shockwave.events.reader import EventReader, JobEvents
from slurm_shockwave.events.schema import (
    KINDS,
    MAX_LINE_BYTES,
    SCHEMA_VERSION,
    SYSTEM_KINDS,
    Event,
    JobIdError,
    check_job_id,
    decode_line,
    encode_line,
    is_valid_job_id,
    make_record,
    validate,
)
from slurm_shockwave.events.store import FileRejected, ensure_job_dir, job_event_path, list_job_ids, system_event_path
from slurm_shockwave.events.summary import ProgressState, summarize
from slurm_shockwave.events.writer import EventWriter, append_event

# fmt: off
__all__ = ["KINDS", "MAX_LINE_BYTES", "SCHEMA_VERSION", "SYSTEM_KINDS", "Event", "EventReader", "EventWriter",
           "FileRejected", "JobEvents", "JobIdError", "JobProgress", "ProgressState", "append_event", "check_job_id",
           "decode_line", "encode_line", "ensure_job_dir", "is_valid_job_id", "job_event_path", "list_job_ids",
           "make_record", "summarize", "system_event_path", "validate"]
# fmt: on
