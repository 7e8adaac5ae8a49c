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

**An exchange's notices** (OpenRTB, :mod:`adfunnel.tracking.notice_desk`), when given
(:func:`notice_prices`: the ledger's win and loss rows), replace the served log's price
to beat of the bid they are about (by impression id): our own auction only decided
which ad bid; the exchange's auction decided whether it won. A loss's minimum bid to
win is the price to beat; a win's clearing price is it only when below our bid (a
second-price exchange charges the price to beat; a first-price one charges the bid,
which says only that the price to beat was not above it: censored, left out), and so
is a bid whose notices name no price. The bid compared is the one sent (the served log's
``price_micros`` of an OpenRTB winner, CPM micros, with its auction type ``openrtb_at``:
a win at ``at`` 1 is censored whatever its price). CPM micros per mille become micros
per impression (÷ 1000, rounded up as the served log's prices are).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from datetime import datetime

import duckdb
from sqlalchemy import Engine, select

from adfunnel.bidding.shading import DEFAULT_MIN_OBSERVATIONS, fit
from adfunnel.billing.model import EventType
from adfunnel.billing.tables import ledger
from adfunnel.learn.query import query
from adfunnel.prediction.shading_release import ShadingRelease

Observation = tuple[str, str, int, int]
#: impression id -> (``win`` or ``loss``, the notice's price in CPM micros, or None)
Notices = Mapping[str, tuple[str, int | None]]

_SQL = """
WITH w AS (SELECT request_id, placement, time, unnest(winners) AS w FROM served
           WHERE time >= ? AND time < ?),
     s AS (SELECT request_id, unnest(slots) AS s FROM served WHERE time >= ? AND time < ?)
SELECT w.placement, s.s.width, s.s.height, w.time, w.w.beat_micros, w.w.impression_id,
       w.w.bid_micros, {rtb}
FROM w JOIN s ON w.request_id = s.request_id AND w.w.slot_id = s.s.id
ORDER BY w.time, w.request_id, w.w.slot_id
"""


#: an OpenRTB bid's CPM bid (the served log's price) and auction type; a log written
#: before they were kept has neither (every winner then compares its own bid)
_RTB, _NO_RTB = "w.w.price_micros, w.w.openrtb_at", "NULL, NULL"


class NoObservations(ValueError):
    """The window holds no auction winner with a price to beat."""


def observations(directory: str | os.PathLike[str], since: datetime,
                 until: datetime, notices: Notices | None = None) -> list[Observation]:
    """``(placement, "WxH", UTC hour, price to beat in micros)`` of every auction win
    decided in [since, until) (compacted hours only: :mod:`adfunnel.learn.query`), the
    price to beat of a bid with ``notices`` taken from them (module docstring)."""
    lo, hi = since.timestamp(), until.timestamp()
    try:
        rows = query(directory, _SQL.format(rtb=_RTB), [lo, hi, lo, hi])
    except duckdb.BinderException:  # no file of the window has the OpenRTB fields yet
        rows = query(directory, _SQL.format(rtb=_NO_RTB), [lo, hi, lo, hi])
    out: list[Observation] = []
    for p, w, h, t, beat, impression_id, bid, rtb_bid, at in rows:
        notice = notices.get(impression_id) if notices else None
        if notice is not None:
            beat = _notice_beat(notice, bid if at is None else rtb_bid, at)
        if beat is not None:
            out.append((str(p), f"{w}x{h}", int(t // 3600 % 24), math.ceil(beat)))
    return out


def _notice_beat(notice: tuple[str, int | None], bid_micros: int,
                 at: int | None = None) -> float | None:
    """The price to beat per impression (micros) an exchange's notice names, or None.
    ``bid_micros``: the bid the notice is about, CPM micros (an OpenRTB bid's, from the
    served log's price); ``at``: its auction type (None: unknown)."""
    kind, micros = notice
    if micros is None or (kind == EventType.WIN.value and (at == 1 or micros >= bid_micros)):
        return None  # no price, or a first-price win: the price to beat is censored
    return micros / 1000


def notice_prices(engine: Engine, since: datetime) -> dict[str, tuple[str, int | None]]:
    """The ledger's OpenRTB notices that occurred at or after ``since`` (a bid's come
    after its decision): impression id -> (``win`` or ``loss``, price in CPM micros or
    None); a loss wins over a win of the same bid (its minimum bid to win is exact),
    except that a bid the ledger holds an impression of (billed: the exchange showed it)
    won, whatever loss notice the exchange also sent: that loss is left out.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the read failed.
    """
    t, shown = ledger.c, ledger.alias("shown")
    billed = (select(shown.c.impression_id)
              .where(shown.c.impression_id == t.impression_id,
                     shown.c.event_type == EventType.IMPRESSION.value).exists())
    stmt = (select(t.impression_id, t.event_type, t.notice_micros, billed)
            .where(t.event_type.in_([EventType.WIN.value, EventType.LOSS.value]),
                   t.occurred_at >= since))
    found: dict[str, tuple[str, int | None]] = {}
    with engine.connect() as conn:
        for impression_id, kind, micros, was_billed in conn.execute(stmt):
            if kind == EventType.LOSS.value and was_billed:
                continue  # contradicts the bill: the bid won
            if impression_id not in found or kind == EventType.LOSS.value:
                found[impression_id] = (kind, None if micros is None else int(micros))
    return found


def fit_release(directory: str | os.PathLike[str], since: datetime, until: datetime, *,
                min_observations: int = DEFAULT_MIN_OBSERVATIONS,
                notices: Notices | None = None) -> ShadingRelease:
    """The shading release fitted on the served log's window [since, until), with an
    exchange's ``notices`` (:func:`notice_prices`) where given.

    Raises:
        NoObservations: nothing to fit.
    """
    obs = observations(directory, since, until, notices)
    if not obs:
        raise NoObservations(f"no auction win with a price to beat in the served log "
                             f"between {since.isoformat()} and {until.isoformat()}")
    model = fit(obs, min_observations=min_observations)
    segments = sum(1 for k in model.curves if "*" not in k)
    return ShadingRelease(model, "served-log", {
        "observations": len(obs), "segments": segments, "curves": len(model.curves),
        "since": since.isoformat(), "until": until.isoformat(),
        "min_observations": min_observations})
