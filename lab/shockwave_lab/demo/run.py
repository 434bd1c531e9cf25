"""The local user a replayed job runs as (replay/run.py creates the trace's users with it)."""
from __future__ import annotations

import pwd
import subprocess


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=30)
        return pwd.getpwnam(name)
