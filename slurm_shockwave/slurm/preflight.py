"""The Slurm side of `shockwave controller check`, and the warnings the running controller logs: one line per
problem, each naming what is wrong and what to do.

* `SLURM_CONF` (from [slurm.env] or the environment) names an existing file; Slurm answers
  (`scontrol show config`);
* slurm.conf: `PriorityType=priority/multifactor` (SiteFactor), `JobRequeue=1` and, in authoritative
  mode, the user signal on preemption (`SlurmctldParameters=preempt_send_user_signal` on 22.05,
  `PreemptParameters=send_user_signal` later);
* the partition exists, has nodes with gres GPUs, and at least one of them is usable; `gpu_type_speeds`, when set,
  names every GPU type of its nodes;
* some job can write to the event store: its `users/<uid>/` folders are made by the prolog hook of
  prolog_epilog/ at job start (only root creates them), so slurm.conf's Prolog must run it, unless folders
  exist already (made by hand, or by a site prolog that calls the hook); `facts["prolog"]` says which.
"""

from __future__ import annotations

import os
from pathlib import Path

from slurm_shockwave.events.layout import USERS_DIR
from slurm_shockwave.slurm.commands import SlurmCLI
from slurm_shockwave.slurm.errors import SlurmError
from slurm_shockwave.slurm.models import node_in_partition
from solver.types import GPU

#: seconds per Slurm command during the check (a missing slurmctld should not keep `check` waiting long)
CHECK_TIMEOUT = 15.0


def slurm_conf_path(cfg) -> str | None:
    return cfg.slurm.env.get("SLURM_CONF") or os.environ.get("SLURM_CONF")


def check_slurm(cfg, cli=None, facts: dict | None = None) -> list[str]:
    conf_path = slurm_conf_path(cfg)
    where = "[slurm.env] SLURM_CONF" if "SLURM_CONF" in cfg.slurm.env else "SLURM_CONF"
    if conf_path is not None and not Path(conf_path).is_file():
        # scontrol would retry for 60 s on a missing file
        return [f"{where} = {conf_path!r}: no such file; point it at the cluster's slurm.conf"]
    if conf_path is None and not Path("/etc/slurm/slurm.conf").is_file():
        return ["SLURM_CONF is not set and /etc/slurm/slurm.conf does not exist: set [slurm.env] SLURM_CONF"]
    if cli is None:
        cli = SlurmCLI.from_config(cfg)
        cli.timeout = min(cfg.slurm_timeout, CHECK_TIMEOUT)
    try:
        conf_text = cli.run(["scontrol", "show", "config"]).stdout
    except SlurmError as e:
        return [f"Slurm is not reachable ({str(e).splitlines()[0]}): is slurmctld running, and SLURM_CONF right?"]
    conf = parse_show_config(conf_text)
    problems = check_slurm_conf(conf, cfg.mode)
    problems += check_prolog(conf, cfg.event_store, facts if facts is not None else {})
    problems += check_partition(cfg, cli)
    return problems


def check_prolog(conf: dict[str, str], store, facts: dict) -> list[str]:
    """Can any job write to the event store?  See the module docstring."""
    if not Path(store).is_dir():
        return []  # the store's own problem is reported by the controller's part
    prolog = conf.get("Prolog", "(null)") or "(null)"
    hooked = "shockwave" in prolog
    users = Path(store) / USERS_DIR
    try:
        folders = sum(1 for p in users.iterdir() if p.is_dir())
    except OSError:
        folders = 0
    facts["prolog"] = (
        f"runs the shockwave hook ({prolog})"
        if hooked
        else f"not the shockwave hook ({prolog}); {folders} user folder(s) in {users}"
    )
    if hooked or folders:
        return []
    return [
        f"slurm.conf: Prolog = {prolog}: no job can report to the event store {store}: each user's "
        f"{users}/<uid>/ is made by root, by the prolog hook at job start (prolog_epilog/README.md: "
        f"Prolog=/opt/shockwave/hooks/shockwave-hook.sh), and none exists"
    ]


def parse_show_config(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def check_slurm_conf(conf: dict[str, str], mode: str) -> list[str]:
    problems = []
    prio = conf.get("PriorityType", "?")
    if prio != "priority/multifactor":
        problems.append(
            f"slurm.conf: PriorityType = {prio}: must be priority/multifactor (the controller steers "
            f"jobs through SiteFactor)"
        )
    requeue = conf.get("JobRequeue", "?")
    if requeue != "1":
        problems.append(f"slurm.conf: JobRequeue = {requeue}: set JobRequeue=1 (a preempted job is requeued)")
    ctld = [p.strip() for p in conf.get("SlurmctldParameters", "").split(",")]
    preempt = [p.strip() for p in conf.get("PreemptParameters", "").split(",")]
    if mode == "authoritative" and "preempt_send_user_signal" not in ctld and "send_user_signal" not in preempt:
        problems.append(
            f"slurm.conf: SlurmctldParameters = {conf.get('SlurmctldParameters', '(null)')}: "
            f"authoritative mode needs the user signal on preemption (22.05: SlurmctldParameters="
            f"preempt_send_user_signal; 24.11 and later: PreemptParameters=send_user_signal)"
        )
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
        nodes = [n for n in cli.sinfo_nodes() if node_in_partition(n, part)]
    except SlurmError as e:
        return [f"Slurm nodes cannot be read ({str(e).splitlines()[0]})"]
    if not nodes:
        return [f"controller.partition = {part!r}: has no nodes"]
    if not sum(n.gpus for n in nodes):
        return [
            f"controller.partition = {part!r}: its {len(nodes)} node(s) have no GPUs (gres gpu); set Gres=gpu:N "
            f"on the nodes and GresTypes=gpu"
        ]
    if not any(n.available for n in nodes):
        return [f"controller.partition = {part!r}: all {len(nodes)} node(s) are down or drained"]
    return check_speeds(cfg.gpu_type_speeds, {t for n in nodes for t, _k in (n.by_type or ()) if t != GPU})


def check_speeds(speeds: dict, types: set) -> list[str]:
    """`gpu_type_speeds`, when set, gives a speed to every GPU type of the partition (else none is used)."""
    missing = sorted(types - set(speeds)) if speeds else []
    if not speeds or (types and not missing):
        return []
    has = ", ".join(missing) if types else "none (untyped gres gpu:N)"
    return [
        f"controller.gpu_type_speeds = {dict(speeds)}: the partition's GPU types without a speed: {has}; the "
        "speeds are used only when every type has one (or leave it empty)"
    ]


def partition_warnings(cli, part: str) -> list[str]:
    """While running: the managed partition has no nodes, no GPUs or no usable node (nothing will be planned)."""
    try:
        nodes = cli.sinfo_nodes()
    except SlurmError:
        return []
    mine = [n for n in nodes if node_in_partition(n, part)]
    if not mine:
        return [
            f"partition {part!r} has no nodes (or does not exist): nothing will be planned; check "
            "controller.partition and slurm.conf (`shockwave controller check`)"
        ]
    if not sum(n.gpus for n in mine):
        return [
            f"partition {part!r} has {len(mine)} node(s) but no GPUs (gres gpu): nothing will be planned; "
            "check Gres= and GresTypes=gpu in slurm.conf"
        ]
    if not any(n.available for n in mine):
        return [f"partition {part!r}: all {len(mine)} node(s) are down or drained: nothing will be planned"]
    return []
