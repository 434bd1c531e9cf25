"""Property tests: the reader never raises on content, and what it accepts obeys the schema."""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_shockwave.events import EventReader, summarize, validate
from slurm_shockwave.events.schema import (FIELD_SPECS, KINDS, MAX_LINE_BYTES, REQUIRED,
                                           SYSTEM_KINDS, Event, decode_line, encode_line,
                                           make_record)

JOB = "42"
NOW = 1_800_000_000.0
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_event(ev: Event, system: bool | None = None) -> None:
    """Every accepted event satisfies the schema."""
    assert ev.v == 1 and ev.kind in KINDS and ev.job == JOB
    assert math.isfinite(ev.ts) and 1e9 <= ev.ts <= NOW + 300
    if system is not None:
        assert (ev.kind in SYSTEM_KINDS) == system
    for name in REQUIRED.get(ev.kind, ()):
        assert getattr(ev, name) is not None
    for name, (typ, lo, hi) in FIELD_SPECS.items():
        val = getattr(ev, name)
        if val is None:
            continue
        if typ == "str":
            assert isinstance(val, str) and lo <= len(val) <= hi
        else:
            assert not isinstance(val, bool) and lo <= val <= hi
            assert isinstance(val, int) if typ == "int" else math.isfinite(val)
    if ev.epoch is not None and ev.total_epochs is not None:
        assert ev.epoch < ev.total_epochs
    if ev.throughput is not None:
        assert ev.throughput_bs is not None and ev.throughput_gpus is not None
    # round trip: the wire form of an accepted event is accepted again, unchanged
    again, reason = validate(json.loads(encode_line(ev.to_dict())), JOB, now=NOW)
    assert reason is None and again.to_dict() == ev.to_dict()


def _read_all(data: bytes, chunks: list[int] | None = None) -> tuple[list[Event], dict]:
    root = tempfile.mkdtemp(prefix="swfuzz-")
    try:
        os.mkdir(os.path.join(root, JOB))
        path = os.path.join(root, JOB, "events.jsonl")
        reader = EventReader(root, clock=lambda: NOW)
        events: list[Event] = []
        pos = 0
        for n in (chunks or []) + [len(data)]:
            with open(path, "ab") as fh:
                fh.write(data[pos:pos + n])
            pos = min(len(data), pos + n)
            events += reader.poll([JOB]).get(JOB, [])
        full = reader.read_job(JOB)
        def key(e):
            return (e.line_no, e.ts)
        assert [e.to_dict() for e in sorted(full.events, key=key)] == [
            e.to_dict() for e in sorted(events, key=key)]
        return events, dict(reader.rejected)
    finally:
        shutil.rmtree(root)


@SETTINGS
@given(st.binary(max_size=20000))
def test_arbitrary_bytes_never_raise(data):
    events, _ = _read_all(data)
    for ev in events:
        check_event(ev, system=False)


@SETTINGS
@given(st.lists(st.text(max_size=300), max_size=40), st.booleans())
def test_arbitrary_text_lines_never_raise(lines, trailing_newline):
    data = "\n".join(lines).encode("utf-8", "surrogatepass") + (b"\n" if trailing_newline else b"")
    for ev in _read_all(data)[0]:
        check_event(ev, system=False)


json_scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=4)
                           | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=10)
interesting = {
    "v": st.sampled_from([1, 1, 1, 2, 0, True, "1", 1.0]),
    "kind": st.sampled_from(sorted(KINDS) + ["bogus", ""]),
    "job": st.sampled_from([JOB, JOB, "43", "../42", "42_1", 42]),
    "ts": st.one_of(st.floats(0, 2e9), st.just(NOW), st.just(float("nan")), st.integers()),
    **{name: st.one_of(st.integers(-10, 2 * int(min(hi, 2**40))), st.floats(),
                       st.text(max_size=30), st.none())
       for name, (_typ, _lo, hi) in FIELD_SPECS.items()},
}


def valid_value(name):
    typ, lo, hi = FIELD_SPECS[name]
    if typ == "str":
        chars = st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_characters="\x7f")
        return st.text(chars, min_size=int(lo), max_size=min(int(hi), 30))
    if typ == "int":
        return st.integers(int(lo), int(min(hi, 1e6)))
    return st.floats(lo, min(hi, 1e6))


@st.composite
def event_like(draw):
    """Mostly valid records, then 0-3 random mutations (drop a key / odd value / extras)."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    obj = {"v": 1, "kind": kind, "job": JOB, "ts": draw(st.floats(1e9, NOW + 300)),
           "restart": draw(st.integers(0, 5))}
    names = list(REQUIRED.get(kind, ())) + draw(
        st.lists(st.sampled_from(sorted(FIELD_SPECS)), max_size=6, unique=True))
    for name in names:
        obj[name] = draw(valid_value(name))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(interesting)))
        if draw(st.booleans()):
            obj.pop(key, None)
        else:
            obj[key] = draw(interesting[key])
    if draw(st.booleans()):
        obj.update(draw(st.dictionaries(st.text(max_size=10), json_values, max_size=3)))
    return obj


@SETTINGS
@given(st.lists(event_like(), max_size=30), st.lists(st.integers(0, 400), max_size=8))
def test_json_objects_accepted_only_if_schema_valid(objs, chunks):
    lines = []
    for obj in objs:
        try:
            lines.append(json.dumps(obj, allow_nan=True).encode() + b"\n")
        except (TypeError, ValueError):
            continue
    data = b"".join(lines)
    events, rejected = _read_all(data, chunks)  # torn at random points: same result
    for ev in events:
        check_event(ev, system=False)
    assert len(events) + sum(rejected.values()) == sum(1 for ln in lines if ln.strip())
    summarize(events)


@SETTINGS
@given(st.sampled_from(sorted(KINDS)), st.dictionaries(st.sampled_from(sorted(FIELD_SPECS)),
                                                      st.integers(1, 50), max_size=6))
def test_valid_records_round_trip(kind, fields):
    fields = {k: v for k, v in fields.items() if FIELD_SPECS[k][0] != "str"}
    fields.pop("restart", None)
    for name in REQUIRED.get(kind, ()):
        fields.setdefault(name, "/x" if FIELD_SPECS[name][0] == "str" else 1)
    if "throughput" in fields:
        fields.update(throughput_bs=1, throughput_gpus=1)
    if "epoch" in fields and "total_epochs" in fields:
        fields["total_epochs"] = fields["epoch"] + 1
    if "min_batch_size" in fields and "max_batch_size" in fields:
        fields["max_batch_size"] = max(fields["max_batch_size"], fields["min_batch_size"])
    rec = make_record(kind, JOB, 0, NOW - 5, **fields)
    ev, reason = decode_line(encode_line(rec)[:-1], JOB, now=NOW)
    assert reason is None
    check_event(ev)
    assert len(encode_line(rec)) <= MAX_LINE_BYTES
