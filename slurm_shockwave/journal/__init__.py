"""The controller's durable journal: SQLite state (rounds, decisions, actions, jobs) and its faults."""

from slurm_shockwave.journal.faults import check_state_db, state_db_error, storage_problem
from slurm_shockwave.journal.store import StateStore

__all__ = ["StateStore", "check_state_db", "state_db_error", "storage_problem"]
