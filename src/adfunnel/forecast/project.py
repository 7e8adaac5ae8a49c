"""Projection of a request sample onto a future span, by hour of week. Pure.

The history is the UTC hours ``[history_from, history_to)``; each of them is *lived*
once in the local slot (hour of week, 0 = Monday 00:00 .. 167, in the forecast's time
zone) of its middle. A sampled request lies in the slot of its own local time. The
requests expected in one future hour of slot ``s`` are the mean of that slot over the
history: ``sum of the weights of the slot's requests / hours of the slot lived``. With
fewer than 7 days of history the slots are hours of day (0..23) instead, so every slot
has been lived once a day has passed; a slot the history never lived (under a day of
history) gets the mean of all lived hours.

A span's projection is then a factor per sampled request (:func:`row_factors`): its
weight times its factor is what it stands for over the span, and the factors of a
slot's requests add the span's hours of that slot (fractions at the span's ends). A
request's projected weight is linear in its weight: scaling every weight by ``k``
scales every projection by ``k`` exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, tzinfo

import numpy as np

HOUR = timedelta(hours=1)
WEEK_SLOTS = 168
DAY_SLOTS = 24
#: Days of history from which slots are hours of week.
WEEKLY_FROM_DAYS = 7


def weekly(history_from: datetime, history_to: datetime) -> bool:
    """Whether slots are hours of week (≥ 7 days of history) rather than of day."""
    return history_to - history_from >= timedelta(days=WEEKLY_FROM_DAYS)


def slot_of(at: datetime, z: tzinfo, by_week: bool) -> int:
    """The local slot of instant ``at`` in zone ``z``."""
    local = at.astimezone(z)
    return local.weekday() * DAY_SLOTS + local.hour if by_week else local.hour


def _slots(by_week: bool) -> int:
    return WEEK_SLOTS if by_week else DAY_SLOTS


def lived(history_from: datetime, history_to: datetime, z: tzinfo, by_week: bool
          ) -> np.ndarray:
    """Hours of each slot lived in ``[history_from, history_to)`` (UTC hour starts)."""
    out = np.zeros(_slots(by_week))
    at = history_from
    while at < history_to:
        out[slot_of(at + HOUR / 2, z, by_week)] += 1
        at += HOUR
    return out


def span_hours(start: datetime, end: datetime, z: tzinfo, by_week: bool) -> np.ndarray:
    """Hours of each slot in ``[start, end)``, a fraction for a part of an hour (each
    part in the slot of its middle)."""
    out = np.zeros(_slots(by_week))
    at = start
    while at < end:
        nxt = min(at.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + HOUR, end)
        out[slot_of(at + (nxt - at) / 2, z, by_week)] += (nxt - at) / HOUR
        at = nxt
    return out


def row_factors(slots: np.ndarray, lived_hours: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Each sampled request's factor over a span (module doc): ``span[s] / lived[s]`` for
    its slot ``s``, plus, for the span's hours in slots never lived, their share of the
    mean over all lived hours."""
    total_lived = float(lived_hours.sum())
    if total_lived <= 0 or not len(slots):
        return np.zeros(len(slots))
    per_slot = np.divide(span, lived_hours, out=np.zeros_like(span), where=lived_hours > 0)
    unlived = float(span[lived_hours <= 0].sum())
    return per_slot[slots] + unlived / total_lived


def request_slots(times: Sequence[datetime], z: tzinfo, by_week: bool) -> np.ndarray:
    """The slot of each of ``times``."""
    return np.array([slot_of(t, z, by_week) for t in times], dtype=np.int64)
