"""Slurm's association tree, its shares and its decayed usage: one ``sshare`` call, parsed by version.

* 22.05 has no ``sshare --json`` (``unrecognized option``): :data:`TEXT_ARGV`, ``|``-separated with a header; the
  tree is in the Account column's leading spaces (one per level below root), a user row (User set) hangs under the
  account named on it. ``RawShares`` is a count or ``parent``; ``LevelFS`` is ``inf`` before any usage; account
  rows have no FairShare.
* 24.11 and 26.05: :data:`JSON_ARGV` (data_parser v0.0.42 / v0.0.45): ``shares.shares`` is a list of rows with
  ``name``, ``parent``, ``type`` (``["USER"]`` or ``["ASSOCIATION"]``; a USER row's name is the user and its
  parent the account), ``shares`` / ``shares_normalized`` / ``effective_usage`` / ``fairshare.factor`` /
  ``fairshare.level`` as ``{set, infinite, number}`` objects and ``usage`` (RawUsage) a plain number. An infinite
  LevelFS is ``infinite: true`` on 24.11 and the number 2**64 on 26.05; account rows' FairShare is 0 in JSON.
* Without accounting both forms answer with no rows (text: the header only; JSON: ``"shares": []``).

``RawUsage`` is Slurm's decayed usage in billing units (``TRESBillingWeights``; CPUs when unset), the figure Fair
Tree ranks by; a job's usage is added to it when the job ends (with ``AccountingStorageEnforce=limits``) but a
running job's only at each ``PriorityCalcPeriod`` tick, whereas ``NormUsage`` (RawUsage over the cluster's, JSON
``usage_normalized``) is recomputed only at the ticks, for every association at once: a consistent picture, at most
one period old.  Every number is validated finite and non-negative (``inf`` LevelFS becomes None).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from slurm_shockwave.slurm.errors import SlurmError
from slurm_shockwave.slurm.shapes import _num, _table

TEXT_FIELDS = (
    "Account",
    "User",
    "RawShares",
    "NormShares",
    "RawUsage",
    "NormUsage",
    "EffectvUsage",
    "FairShare",
    "LevelFS",
)
TEXT_ARGV = ("sshare", "-a", "-P", "-o", ",".join(TEXT_FIELDS))
JSON_ARGV = ("sshare", "-a", "--json")
#: Slurm's "use the parent's share" (SLURMDB_FS_USE_PARENT) as the JSON shows it
USE_PARENT = 0x7FFFFFFF
#: 26.05 writes an infinite LevelFS as a set number of 2**64 (24.11: ``infinite: true``)
INFINITE = 2.0**63


class SharesError(SlurmError):
    """sshare's output cannot be read (one line)."""


def _figure(value: Any) -> float | None:
    """A finite, non-negative number from text, a plain number or ``{set, infinite, number}``; None when empty or
    unset."""
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return None
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"not a number: {text!r}") from None
    v = _num(value) if not isinstance(value, float) else value
    if v is None:
        return None
    v = float(v)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"not a finite non-negative number: {v!r}")
    return v


def _level(value: Any) -> float | None:
    """LevelFS (FairShare): as :func:`_figure`, but infinite (``inf``, ``infinite: true``, 2**64) is None."""
    if isinstance(value, str) and value.strip().lower() == "inf":
        return None
    if isinstance(value, dict) and value.get("infinite") is True:
        return None
    v = _figure(value)
    return None if v is not None and v >= INFINITE else v


def _raw_shares(value: Any) -> int | None:
    """RawShares: a count, or None for ``parent`` (the association uses its parent's share)."""
    if isinstance(value, str) and value.strip().lower() == "parent":
        return None
    v = _figure(value)
    if v is None or v >= USE_PARENT:
        return None
    if not v.is_integer():
        raise ValueError(f"RawShares is not a whole number: {v!r}")
    return int(v)


Figure = Annotated[float | None, BeforeValidator(_figure)]


