"""The bootstrap admin key a server process starts with."""

from __future__ import annotations

import sys
from typing import TextIO

from adfunnel.auth.keys import generate_key, prefix
from adfunnel.settings import Settings


def bootstrap_admin_key(settings: Settings, out: TextIO | None = None) -> Settings:
    """``settings`` with an admin key: its own ``admin_key`` (``ADFUNNEL_ADMIN_KEY``), or
    a generated one printed once to ``out`` (stderr), so that a fresh embedded server
    can be used at once. The generated key lives as long as the process: set
    ``ADFUNNEL_ADMIN_KEY`` to keep one across restarts."""
    if settings.admin_key is not None:
        return settings
    key = generate_key()
    print(f"adfunnel: admin API key (shown once; set ADFUNNEL_ADMIN_KEY to choose one): {key}",
          file=out or sys.stderr, flush=True)
    print(f"adfunnel: its prefix is {prefix(key)}", file=out or sys.stderr, flush=True)
    return settings.model_copy(update={"admin_key": key})
