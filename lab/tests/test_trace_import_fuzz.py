"""Property test of every importer (docs/trace-import.md): whatever is done to a valid file of its format
(tests/damage.py: cut anywhere, a cell or a JSON value replaced by garbage, a key removed, a line repeated), `load`
either refuses it with one line that names the file, or returns jobs whose every number is finite, whole GPU
counts in [1, MAX_GPUS] and run times above 0, and `to_entries` makes job-spec entries of them: never a traceback.
Damage of this kind found two crashes (sacct --json with a number or a list where an object belongs; a sliver of a
GPU rounded up to no GPU: test_trace_import_public.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.damage import damage

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.imports import load
from shockwave_lab.imports.common import MAX_GPUS
from shockwave_lab.imports.entries import to_entries
from shockwave_lab.workload.throughputs import ThroughputTable
from slurm_shockwave.loader import InputFileError

DATA = Path(__file__).resolve().parent / "data" / "imports"
CASES = [
    ("sacct-json", "sacct_22.05.json"),
    ("sacct-json", "sacct_26.05.json"),
    ("sacct", "sacct_24.11.txt"),
    ("sacct", "sacct_22.05_steps.txt"),
    ("philly", "philly_cluster_job_log.json"),
    ("helios", "helios_cluster_log.csv"),
    ("acme", "acme_trace_kalos.csv"),
    ("pai", "pai_job_table.csv"),
    ("alibaba-spot", "alibaba_spot_job_info_df.csv"),
    ("alibaba-openb", "alibaba_openb_pod_list.csv"),
    ("pollux-philly", "pollux_philly.csv"),
]
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
TABLE = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")


@pytest.mark.parametrize("fmt,name", CASES, ids=[n for _, n in CASES])
@SETTINGS
@given(data=st.data())
def test_any_damage_to_a_valid_file_is_refused_in_one_line_or_gives_valid_jobs(tmp_path, fmt, name, data):
    path = tmp_path / name
    path.write_text(damage((DATA / name).read_text(), data.draw))
    extra = {"tasks": DATA / "pai_task_table.csv"} if fmt == "pai" else {}
    try:
        rows, tally = load(fmt, path, **extra)
    except InputFileError as e:  # WorkloadError (a row's value) is one too
        assert str(e).startswith(str(path)) and "\n" not in str(e)
        return
    for r in rows:
        for v in (r.submit, r.runtime, r.gpus, *(() if r.limit is None else (r.limit,))):
            assert isinstance(v, (int, float)) and math.isfinite(v), r
        assert isinstance(r.gpus, int) and 1 <= r.gpus <= MAX_GPUS and r.runtime > 0, r
    assert "\n" not in tally.summary(len(rows), path)
    if rows:
        for e in to_entries(rows, TABLE):
            assert e["gpus"] >= 1 and e["total_steps"] >= 1 and math.isfinite(e["arrival"]), e
