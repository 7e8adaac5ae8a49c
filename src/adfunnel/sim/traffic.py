"""The diurnal traffic curve of the iPinYou log (advertiser 2259), by hour of day.

Source: ``shared/data/ipinyou/dlf_2259/{train,test}.log.txt`` read by
:mod:`adfunnel.sim.ipinyou`: the hour of each row's timestamp (the ``hour`` column,
China time); see ``shared/data/README.md``. Counted at import of the day simulation
when the files are there (``ADFUNNEL_DATA_DIR`` or ``../shared/data`` next to the
repository); otherwise the counts below, taken from the same two files, are used.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from adfunnel.data import data_dir
from adfunnel.sim.ipinyou import default_logs, iter_log

#: Rows per hour 00..23 in train.log.txt + test.log.txt (12,526 rows).
IPINYOU_2259_HOURLY_COUNTS: tuple[int, ...] = (
    825, 434, 324, 393, 270, 272, 233, 287, 456, 742, 817, 786,
    790, 848, 884, 904, 864, 770, 568, 502, 218, 168, 109, 62,
)


@lru_cache(maxsize=4)
def ipinyou_hourly(root: Path | None = None) -> tuple[float, ...]:
    """24 request counts by hour of day from the iPinYou 2259 logs (or the built-in copy)."""
    try:
        files = default_logs(root or data_dir("ipinyou"))
    except FileNotFoundError:  # no shared data: the built-in copy
        return tuple(float(c) for c in IPINYOU_2259_HOURLY_COUNTS)
    if not all(f.exists() for f in files):
        return tuple(float(c) for c in IPINYOU_2259_HOURLY_COUNTS)
    counts = [0] * 24
    for f in files:
        # the hour of the row's China-time timestamp: the log's own ``hour`` column
        for row in iter_log(f):
            counts[row.timestamp.hour] += 1
    return tuple(float(c) for c in counts)


def normalised(hourly: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    """The shape scaled to mean 1.0."""
    m = sum(hourly) / len(hourly)
    return tuple(v / m for v in hourly)
