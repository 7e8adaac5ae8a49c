"""The diurnal traffic curve of the iPinYou log (advertiser 2259), by hour of day.

Source: ``shared/data/ipinyou/dlf_2259/{train,test}.log.txt``, column 3 (``hour``,
China time); see ``shared/data/README.md``. Counted at import of the day simulation
when the files are there (``ADFUNNEL_DATA_DIR`` or ``../shared/data`` next to the
repository); otherwise the counts below, taken from the same two files, are used.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from adfunnel.data import data_dir

#: Rows per hour 00..23 in train.log.txt + test.log.txt (12,526 rows).
IPINYOU_2259_HOURLY_COUNTS: tuple[int, ...] = (
    825, 434, 324, 393, 270, 272, 233, 287, 456, 742, 817, 786,
    790, 848, 884, 904, 864, 770, 568, 502, 218, 168, 109, 62,
)


@lru_cache(maxsize=4)
def ipinyou_hourly(root: Path | None = None) -> tuple[float, ...]:
    """24 request counts by hour of day from the iPinYou 2259 logs (or the built-in copy)."""
    try:
        base = (root or data_dir("ipinyou")) / "ipinyou" / "dlf_2259"
    except FileNotFoundError:  # no shared data: the built-in copy
        return tuple(float(c) for c in IPINYOU_2259_HOURLY_COUNTS)
    files = [base / "train.log.txt", base / "test.log.txt"]
    if not all(f.exists() for f in files):
        return tuple(float(c) for c in IPINYOU_2259_HOURLY_COUNTS)
    counts = [0] * 24
    for f in files:
        with f.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split("\t", 3)
                if len(parts) > 2 and parts[2].isdigit():
                    h = int(parts[2])
                    if 0 <= h < 24:
                        counts[h] += 1
    return tuple(float(c) for c in counts)


def normalised(hourly: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    """The shape scaled to mean 1.0."""
    m = sum(hourly) / len(hourly)
    return tuple(v / m for v in hourly)
