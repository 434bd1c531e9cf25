"""`shockwave controller check`: the config against the world it will run in, one line per problem.

Checks (each problem is one line naming what is wrong and what to do):
* the state directory is (or can be made) writable, and an existing state database opens and passes
  SQLite's quick check;
* the event store exists, is a directory, and has the layout/modes of docs/event-schema.md;
* `SLURM_CONF` (from [slurm.env] or the environment) names an existing file; Slurm answers
  (`scontrol show config`);
* slurm.conf: `PriorityType=priority/multifactor` (SiteFactor), `JobRequeue=1` and, in authoritative
  mode, the user signal on preemption (`SlurmctldParameters=preempt_send_user_signal` on 22.05,
  `PreemptParameters=send_user_signal` later);
* the partition exists, has nodes with gres GPUs, and at least one of them is usable.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..slurmcli import SlurmError
from .faults import check_state_db

#: seconds per Slurm command during the check (a missing slurmctld should not keep `check` waiting long)
CHECK_TIMEOUT = 15.0


def check_world(cfg, cli=None) -> list[str]:
    """Every problem found, one line each (empty: ready to run)."""
    problems: list[str] = []
    problems += check_state_dir(cfg)
    problems += check_event_store(cfg.event_store)
    problems += check_slurm(cfg, cli)
    return problems


def check_state_dir(cfg) -> list[str]:
    d = Path(cfg.state_dir)
    if d.exists() and not d.is_dir():
        return [f"controller.state_dir = {str(d)!r}: exists but is not a directory"]
    probe = d
    while not probe.exists():              # the controller creates missing directories: check the first ancestor
        probe = probe.parent
    if not probe.is_dir():
        return [f"controller.state_dir = {str(d)!r}: {probe} is not a directory"]
    try:
        fd, name = tempfile.mkstemp(prefix=".shockwave-check-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        what = "is not writable" if probe == d else f"cannot be created ({probe} is not writable)"
        return [f"controller.state_dir = {str(d)!r}: {what} ({e.strerror or e}); make it writable by the "
                f"controller's user"]
    db = Path(cfg.state_path)
    if db.exists():
        bad = check_state_db(db)
        if bad:
            return [bad]
    return []


def check_event_store(root) -> list[str]:
    p = Path(root)
    if not p.exists():
        return [f"controller.event_store = {str(p)!r}: does not exist; create it as docs/event-schema.md "
                f"describes (on a filesystem shared by all nodes)"]
    if p.is_symlink() or not p.is_dir():
        return [f"controller.event_store = {str(p)!r}: is not a directory"]
    try:
        from ..events import store
    except ImportError:
        return []
    check = getattr(store, "check_store", None)
    if check is None:
        return []
    try:
        return [f"controller.event_store: {line}" for line in check(p)]
    except OSError as e:
        return [f"controller.event_store = {str(p)!r}: unreadable ({e.strerror or e})"]


def slurm_conf_path(cfg) -> str | None:
    return cfg.slurm_env.get("SLURM_CONF") or os.environ.get("SLURM_CONF")


def check_slurm(cfg, cli=None) -> list[str]:
    conf = slurm_conf_path(cfg)
    where = "[slurm.env] SLURM_CONF" if "SLURM_CONF" in cfg.slurm_env else "SLURM_CONF"
    if conf is not None and not Path(conf).is_file():
        # scontrol would retry for 60 s on a missing file
        return [f"{where} = {conf!r}: no such file; point it at the cluster's slurm.conf"]
    if conf is None and not Path("/etc/slurm/slurm.conf").is_file():
        return ["SLURM_CONF is not set and /etc/slurm/slurm.conf does not exist: set [slurm.env] SLURM_CONF"]
    if cli is None:
        from .daemon import make_cli
        cli = make_cli(cfg)
        cli.timeout = min(cfg.slurm_timeout, CHECK_TIMEOUT)
    try:
        conf_text = cli.run(["scontrol", "show", "config"]).stdout
    except SlurmError as e:
        return [f"Slurm is not reachable ({str(e).splitlines()[0]}): is slurmctld running, and SLURM_CONF right?"]
    problems = check_slurm_conf(parse_show_config(conf_text), cfg.mode)
    problems += check_partition(cfg, cli)
    return problems


def parse_show_config(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def check_slurm_conf(conf: dict[str, str], mode: str) -> list[str]:
    problems = []
    prio = conf.get("PriorityType", "?")
    if prio != "priority/multifactor":
        problems.append(f"slurm.conf: PriorityType = {prio}: must be priority/multifactor (the controller steers "
                        f"jobs through SiteFactor)")
    requeue = conf.get("JobRequeue", "?")
    if requeue != "1":
        problems.append(f"slurm.conf: JobRequeue = {requeue}: set JobRequeue=1 (a preempted job is requeued)")
    ctld = [p.strip() for p in conf.get("SlurmctldParameters", "").split(",")]
    preempt = [p.strip() for p in conf.get("PreemptParameters", "").split(",")]
    if mode == "authoritative" and "preempt_send_user_signal" not in ctld and "send_user_signal" not in preempt:
        problems.append(f"slurm.conf: SlurmctldParameters = {conf.get('SlurmctldParameters', '(null)')}: "
                        f"authoritative mode needs the user signal on preemption (22.05: SlurmctldParameters="
                        f"preempt_send_user_signal; 24.11 and later: PreemptParameters=send_user_signal)")
    return problems


def check_partition(cfg, cli) -> list[str]:
    part = cfg.partition
    try:
        cli.run(["scontrol", "show", "partition", part, "-o"])
    except SlurmError as e:
        if "not found" in str(e):
            return [f"controller.partition = {part!r}: no such partition in Slurm (sinfo -s lists them)"]
        return [f"controller.partition = {part!r}: cannot be read ({str(e).splitlines()[0]})"]
    try:
        nodes = [n for n in cli.sinfo_nodes() if part in n.partitions]
    except SlurmError as e:
        return [f"Slurm nodes cannot be read ({str(e).splitlines()[0]})"]
    if not nodes:
        return [f"controller.partition = {part!r}: has no nodes"]
    if not sum(n.gpus for n in nodes):
        return [f"controller.partition = {part!r}: its {len(nodes)} node(s) have no GPUs (gres gpu); set Gres=gpu:N "
                f"on the nodes and GresTypes=gpu"]
    if not any(n.available for n in nodes):
        return [f"controller.partition = {part!r}: all {len(nodes)} node(s) are down or drained"]
    return []


def summary(cfg) -> dict:
    return {"source": cfg.source, "mode": cfg.mode, "round_seconds": cfg.round_seconds, "policy": cfg.policy,
            "partition": cfg.partition, "managed_by": cfg.managed_by, "state_dir": cfg.state_dir,
            "event_store": cfg.event_store}
