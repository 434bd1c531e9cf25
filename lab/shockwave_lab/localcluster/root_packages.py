"""Packages added to a Debian root built before they were part of it (slurmdbd, for accounting)."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Sequence

log = logging.getLogger(__name__)


def install_in_root(root: Path, packages: Sequence[str], installed: Callable[[], bool]) -> str | None:
    """``apt-get install PACKAGES`` inside the root (from its package lists; ``apt-get update`` first only if that
    fails), with /proc mounted for dpkg and no service started (policy-rc.d); ``installed()`` says whether it
    worked.  Returns None, or why it failed in one line.  The caller holds the root's lock and is root."""
    log.info("installing %s into %s", " ".join(packages), root)
    policy = root / "usr/sbin/policy-rc.d"
    had_policy = policy.exists()
    if not had_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
    shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
    proc = root / "proc"
    mounted = not os.path.ismount(proc)
    if mounted:
        subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True, capture_output=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}

    def apt(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["chroot", str(root), "apt-get", "-q", *args], env=env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=900)
    try:
        install = ("install", "-y", "--no-install-recommends", *packages)
        r = apt(*install)
        if r.returncode != 0:
            apt("update")
            r = apt(*install)
        if r.returncode != 0 or not installed():
            tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
            return f"apt-get install {' '.join(packages)} in {root} failed (rc={r.returncode}): {tail}"
        return None
    finally:
        if mounted:
            subprocess.run(["umount", str(proc)], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        if not had_policy:
            policy.unlink(missing_ok=True)
