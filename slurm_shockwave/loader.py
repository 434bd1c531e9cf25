"""The one reader of input files: the controller config, policy settings, `simulate`'s inputs, job specs.

`load(path)` reads and parses a file by its suffix (`.toml`, `.jsonl`: a list of the non-blank lines' JSON
values, `.yaml`/`.yml` when PyYAML is installed, anything else JSON); `read_text(path)` only reads it (for
line-oriented formats such as the reference `.trace`).  Every failure is an `InputFileError` whose text is
one line, `path[:line]: problem`: file not found, a directory, unreadable, not UTF-8 text, bad syntax.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

FORMATS = {".toml": "toml", ".jsonl": "jsonl", ".yaml": "yaml", ".yml": "yaml"}
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


class InputFileError(ValueError):
    """An input file that cannot be read or parsed; `str()` is one line, `path[:line]: problem`."""

    def __init__(self, path, problem: str, line: int = 0):
        super().__init__(f"{path}:{line}: {problem}" if line else f"{path}: {problem}")
        self.path, self.line, self.problem = path, line, problem


def read_text(path) -> str:
    """The file's text (UTF-8)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputFileError(path, "file not found") from None
    except IsADirectoryError:
        raise InputFileError(path, "is a directory, not a file") from None
    except OSError as e:
        raise InputFileError(path, f"cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputFileError(path, f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def load(path, fmt: str | None = None):
    """The parsed content of a file; `fmt` ("toml", "json", "jsonl", "yaml") overrides the suffix."""
    path = Path(path)
    return parse(read_text(path), path, fmt)


def parse(text: str, path, fmt: str | None = None):
    """Parse a file's text (already read with `read_text`), by `fmt` or the suffix of `path`."""
    path = Path(path)
    fmt = fmt or FORMATS.get(path.suffix.lower(), "json")
    if fmt == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            msg = str(e)
            at = _TOML_AT.search(msg)
            if at is None:
                raise InputFileError(path, f"bad TOML: {msg}") from None
            raise InputFileError(
                path, f"bad TOML: {msg[: at.start()]} (column {at.group(2)})", int(at.group(1))
            ) from None
    if fmt == "jsonl":
        return [_json(ln, path, n) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if fmt == "yaml":
        return _yaml(text, path)
    return _json(text, path, 1)


def _json(text: str, path: Path, first_line: int):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(path, f"bad JSON: {e.msg} (column {e.colno})", first_line + e.lineno - 1) from None
    except RecursionError:
        raise InputFileError(path, "bad JSON: nested too deeply", first_line) from None


def _yaml(text: str, path: Path):
    try:
        import yaml
    except ImportError:
        raise InputFileError(path, "reading YAML needs the PyYAML package; use TOML or JSON") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputFileError(path, f"bad YAML: {problem}", mark.line + 1 if mark else 0) from None
