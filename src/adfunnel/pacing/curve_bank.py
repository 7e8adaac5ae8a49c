"""Target curves of many campaign-days at once, in O(24) numbers per traffic shape.

:func:`adfunnel.pacing.curve.curve_for_day` materialises a day's curve as one point per
minute (1,441 floats). At catalogue scale (10⁵–10⁶ campaigns, each with its own
traffic shape) that is gigabytes, so the budget service evaluates the same curve in
closed form instead, vectorised over numpy arrays of campaign-days:

- a *shape* is 24 hourly weights ``H`` (local wall-clock hours). ``hourly_to_minutely``
  interpolates linearly between hour mid-points and rescales each hour to keep its
  total, so inside hour ``h`` the weight of minute ``j`` is ``k_h × u_h(j)`` with ``u_h``
  linear on ``[0, 30)`` and on ``[30, 60)``; its prefix sum is a quadratic in ``j`` and
  the prefix over whole hours is the cumulative sum of ``H``;
- a *day-zone* is one local day of one time zone: the elapsed minutes of the day map
  onto local wall-clock minutes in at most a few contiguous *runs* (one on a normal
  day, two across a DST change), so the cumulative weight after ``m`` elapsed minutes
  is a sum of differences of the local prefix function.

The results equal ``curve_for_day`` up to float rounding (property-tested against it
in ``tests/budget/test_vectorised.py``). Elapsed times are seconds from the local day's
start; shares are in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta

import numpy as np

from adfunnel.campaigns.schedule import day_bounds, zone
from adfunnel.pacing.curve import END_MARGIN_MINUTES, TargetCurve

#: Most runs (contiguous stretches of local wall-clock minutes) a local day may have.
MAX_RUNS = 6
#: Rows evaluated at once where a computation makes a (rows × candidates) matrix.
CHUNK = 65_536


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
    """Interned hourly traffic shapes: ``H`` (n, 24), per-minute levels ``A`` (n, 26)
    = H/60 padded with the wrap-around neighbours, hour prefix sums ``HP`` (n, 25)."""

    def __init__(self, capacity: int = 64) -> None:
        self.n = 0
        self.H = np.zeros((capacity, 24))
        self.A = np.zeros((capacity, 26))
        self.HP = np.zeros((capacity, 25))

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
        a = h / 60.0
        self.A[ids, 1:25] = a
        self.A[ids, 0] = a[:, 23]
        self.A[ids, 25] = a[:, 0]
        self.HP[ids, 0] = 0.0
        self.HP[ids, 1:] = np.cumsum(h, axis=1)
        self.n += k
        return ids

    def compact(self, keep: np.ndarray) -> np.ndarray:
        """Keep only shapes ``keep`` (unique ids), renumbered 0..len-1 in order; returns
        the old -> new id map (int64[n_old], -1 for dropped)."""
        keep = np.unique(keep[keep >= 0])
        remap = np.full(max(self.n, 1), -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        for name in ("H", "A", "HP"):
            arr = getattr(self, name)
            arr[: len(keep)] = arr[keep]
        self.n = len(keep)
        return remap

    def _grow(self, need: int) -> None:
        cap = len(self.H)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name in ("H", "A", "HP"):
            arr = getattr(self, name)
            grown = np.zeros((new, arr.shape[1]))
            grown[: self.n] = arr[: self.n]
            setattr(self, name, grown)


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
    """Interned :class:`DayZone` s by (time zone, day ordinal), as arrays."""

    ids: dict[tuple[str, int], int] = field(default_factory=dict)
    zones: list[DayZone] = field(default_factory=list)
    start_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    minutes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    end_minute: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    nruns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    es: np.ndarray = field(default_factory=lambda: np.zeros((0, MAX_RUNS), dtype=np.int64))
    ls: np.ndarray = field(default_factory=lambda: np.zeros((0, MAX_RUNS), dtype=np.int64))
    ln: np.ndarray = field(default_factory=lambda: np.zeros((0, MAX_RUNS), dtype=np.int64))
    #: per day-zone, local minutes where a shape's per-minute weight may peak (padded)
    cand: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), dtype=np.int64))

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
        pad = [(0, 0, 0)] * (MAX_RUNS - len(dz.runs))
        runs = np.array(list(dz.runs) + pad, dtype=np.int64)
        self.start_s = np.append(self.start_s, dz.start_s)
        self.end_s = np.append(self.end_s, dz.end_s)
        self.minutes = np.append(self.minutes, dz.minutes)
        self.end_minute = np.append(self.end_minute, dz.end_minute)
        self.nruns = np.append(self.nruns, len(dz.runs))
        self.es = np.vstack([self.es, runs[:, 0]])
        self.ls = np.vstack([self.ls, runs[:, 1]])
        self.ln = np.vstack([self.ln, runs[:, 2]])
        cand = _peak_candidates(dz)
        width = max(self.cand.shape[1], len(cand))
        grown = np.zeros((len(self.zones), width), dtype=np.int64)
        rows = [*self.cand, np.array(cand, dtype=np.int64)]
        for k, row in enumerate(rows):
            grown[k, : len(row)] = row
            grown[k, len(row):] = row[0]  # padding repeats a real candidate
        self.cand = grown
        return i


def _peak_candidates(dz: DayZone) -> list[int]:
    """Local minutes where a per-minute weight can be largest over the day's active
    part (elapsed minutes before ``end_minute``): the ends of every linear piece
    (minutes 0, 29, 30, 59 of each hour) and of every run, inside the active runs."""
    out: set[int] = set()
    for es, ls, ln in dz.runs:
        active = max(0, min(ln, dz.end_minute - es))
        if active <= 0:
            continue
        lo, hi = ls, ls + active - 1
        out.update((lo, hi))
        for h in range(lo // 60, hi // 60 + 1):
            out.update(m for m in (60 * h, 60 * h + 29, 60 * h + 30, 60 * h + 59) if lo <= m <= hi)
    return sorted(out) or [0]


# -- closed forms ---------------------------------------------------------------------------
def _hour_parts(A: np.ndarray, H: np.ndarray, s: np.ndarray, h: np.ndarray,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: a_{h-1}, a_h, a_{h+1} (per-minute levels, wrapping) and k_h (the hour's
    rescale factor: H[h] / Σ unscaled minute weights, 0 for an empty hour)."""
    ap, ah, an = A[s, h], A[s, h + 1], A[s, h + 2]
    total = 7.5 * ap + 45.0 * ah + 7.5 * an
    hv = H[s, h]
    k = np.divide(hv, total, out=np.zeros_like(total), where=total > 0)
    return ap, ah, an, k


