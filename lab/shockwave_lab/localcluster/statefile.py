"""``cluster.json``, the state file of a local cluster: its settings, ports and the pid + start time of each
daemon, so that ``status()`` and ``down()`` work from a fresh process given the same root."""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from shockwave_lab.localcluster import daemons as d
from shockwave_lab.localcluster.config import ClusterSettings, Paths

VERSION = 1


def read(paths: Paths) -> dict | None:
    try:
        data = json.loads(paths.state_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def write(paths: Paths, root: Path, settings: ClusterSettings, procs: dict, status: str) -> None:
    ports = {"slurmctld": settings.ctld_port, **dict(zip(settings.node_names, settings.node_ports))}
    if settings.accounting:
        ports.update(slurmdbd=settings.dbd_port, mariadbd=settings.db_port)
    data = {
        "version": VERSION, "root": str(root), "status": status,
        "conf": str(paths.slurm_conf), "ports": ports, "settings": asdict(settings),
        "daemons": {k: (v.to_json() if isinstance(v, d.ProcId) else v) for k, v in procs.items()},
        "updated_at": time.time(),
    }
    tmp = paths.state_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, paths.state_file)


def settings_from(state: dict) -> ClusterSettings:
    raw = dict(state["settings"])
    raw["node_ports"] = tuple(raw["node_ports"])
    raw["extra_conf"] = tuple(raw.get("extra_conf", ()))
    raw["accounts"] = tuple((a, int(n)) for a, n in raw.get("accounts", ()))
    raw["users"] = tuple((u, a) for u, a in raw.get("users", ()))
    known = set(ClusterSettings.__dataclass_fields__)
    return ClusterSettings(**{k: v for k, v in raw.items() if k in known})


def runs_with_root(pid: int, root: Path) -> bool:
    """Does process `pid` run with a path under `root` on its command line (one of this cluster's daemons)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return str(root) + "/" in cmdline


def known_procs(paths: Paths, root: Path, state: dict | None) -> list[d.ProcId]:
    """Daemons from the state file, plus any pid file whose process runs with our config."""
    procs = {p.pid: p for p in (d.ProcId.from_json(v) for v in (state or {}).get("daemons", {}).values())}
    for pid_file in [paths.pid_file("munged"), *paths.run.glob("*.pid")]:
        ident = d.identify(d.read_pid_file(pid_file))
        if ident and ident.pid not in procs and runs_with_root(ident.pid, root):
            procs[ident.pid] = ident
    return list(procs.values())


def all_alive(state: dict) -> bool:
    """Is the cluster of this state up, with every daemon it started still running?"""
    daemons = state.get("daemons") or {}
    settings = state.get("settings", {})
    expected = 2 + int(settings.get("nodes", 0)) + (2 if settings.get("accounting") else 0)
    return (state.get("status") == "up" and len(daemons) == expected
            and all(d.ProcId.from_json(v).alive() for v in daemons.values()))
