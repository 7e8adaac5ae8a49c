"""Fitting first-price shading's win curves from the served log, off the request path.

DESIGN.md §How ads are sold, *Automatic bidding* (issue #27); ``adfunnel model
shading-fit``. One observation per slot an auction winner filled in the window: its
segment (placement id, slot ``WxH``, UTC hour of the decision) and the price it had to
beat (``beat_micros``: the next ranked total, or the reserve per impression;
:mod:`adfunnel.serving.bid_shading`), rounded up to whole micros (the least integer
total that reaches it). Auction winners on second-price placements count too: the
threshold is the same quantity whatever the winner was charged. Winners without a
``beat_micros`` (direct lines, exploration picks, records logged before it) are left
out. :func:`adfunnel.bidding.shading.fit` makes one curve per segment and per coarser
back-off key (placement × size, placement, everything).
"""

from __future__ import annotations

import math
import os
from datetime import datetime

from adfunnel.bidding.shading import DEFAULT_MIN_OBSERVATIONS, fit
from adfunnel.learn.query import query
from adfunnel.prediction.shading_release import ShadingRelease

Observation = tuple[str, str, int, int]

_SQL = """
WITH w AS (SELECT request_id, placement, time, unnest(winners) AS w FROM served
           WHERE time >= ? AND time < ?),
     s AS (SELECT request_id, unnest(slots) AS s FROM served WHERE time >= ? AND time < ?)
SELECT w.placement, s.s.width, s.s.height, w.time, w.w.beat_micros
FROM w JOIN s ON w.request_id = s.request_id AND w.w.slot_id = s.s.id
WHERE w.w.beat_micros IS NOT NULL
ORDER BY w.time, w.request_id, w.w.slot_id
"""


class NoObservations(ValueError):
    """The window holds no auction winner with a price to beat."""


def observations(directory: str | os.PathLike[str], since: datetime,
                 until: datetime) -> list[Observation]:
    """``(placement, "WxH", UTC hour, price to beat in micros)`` of every auction win
    decided in [since, until) (compacted hours only: :mod:`adfunnel.learn.query`)."""
    lo, hi = since.timestamp(), until.timestamp()
    rows = query(directory, _SQL, [lo, hi, lo, hi])
    return [(str(p), f"{w}x{h}", int(t // 3600 % 24), math.ceil(beat))
            for p, w, h, t, beat in rows]


def fit_release(directory: str | os.PathLike[str], since: datetime, until: datetime, *,
                min_observations: int = DEFAULT_MIN_OBSERVATIONS) -> ShadingRelease:
    """The shading release fitted on the served log's window [since, until).

    Raises:
        NoObservations: nothing to fit.
    """
    obs = observations(directory, since, until)
    if not obs:
        raise NoObservations(f"no auction win with a price to beat in the served log "
                             f"between {since.isoformat()} and {until.isoformat()}")
    model = fit(obs, min_observations=min_observations)
    segments = sum(1 for k in model.curves if "*" not in k)
    return ShadingRelease(model, "served-log", {
        "observations": len(obs), "segments": segments, "curves": len(model.curves),
        "since": since.isoformat(), "until": until.isoformat(),
        "min_observations": min_observations})
