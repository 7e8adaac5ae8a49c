"""Sliding windows over event time, per key, with memory bounded by time and count.

Clock-free: every call takes the event's own time (epoch ms), so a replay of the same
events gives the same answers. Keys are kept in the order they were last touched and
:meth:`evict` drops, from the oldest, those with nothing inside the horizon; with
events in time order memory is exactly what the last horizon touched, and events out
of order only delay an eviction until the keys before it expire too.

Rate-limit libraries (``limits``, ``pyrate-limiter``) read the wall clock and answer
allow/deny for the present; tier 2 needs counts at an event's own time, replayable,
so these two small structures are written here.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class RecentTimes(Generic[K]):
    """Per key, its most recent event times (sorted), for sliding-window rate limits.

    Args:
        horizon_ms: the longest window any :meth:`count` asks about (ms, > 0); older
            times are dropped.
        cap: most times kept per key (≥ 1). With ``cap ≥ limit + 1`` the decision
            "more than ``limit`` in the window" is exact for events in time order: only
            the newest ``limit + 1`` times can decide it.

    Raises:
        ValueError: ``horizon_ms`` or ``cap`` is not positive.
    """

    def __init__(self, horizon_ms: int, cap: int) -> None:
        if horizon_ms <= 0 or cap <= 0:
            raise ValueError(f"horizon_ms and cap must be > 0, got {horizon_ms}, {cap}")
        self.horizon_ms = horizon_ms
        self.cap = cap
        self._times: OrderedDict[K, list[int]] = OrderedDict()

    def add(self, key: K, at_ms: int) -> None:
        """Record an event of ``key`` at ``at_ms``; keeps at most ``cap`` times, none at
        or before ``newest - horizon_ms``."""
        times = self._times.get(key)
        if times is None:
            self._times[key] = [at_ms]
            return
        self._times.move_to_end(key)
        if at_ms >= times[-1]:
            times.append(at_ms)
        else:
            insort(times, at_ms)
        cutoff = times[-1] - self.horizon_ms
        drop = max(len(times) - self.cap, bisect_right(times, cutoff))
        if drop:
            del times[:drop]

    def count(self, key: K, at_ms: int, window_ms: int) -> int:
        """Times of ``key`` in the window ``(at_ms - window_ms, at_ms]`` (an event exactly
        ``window_ms`` earlier is outside it)."""
        times = self._times.get(key)
        if not times:
            return 0
        return bisect_right(times, at_ms) - bisect_right(times, at_ms - window_ms)

    def times(self, key: K) -> tuple[int, ...]:
        """The times kept for ``key``, oldest first."""
        return tuple(self._times.get(key, ()))

    def evict(self, watermark_ms: int) -> int:
        """Forget keys whose newest time is at or before ``watermark_ms - horizon_ms``
        (oldest-touched first, stopping at the first live key); returns how many."""
        cutoff = watermark_ms - self.horizon_ms
        dropped = 0
        times = self._times
        while times:
            key = next(iter(times))
            if times[key][-1] > cutoff:
                break
            del times[key]
            dropped += 1
        return dropped

    def __len__(self) -> int:
        return len(self._times)

    def entries(self) -> int:
        """Times held over all keys (the memory this window uses, in entries)."""
        return sum(len(t) for t in self._times.values())


class BucketCounts(Generic[K]):
    """Per key, impressions and clicks in fixed time buckets over a sliding window.

    The window at time ``t`` sums the buckets that start after ``t - window_ms`` and
    not after ``t``, so it covers between ``window_ms - bucket_ms`` and ``window_ms``
    of history. Memory: at most ``window_ms // bucket_ms + 1`` buckets per key.

    Args:
        window_ms: the window (ms, > 0).
        bucket_ms: bucket width (ms, > 0, dividing ``window_ms``).

    Raises:
        ValueError: a width is not positive or does not divide the window.
    """

    def __init__(self, window_ms: int, bucket_ms: int) -> None:
        if window_ms <= 0 or bucket_ms <= 0 or window_ms % bucket_ms:
            raise ValueError(
                f"need 0 < bucket_ms dividing window_ms, got {bucket_ms}, {window_ms}")
        self.window_ms = window_ms
        self.bucket_ms = bucket_ms
        #: key -> {bucket start: [impressions, clicks]}, buckets in insertion order
        self._buckets: OrderedDict[K, dict[int, list[int]]] = OrderedDict()
        self._newest: dict[K, int] = {}

    def add(self, key: K, at_ms: int, impressions: int = 0, clicks: int = 0) -> None:
        """Count ``impressions`` and ``clicks`` of ``key`` at ``at_ms``."""
        start = at_ms - at_ms % self.bucket_ms
        buckets = self._buckets.get(key)
        if buckets is None:
            buckets = self._buckets[key] = {}
            self._newest[key] = start
        else:
            self._buckets.move_to_end(key)
        cell = buckets.get(start)
        if cell is None:
            cell = buckets[start] = [0, 0]
            if start > self._newest[key]:
                self._newest[key] = start
                cutoff = start - self.window_ms
                for old in [b for b in buckets if b <= cutoff]:
                    del buckets[old]
        cell[0] += impressions
        cell[1] += clicks

    def totals(self, key: K, at_ms: int) -> tuple[int, int]:
        """``(impressions, clicks)`` of ``key`` in the window ending at ``at_ms``."""
        buckets = self._buckets.get(key)
        if not buckets:
            return 0, 0
        low = at_ms - self.window_ms
        impressions = clicks = 0
        for start, (imp, clk) in buckets.items():
            if low < start <= at_ms:
                impressions += imp
                clicks += clk
        return impressions, clicks

    def evict(self, watermark_ms: int) -> int:
        """Forget keys whose newest bucket starts at or before ``watermark_ms -
        window_ms`` (no window ending at the watermark or later sees it), oldest-touched
        first, stopping at the first live key; returns how many."""
        cutoff = watermark_ms - self.window_ms
        dropped = 0
        while self._buckets:
            key = next(iter(self._buckets))
            if self._newest[key] > cutoff:
                break
            del self._buckets[key], self._newest[key]
            dropped += 1
        return dropped

    def __len__(self) -> int:
        return len(self._buckets)

    def entries(self) -> int:
        """Buckets held over all keys."""
        return sum(len(b) for b in self._buckets.values())
