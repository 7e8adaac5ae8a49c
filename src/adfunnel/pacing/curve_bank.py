"""Target curves of many campaign-days at once, in O(24) numbers per traffic shape.

:func:`adfunnel.pacing.curve.curve_for_day` materialises a day's curve as one point per
minute (1,441 floats). At catalogue scale (10⁵–10⁶ campaigns, each with its own
traffic shape) that is gigabytes, so the budget service keeps per shape only what
makes any minute's weight, and per campaign-day a cursor over the day's running sum:

- a *shape* is 24 hourly weights ``H`` (local wall-clock hours). ``hourly_to_minutely``
  interpolates linearly between hour mid-points and rescales each hour to keep its
  total: the weight of local minute ``lm`` is ``(a × (1 − f) + b × f) × k_h`` with ``a``,
  ``b`` the per-minute levels ``H / 60`` of the neighbouring hours, ``f`` a fraction of
  the minute of day only, and ``k_h`` the hour's rescale factor. :class:`ShapeTable`
  keeps ``H / 60`` and ``k`` (24 numbers each), computed with the very float operations
  of ``hourly_to_minutely`` (its per-hour sums added left to right, as ``sum`` does);
- a *day-zone* is one local day of one time zone: the elapsed minutes of the day map
  onto local wall-clock minutes in at most a few contiguous *runs* (one on a normal
  day, two across a DST change);
- a curve point is ``min(1, acc_i / total)`` with ``acc_i`` the weights of the first
  ``i`` elapsed minutes added one by one, left to right, as ``build_curve`` adds them.

So every share, total and peak here is *bit-for-bit* the value ``curve_for_day`` gives
(tested in ``tests/budget/test_vectorised.py``): a float that differs in its last bit
moves a pacing probability, and through its coin flips every later decision. Running
sums are cumulative sums (``numpy.cumsum`` adds left to right) over whole days where a
day's facts are made (:meth:`CurveBank.facts`, once per distinct shape and day-zone),
and cursors that add the next minutes' weights where the budget service follows a day
(``BudgetService``: a control step moves each cursor by the minutes elapsed since the
last). Elapsed times are seconds from the local day's start; shares are in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np

from adfunnel.campaigns.schedule import day_bounds, zone
from adfunnel.pacing.curve import END_MARGIN_MINUTES, TargetCurve

#: Most runs (contiguous stretches of local wall-clock minutes) a local day may have.
MAX_RUNS = 6
#: Longest local day in minutes (25 hours).
MAX_MINUTES = 1500
#: Shapes or (shape, day-zone) pairs worked on at once (a matrix of a day's minutes each).
CHUNK = 2048

# ``hourly_to_minutely``'s interpolation, per local minute of day: x = (m + 0.5) / 60 − 0.5,
# h0 = floor(x), f = x − h0; the minute's level is a × (1 − f) + b × f with a and b the
# levels of hours h0 and h0 + 1 (wrapping).
_LM = np.arange(1440)
_X = (_LM + 0.5) / 60.0 - 0.5
_H0 = np.floor(_X).astype(np.int64)
_F = _X - _H0
_ONE_MINUS_F = 1 - _F
_IA = _H0 % 24
_IB = (_H0 + 1) % 24
_HOUR = _LM // 60


def _validated(hourly: np.ndarray) -> np.ndarray:
    """``hourly`` as float64 (k, 24), or ValueError (as ``hourly_to_minutely`` raises)."""
    h = np.asarray(hourly, dtype=np.float64)
    if h.ndim == 1:
        h = h.reshape(1, -1)
    if h.shape[1] != 24:
        raise ValueError(f"hourly shape needs 24 values, got {h.shape[1]}")
    if not np.isfinite(h).all() or (h < 0).any():
        raise ValueError("hourly weights must be finite and >= 0")
    if (h.sum(axis=1) <= 0).any():
        raise ValueError("hourly shape is all zero")
    return h


class ShapeTable:
    """Interned hourly traffic shapes: ``H`` (n, 24) as given, per-minute levels
    ``PM = H / 60`` and hour rescale factors ``K`` (n, 24; 1 for an hour whose unscaled
    minute weights sum to 0, which ``hourly_to_minutely`` leaves unscaled)."""

    def __init__(self, capacity: int = 64) -> None:
        self.n = 0
        self.H = np.zeros((capacity, 24))
        self.PM = np.zeros((capacity, 24))
        self.K = np.ones((capacity, 24))

    def add(self, hourly: np.ndarray | list[float] | tuple[float, ...]) -> np.ndarray:
        """Append shapes (one per row of ``hourly``); their ids (int64).

        Raises:
            ValueError: not 24 values, a negative or non-finite weight, all zero.
        """
        h = _validated(np.asarray(hourly))
        k = len(h)
        self._grow(self.n + k)
        ids = np.arange(self.n, self.n + k, dtype=np.int64)
        self.H[ids] = h
        pm = h / 60.0
        self.PM[ids] = pm
        for a in range(0, k, CHUNK):
            p = pm[a:a + CHUNK]
            unscaled = p[:, _IA] * _ONE_MINUS_F + p[:, _IB] * _F
            # each hour's sum, added left to right (``sum(seg)``)
            sums = np.cumsum(unscaled.reshape(len(p), 24, 60), axis=2)[:, :, -1]
            self.K[ids[a:a + CHUNK]] = np.divide(h[a:a + CHUNK], sums,
                                                 out=np.ones_like(sums), where=sums > 0)
        self.n += k
        return ids

    def compact(self, keep: np.ndarray) -> np.ndarray:
        """Keep only shapes ``keep`` (unique ids), renumbered 0..len-1 in order; returns
        the old -> new id map (int64[n_old], -1 for dropped)."""
        keep = np.unique(keep[keep >= 0])
        remap = np.full(max(self.n, 1), -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        for name in ("H", "PM", "K"):
            arr = getattr(self, name)
            arr[: len(keep)] = arr[keep]
        self.n = len(keep)
        return remap

    def _grow(self, need: int) -> None:
        cap = len(self.H)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name, fill in (("H", 0.0), ("PM", 0.0), ("K", 1.0)):
            arr = getattr(self, name)
            grown = np.full((new, arr.shape[1]), fill)
            grown[: self.n] = arr[: self.n]
            setattr(self, name, grown)

    def minute_weight(self, s: np.ndarray, lm: np.ndarray) -> np.ndarray:
        """``hourly_to_minutely(H[s])[lm]`` elementwise (``s``, ``lm`` broadcast), exact."""
        pm, lm = self.PM, np.asarray(lm)
        return (pm[s, _IA[lm]] * _ONE_MINUS_F[lm] + pm[s, _IB[lm]] * _F[lm]) * self.K[s, _HOUR[lm]]


@dataclass(frozen=True, slots=True)
class DayZone:
    """One local day of one time zone: UTC bounds (Unix s), length in minutes, the
    minute at which the curve reaches 1.0 (23:30 local), and its runs ``(elapsed start,
    local start, length)`` in minutes."""

    start_s: float
    end_s: float
    minutes: int
    end_minute: int
    runs: tuple[tuple[int, int, int], ...]


def day_zone(day: date, tz: str) -> DayZone:
    """The :class:`DayZone` of local ``day`` in ``tz``.

    Raises:
        ValueError: unknown zone, or a day of more than ``MAX_RUNS`` runs.
    """
    start, end = day_bounds(day, tz)
    n = int((end - start).total_seconds() // 60)
    z = zone(tz)
    runs: list[list[int]] = []
    prev = -2
    for m in range(n):
        local = (start + timedelta(minutes=m)).astimezone(z)
        lm = local.hour * 60 + local.minute
        if lm == prev + 1 and runs:
            runs[-1][2] += 1
        else:
            runs.append([m, lm, 1])
        prev = lm
    if len(runs) > MAX_RUNS:
        raise ValueError(f"{tz} {day}: {len(runs)} runs of local minutes")
    return DayZone(start.timestamp(), end.timestamp(), n, n - END_MARGIN_MINUTES,
                   tuple((a, b, c) for a, b, c in runs))


@dataclass(slots=True)
class DayZones:
    """Interned :class:`DayZone` s by (time zone, day ordinal), as arrays; ``lmap``
    (zones × ``MAX_MINUTES``) holds the local minute of each elapsed minute."""

    ids: dict[tuple[str, int], int] = field(default_factory=dict)
    zones: list[DayZone] = field(default_factory=list)
    start_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    minutes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    end_minute: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lmap: np.ndarray = field(default_factory=lambda: np.zeros((0, MAX_MINUTES),
                                                              dtype=np.int64))

    def get(self, tz: str, day: date) -> int:
        """The id of (tz, day), made on first use."""
        key = (tz, day.toordinal())
        i = self.ids.get(key)
        if i is None:
            i = self._add(day_zone(day, tz))
            self.ids[key] = i
        return i

    def _add(self, dz: DayZone) -> int:
        i = len(self.zones)
        self.zones.append(dz)
        self.start_s = np.append(self.start_s, dz.start_s)
        self.end_s = np.append(self.end_s, dz.end_s)
        self.minutes = np.append(self.minutes, dz.minutes)
        self.end_minute = np.append(self.end_minute, dz.end_minute)
        row = np.zeros(MAX_MINUTES, dtype=np.int64)
        for es, ls, ln in dz.runs:
            row[es:es + ln] = np.arange(ls, ls + ln)
        self.lmap = np.vstack([self.lmap, row])
        return i


@dataclass(frozen=True, slots=True)
class DayFacts:
    """What a day's curve needs of (shape, day-zone) pairs, per pair: ``total`` (the
    active minutes' weight, or their count where it is 0: a flat curve), ``flat``,
    ``peak`` (``TargetCurve.peak_share_per_s``), and, where asked for minute ``at``,
    ``acc`` (weights of elapsed minutes ``[0, at)`` added in order) and ``w`` (the
    weight of minute ``at``; 0 at or after the curve's end)."""

    total: np.ndarray
    flat: np.ndarray
    peak: np.ndarray
    acc: np.ndarray
    w: np.ndarray


class CurveBank:
    """Shapes and day-zones, and the curves of (shape id, day-zone id) pairs."""

    def __init__(self) -> None:
        self.shapes = ShapeTable()
        self.zones = DayZones()

    def local_minute(self, dz: np.ndarray, m: np.ndarray) -> np.ndarray:
        """The local wall-clock minute of elapsed minute ``m`` (in [0, minutes))."""
        return self.zones.lmap[dz, m]

    def weights(self, s: np.ndarray, dz: np.ndarray, m: np.ndarray,
                flat: np.ndarray | None = None) -> np.ndarray:
        """The weight of elapsed minute ``m`` of each row's day (``day_minute_weights``);
        1.0 where ``flat`` (a curve whose active weights sum to 0)."""
        w = self.shapes.minute_weight(s, self.local_minute(dz, m))
        return w if flat is None else np.where(flat, 1.0, w)

    def facts(self, s: np.ndarray, dz: np.ndarray, at: np.ndarray | None = None) -> DayFacts:
        """:class:`DayFacts` of each (``s[i]``, ``dz[i]``) pair; ``at`` (int minutes in
        [0, end minute], or None) asks for the running sum there."""
        k = len(s)
        out = DayFacts(np.zeros(k), np.zeros(k, dtype=bool), np.zeros(k), np.zeros(k),
                       np.zeros(k))
        z = self.zones
        for a in range(0, k, CHUNK):
            ss, dd = s[a:a + CHUNK], dz[a:a + CHUNK]
            end = z.end_minute[dd]
            width = int(end.max()) if len(end) else 0
            cols = np.arange(width)
            active = cols[None, :] < end[:, None]
            w = np.where(active, self.shapes.minute_weight(ss[:, None], z.lmap[dd, :width]),
                         0.0)
            cum = np.cumsum(w, axis=1)
            rows = np.arange(len(ss))
            total = cum[rows, end - 1]
            flat = total <= 0
            if flat.any():
                w[flat] = active[flat].astype(np.float64)
                cum[flat] = np.cumsum(w[flat], axis=1)
                total = np.where(flat, end.astype(np.float64), total)
            pts = np.minimum(1.0, cum / total[:, None])  # points 1..width
            pts[~active] = 1.0
            pts[rows, end - 1] = 1.0  # the curve's end is exactly 1
            steps = np.diff(pts, axis=1, prepend=0.0)
            sl = slice(a, a + len(ss))
            out.total[sl] = total
            out.flat[sl] = flat
            out.peak[sl] = np.maximum(0.0, steps.max(axis=1)) / 60.0
            if at is not None:
                m = at[a:a + CHUNK]
                inside = m < end
                out.acc[sl] = np.where(m > 0, cum[rows, np.clip(m - 1, 0, width - 1)], 0.0)
                out.w[sl] = np.where(inside, w[rows, np.clip(m, 0, width - 1)], 0.0)
        return out

    def share_at(self, s: np.ndarray, dz: np.ndarray, elapsed_s: np.ndarray) -> np.ndarray:
        """``TargetCurve.share_at(elapsed_s)`` of each row (seconds since the day's start),
        exact. Makes each row's day facts: for views and tests (the service follows its
        days with cursors)."""
        e = np.asarray(elapsed_s, dtype=np.float64)
        z = self.zones
        n, end = z.minutes[dz], z.end_minute[dz]
        x = e / 60.0
        i = np.where(e > 0, np.floor(np.maximum(x, 0.0)), 0).astype(np.int64)
        f = x - i
        last = np.minimum(i, end)
        facts = self.facts(s, dz, last)
        return share_from(e, i, f, n, end, facts.acc, facts.w, facts.total)

    def curve(self, shape_id: int, dz_id: int) -> TargetCurve:
        """The materialised :class:`~adfunnel.pacing.curve.TargetCurve` of one pair (for
        per-campaign views; the service itself follows its days with cursors), equal to
        ``curve_for_day`` of the shape's hourly weights."""
        n = int(self.zones.minutes[dz_id])
        end = int(self.zones.end_minute[dz_id])
        s, d = np.array([shape_id]), np.array([dz_id])
        facts = self.facts(s, d)
        m = np.arange(1, end)
        if facts.flat[0]:
            cum = m.astype(np.float64)
        else:
            cum = np.cumsum(self.weights(np.full(end, shape_id), np.full(end, dz_id),
                                         np.arange(end)))[: end - 1]
        pts = [0.0, *np.minimum(1.0, cum / facts.total[0]).tolist(), 1.0]
        pts.extend([1.0] * (n - end))
        return TargetCurve(tuple(pts), end)


def point(i: np.ndarray, end: np.ndarray, acc: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``TargetCurve.points[i]`` from the running sum ``acc`` of the first ``i`` minutes:
    0 at 0, ``min(1, acc / total)`` inside, 1 from the curve's end on."""
    inside = np.minimum(1.0, acc / total)
    return np.where(i >= end, 1.0, np.where(i == 0, 0.0, inside))


def share_from(e: np.ndarray, i: np.ndarray, f: np.ndarray, n: np.ndarray, end: np.ndarray,
               acc: np.ndarray, w: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``TargetCurve.share_at(e)`` from minute ``i = int(e / 60)``, ``f = e / 60 − i``, the
    day's length ``n`` and end minute, the running sum ``acc`` of minutes ``[0, i)`` and
    the weight ``w`` of minute ``i`` (where ``i`` is inside the curve's active part)."""
    p0 = point(i, end, acc, total)
    p1 = point(i + 1, end, acc + w, total)
    out = p0 * (1 - f) + p1 * f
    out = np.where(i >= n, 1.0, out)
    return np.where(e <= 0, 0.0, out)
