"""Where a site's Shockwave lives, for the programs that must find it without being told (the job wrapper, the
job templates, `status`, `explain`, `events`): the controller's config file, and from it the state directory and
the event store every job reports to.

The config file is ``$SHOCKWAVE_CONFIG`` (an admin can set it in the Slurm environment, e.g. through a
TaskProlog or /etc/environment), else ``/etc/shockwave/config.toml`` when it exists.  Standard library only:
the wrapper reads the one key it needs without validating the whole file (the controller does that).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

ENV_CONFIG = "SHOCKWAVE_CONFIG"
SITE_CONFIG = Path("/etc/shockwave/config.toml")
DEFAULT_STATE_DIR = "/var/lib/shockwave"
DEFAULT_EVENT_STORE = "/var/lib/shockwave/events"


def config_path(env: Mapping[str, str] = os.environ) -> Path | None:
    """The site's controller config: ``$SHOCKWAVE_CONFIG`` if set, else /etc/shockwave/config.toml if it exists."""
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG])
    return SITE_CONFIG if SITE_CONFIG.is_file() else None


def event_store(path: Path) -> str:
    """The event store a controller config names (its default when the file does not set it).  Raises OSError or
    ValueError (one line) when the file cannot be read or its `event_store` is not a path."""
    with open(path, "rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: not valid TOML ({e})") from None
    value = (data.get("controller") or {}).get("event_store", DEFAULT_EVENT_STORE)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{path}: controller.event_store is not a path")
    return value
