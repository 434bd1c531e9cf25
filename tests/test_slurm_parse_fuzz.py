"""Property test of the readers of Slurm's output that the controller and `whatif` use (squeue, sinfo / nodes,
sshare, sprio of every recorded version in tests/data/slurm): whatever is done to a recorded output
(tests/damage.py), a reader either refuses it with one SlurmError line or returns what it read with every number
finite.
Damage of this kind found one crash (sshare --json with a number as a row's type: a TypeError, test_slurm_shares.py);
at 150 examples per file this test finds it too (at 60 it did not)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.damage import damage

from slurm_shockwave.slurm.errors import SlurmError
from slurm_shockwave.slurm.parse import parse_sinfo_json, parse_sprio_site, parse_squeue_json
from slurm_shockwave.slurm.shares import parse_sshare_json, parse_sshare_text

DATA = Path(__file__).resolve().parent / "data" / "slurm"
READERS = {"squeue": parse_squeue_json, "sinfo": parse_sinfo_json, "nodes": parse_sinfo_json, "sprio": parse_sprio_site}
CASES = sorted(
    (f"{v}/{f.name}", f)
    for v in ("22.05", "24.11", "26.05")
    for f in (DATA / v).iterdir()
    if f.name.split("_")[0] in READERS or f.name.startswith("sshare")
)
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _reader(path: Path):
    if path.name.startswith("sshare"):
        return parse_sshare_json if path.suffix == ".json" else parse_sshare_text
    return READERS[path.name.split("_")[0]]


def _finite(obj) -> None:
    if isinstance(obj, float):
        assert math.isfinite(obj), obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _finite(getattr(obj, f.name))
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _finite(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            _finite(x)


@pytest.mark.parametrize("name,path", CASES, ids=[n for n, _ in CASES])
@SETTINGS
@given(data=st.data())
def test_damaged_slurm_output_is_one_error_line_or_read_with_finite_numbers(name, path, data):
    text = damage(path.read_text(), data.draw)
    try:
        out = _reader(path)(text)
    except SlurmError as e:
        assert "\n" not in str(e).strip(), str(e)
        return
    _finite(out)
