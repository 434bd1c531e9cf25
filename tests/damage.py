"""Damage to a valid input file, for property tests of its readers (hypothesis draws): cut anywhere, a cell of a
delimited text or a value of a JSON document replaced by garbage, a key removed, a line repeated."""

from __future__ import annotations

import copy
import json

from hypothesis import strategies as st

CELLS = ["", "nan", "-1", "1e308", "inf", "abc", "9" * 30, "0", "\x00", '"', "1e-320", "1.5", "None", "2020-13-45 99:99"]
VALUES = [None, "nan", -1, 1e308, "abc", [], {}, True, 2**70, 0, 1.5, 1e-12, {"set": True, "infinite": True}]


def _paths(obj, path=()):
    """Every key or index path into a parsed JSON document."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield (*path, k)
        yield from _paths(v, (*path, k))


def damage(text: str, draw) -> str:
    """`text` (JSON, or lines of `|`- or `,`-separated cells) with one to three things broken (`draw`: st.data().draw)."""
    if draw(st.integers(0, 9)) == 0:
        return text[: draw(st.integers(0, len(text)))]
    if text.lstrip().startswith(("{", "[")):
        doc = json.loads(text)
        for _ in range(draw(st.integers(1, 3))):
            paths = list(_paths(doc))
            if not paths:
                break
            path = draw(st.sampled_from(paths))
            parent = doc
            for k in path[:-1]:
                parent = parent[k]
            if isinstance(parent, dict) and draw(st.booleans()):
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(VALUES)))  # never VALUES' own objects
        return json.dumps(doc)
    lines = text.split("\n")
    sep = "|" if "|" in lines[0] else ","
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        if draw(st.integers(0, 9)) == 0:
            lines.insert(i, lines[i])
            continue
        cells = lines[i].split(sep)
        cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(CELLS))
        lines[i] = sep.join(cells)
    return "\n".join(lines)