class ShareRow(BaseModel):
    """One association: an account (``user`` empty) or a user in ``account``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    account: str = Field(min_length=1)
    user: str = ""
    parent: str = ""  # the parent account ("" for root)
    raw_shares: Annotated[int | None, BeforeValidator(_raw_shares)] = None
    raw_usage: Annotated[float, BeforeValidator(lambda v: _figure(v) or 0.0)] = 0.0
    norm_shares: Figure = None
    norm_usage: Figure = None
    effective_usage: Figure = None
    fairshare: Annotated[float | None, BeforeValidator(_level)] = None
    level_fs: Annotated[float | None, BeforeValidator(_level)] = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.account, self.user)


def _row(what: str, fields: dict) -> ShareRow:
    try:
        return ShareRow(**fields)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        where = ".".join(str(x) for x in err.get("loc", ()))
        raise SharesError(
            f"{what}: association {fields.get('account')!r}/{fields.get('user')!r}: {where}: {err.get('msg')}"
        ) from None


def parse_sshare_text(text: str) -> list[ShareRow]:
    """Rows of :data:`TEXT_ARGV`'s output (any version); the header names the columns."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    missing = [f for f in ("Account", "User", "RawShares", "RawUsage") if f not in header]
    if missing:
        raise SharesError(f"sshare -P: no {', '.join(missing)} column in its header {lines[0][:200]!r}")
    rows: list[ShareRow] = []
    path: list[str] = []  # the accounts from root down to the last account row
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if len(cells) != len(header):
            raise SharesError(f"sshare -P line {n}: {len(cells)} fields, the header has {len(header)}")
        named = dict(zip(header, cells, strict=True))  # a column's cell (a missing column's: "")
        raw_account = named["Account"]
        account, depth = raw_account.strip(), len(raw_account) - len(raw_account.lstrip(" "))
        user = named["User"].strip()
        if not account:
            raise SharesError(f"sshare -P line {n}: no account")
        if user:
            parent = account
        else:
            if depth > len(path):
                raise SharesError(f"sshare -P line {n}: account {account!r} is {depth} levels deep under {len(path)}")
            path = path[:depth]
            parent = path[-1] if path else ""
            path.append(account)
        rows.append(
            _row(
                f"sshare -P line {n}",
                dict(
                    account=account,
                    user=user,
                    parent=parent,
                    raw_shares=named.get("RawShares", ""),
                    raw_usage=named.get("RawUsage", ""),
                    norm_shares=named.get("NormShares", ""),
                    norm_usage=named.get("NormUsage", ""),
                    effective_usage=named.get("EffectvUsage", ""),
                    fairshare=named.get("FairShare", ""),
                    level_fs=named.get("LevelFS", ""),
                ),
            )
        )
    return rows


def parse_sshare_json(text: str | bytes) -> list[ShareRow]:
    """Rows of ``sshare -a --json`` (24.11 / 26.05)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise SharesError(f"sshare --json: not JSON: {e}") from None
    shares = data.get("shares") if isinstance(data, dict) else None
    items = shares.get("shares") if isinstance(shares, dict) else None
    if not isinstance(items, list):
        raise SharesError("sshare --json: no shares.shares list")
    rows = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise SharesError(f"sshare --json: row {i} is not an object")
        kind = item.get("type") or []
        kind = [kind] if isinstance(kind, str) else kind
        if not isinstance(kind, list):
            raise SharesError(f"sshare --json: row {i}: type: expected a list of names, got {type(kind).__name__}")
        name, parent = str(item.get("name") or ""), str(item.get("parent") or "")
        is_user = "USER" in [str(k).upper() for k in kind]
        fairshare = _table(item.get("fairshare"))
        rows.append(
            _row(
                f"sshare --json row {i}",
                dict(
                    account=parent if is_user else name,
                    user=name if is_user else "",
                    parent=parent,
                    raw_shares=item.get("shares"),
                    raw_usage=item.get("usage"),
                    norm_shares=item.get("shares_normalized"),
                    norm_usage=item.get("usage_normalized"),
                    effective_usage=item.get("effective_usage"),
                    fairshare=fairshare.get("factor"),
                    level_fs=fairshare.get("level"),
                ),
            )
        )
    if any(r.user and not r.account for r in rows):
        raise SharesError("sshare --json: a user row without its account")
    return rows


def read_shares(cli) -> list[ShareRow]:
    """One sshare call on ``cli`` (a SlurmCLI): JSON where the version has it, else the parsable text (22.05, or
    a version not yet known whose sshare refuses --json).  Raises SlurmError / SharesError."""
    if not cli.slurm_version.startswith("22."):
        try:
            return parse_sshare_json(cli.run(list(JSON_ARGV)).stdout)
        except SharesError:
            raise
        except SlurmError as e:
            if "--json" not in str(e) and "unrecognized" not in str(e):
                raise
    return parse_sshare_text(cli.run(list(TEXT_ARGV)).stdout)