def local_cum(A: np.ndarray, H: np.ndarray, HP: np.ndarray, s: np.ndarray,
              lm: np.ndarray) -> np.ndarray:
    """Σ of the per-minute weights of local minutes ``[0, lm)`` (``lm`` in [0, 1440])."""
    h = np.minimum(lm // 60, 23)
    j = (lm - 60 * h).astype(np.float64)
    ap, ah, an, k = _hour_parts(A, H, s, h)
    first = j <= 30.0
    jf = np.minimum(j, 30.0)
    f = jf * jf / 120.0 + jf / 2.0
    q = ap * (jf - f) + ah * f
    jg = np.maximum(j, 30.0)
    g = (jg * jg - 900.0) / 120.0 - (jg - 30.0) / 2.0
    q = np.where(first, q, q + ah * ((jg - 30.0) - g) + an * g)
    return HP[s, h] + k * q


def minute_weight(A: np.ndarray, H: np.ndarray, s: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """The weight of local minute ``lm`` (in [0, 1440)) of each row's shape."""
    h = lm // 60
    j = (lm - 60 * h).astype(np.float64)
    ap, ah, an, k = _hour_parts(A, H, s, h)
    f = (j + 0.5) / 60.0 + 0.5
    g = (j + 0.5) / 60.0 - 0.5
    u = np.where(j < 30.0, ap * (1.0 - f) + ah * f, ah * (1.0 - g) + an * g)
    return k * u


class CurveBank:
    """Shapes and day-zones, and the vectorised curve of (shape id, day-zone id) pairs."""

    def __init__(self) -> None:
        self.shapes = ShapeTable()
        self.zones = DayZones()

    def elapsed_cum(self, s: np.ndarray, dz: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Σ of the weights of elapsed minutes ``[0, m)`` of each row's day (m ≥ 0 int)."""
        z = self.zones
        out = np.zeros(len(s))
        nr = int(z.nruns[dz].max()) if len(dz) else 0
        A, H, HP = self.shapes.A, self.shapes.H, self.shapes.HP
        for r in range(nr):
            es, ls, ln = z.es[dz, r], z.ls[dz, r], z.ln[dz, r]
            upto = ls + np.clip(m - es, 0, ln)
            out += local_cum(A, H, HP, s, upto)
            if ls.any():  # the prefix before local minute 0 is 0
                out -= local_cum(A, H, HP, s, ls)
        return out

    def local_minute(self, dz: np.ndarray, m: np.ndarray) -> np.ndarray:
        """The local wall-clock minute of elapsed minute ``m`` (in [0, minutes))."""
        z = self.zones
        out = np.zeros(len(dz), dtype=np.int64)
        for r in range(int(z.nruns[dz].max()) if len(dz) else 0):
            es, ls, ln = z.es[dz, r], z.ls[dz, r], z.ln[dz, r]
            inside = (m >= es) & (m < es + ln)
            out = np.where(inside, ls + m - es, out)
        return out

    def totals(self, s: np.ndarray, dz: np.ndarray) -> np.ndarray:
        """The weight of each row's active part (elapsed minutes before 23:30 local)."""
        return self.elapsed_cum(s, dz, self.zones.end_minute[dz])

    def points(self, s: np.ndarray, dz: np.ndarray, total: np.ndarray,
               m: np.ndarray) -> np.ndarray:
        """``TargetCurve.points[m]`` of each row (m in [0, minutes])."""
        end = self.zones.end_minute[dz]
        mm = np.minimum(m, end)
        acc = self.elapsed_cum(s, dz, mm)
        ok = total > 0
        share = np.divide(acc, total, out=mm / np.maximum(end, 1), where=ok)
        return np.where(m >= end, 1.0, np.minimum(1.0, share))

    def share_at(self, s: np.ndarray, dz: np.ndarray, total: np.ndarray,
                 elapsed_s: np.ndarray) -> np.ndarray:
        """``TargetCurve.share_at(elapsed_s)`` of each row (seconds since the day's start)."""
        e = np.asarray(elapsed_s, dtype=np.float64)
        n = self.zones.minutes[dz]
        end = self.zones.end_minute[dz]
        x = np.maximum(e, 0.0) / 60.0
        i = np.minimum(np.floor(x).astype(np.int64), n)
        f = x - i
        # points i and i + 1 from one prefix sum: the second adds minute i's weight
        mm = np.minimum(i, end)
        acc = self.elapsed_cum(s, dz, mm)
        w = minute_weight(self.shapes.A, self.shapes.H, s,
                          self.local_minute(dz, np.minimum(mm, np.maximum(end - 1, 0))))
        ok = total > 0
        flat = 1.0 / np.maximum(end, 1)
        a0 = np.divide(acc, total, out=mm * flat, where=ok)
        a1 = np.divide(acc + w, total, out=(mm + 1) * flat, where=ok)
        p0 = np.where(i >= end, 1.0, np.minimum(1.0, a0))
        p1 = np.where(i + 1 >= end, 1.0, np.minimum(1.0, a1))
        out = p0 * (1.0 - f) + p1 * f
        out = np.where(i >= n, 1.0, out)
        return np.where(e <= 0, 0.0, out)

    def peak_share_per_s(self, s: np.ndarray, dz: np.ndarray, total: np.ndarray) -> np.ndarray:
        """``TargetCurve.peak_share_per_s()`` of each row: the largest minute weight of the
        active part over the total, per second."""
        out = np.zeros(len(s))
        z = self.zones
        for a in range(0, len(s), CHUNK):
            ss, dd, tt = s[a:a + CHUNK], dz[a:a + CHUNK], total[a:a + CHUNK]
            cand = z.cand[dd]
            w = minute_weight(self.shapes.A, self.shapes.H,
                              np.repeat(ss, cand.shape[1]).reshape(cand.shape), cand)
            best = w.max(axis=1)
            flat = 1.0 / np.maximum(z.end_minute[dd], 1)
            out[a:a + CHUNK] = np.divide(best, tt, out=flat, where=tt > 0) / 60.0
        return out

    def curve(self, shape_id: int, dz_id: int) -> TargetCurve:
        """The materialised :class:`~adfunnel.pacing.curve.TargetCurve` of one pair (for
        per-campaign views; the service itself evaluates curves in bulk)."""
        n = int(self.zones.minutes[dz_id])
        m = np.arange(n + 1, dtype=np.int64)
        s = np.full(n + 1, shape_id, dtype=np.int64)
        d = np.full(n + 1, dz_id, dtype=np.int64)
        total = self.totals(s[:1], d[:1])
        pts = self.points(s, d, np.full(n + 1, total[0]), m)
        return TargetCurve(tuple(pts.tolist()), int(self.zones.end_minute[dz_id]))
