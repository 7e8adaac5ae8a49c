"""Where the shared real data lives (``shared/data``: iPinYou logs, IVT lists, …).

The one lookup of the data directory: every reader (the iPinYou reader, the traffic curve,
the IVT lists, the benchmarks, the tests) calls :func:`data_dir` with the folder it needs.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the data directory.
DATA_DIR_ENV = "ADFUNNEL_DATA_DIR"


def data_dir(holding: str = "ipinyou") -> Path:
    """``$ADFUNNEL_DATA_DIR``, else the ``shared/data`` that holds the folder ``holding``,
    beside (or inside a parent of) the working directory or this checkout.

    Raises:
        FileNotFoundError: no such folder, and ``$ADFUNNEL_DATA_DIR`` is unset.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in (Path.cwd(), *here.parents):
        for candidate in (parent.parent / "shared" / "data", parent / "shared" / "data"):
            if (candidate / holding).is_dir():
                return candidate
    raise FileNotFoundError(f"shared/data/{holding} not found; set {DATA_DIR_ENV}")
