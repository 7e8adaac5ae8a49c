"""Sliding windows against brute-force counts, and eviction keeping memory bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.ivt.windows import BucketCounts, RecentTimes

TIMES = st.lists(st.integers(0, 10_000), max_size=60)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(TIMES, st.integers(1, 3_000), st.integers(0, 8))
def test_in_order_rate_decisions_are_exact_with_cap_limit_plus_one(
        times: list[int], window: int, limit: int) -> None:
    """With times in order and ``cap = limit + 1``, "more than ``limit`` in (t - w, t]"
    matches a count over all earlier times."""
    times.sort()
    recent: RecentTimes[str] = RecentTimes(window, limit + 1)
    for i, t in enumerate(times):
        recent.add("k", t)
        truth = sum(1 for s in times[: i + 1] if t - window < s <= t)
        assert (recent.count("k", t, window) > limit) == (truth > limit)
        assert len(recent.times("k")) <= limit + 1


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(TIMES, st.integers(1, 3_000))
def test_counts_match_a_scan_in_any_order(times: list[int], window: int) -> None:
    """Out of order and with room for every time, the count is the exact window count
    of the times that are not older than the horizon behind the newest one."""
    recent: RecentTimes[str] = RecentTimes(window, 10_000)
    seen: list[int] = []
    for t in times:
        recent.add("k", t)
        seen.append(t)
        newest = max(seen)
        kept = sorted(s for s in seen if s > newest - window)
        assert list(recent.times("k")) == kept
        assert recent.count("k", t, window) == sum(1 for s in kept if t - window < s <= t)


def test_window_edges() -> None:
    recent: RecentTimes[str] = RecentTimes(2_000, 5)
    for t in (0, 500, 1_000):
        recent.add("k", t)
    assert recent.count("k", 1_000, 1_000) == 2  # 0 is exactly one window back: out
    assert recent.count("k", 999, 1_000) == 2  # 1_000 is later: out
    recent.add("k", 2_000)  # 0 is now a whole horizon behind the newest: dropped
    assert recent.times("k") == (500, 1_000, 2_000)
    assert recent.count("other", 1_000, 1_000) == 0
    with pytest.raises(ValueError):
        RecentTimes(0, 1)
    with pytest.raises(ValueError):
        BucketCounts(1_000, 300)


def test_bucket_totals_window_excludes_its_start() -> None:
    """totals over (at - window, at]: the bucket starting exactly one window back is out."""
    buckets: BucketCounts[str] = BucketCounts(10_000, 1_000)
    buckets.add("k", 0, impressions=1)
    assert buckets.totals("k", 9_999) == (1, 0)
    assert buckets.totals("k", 10_000) == (0, 0)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50_000)), max_size=200),
       st.integers(1, 20_000))
def test_eviction_keeps_only_keys_live_within_the_horizon(
        events: list[tuple[int, int]], horizon: int) -> None:
    events.sort(key=lambda e: e[1])
    recent: RecentTimes[int] = RecentTimes(horizon, 3)
    newest: dict[int, int] = {}
    for key, t in events:
        recent.add(key, t)
        newest[key] = t
        recent.evict(t)
        live = {k for k, last in newest.items() if last > t - horizon}
        assert len(recent) == len(live)
        assert recent.entries() <= 3 * len(live)
    if events:
        recent.evict(events[-1][1] + horizon)
        assert len(recent) == 0 and recent.entries() == 0


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30_000), st.booleans()), max_size=80))
def test_bucket_totals_match_a_scan(events: list[tuple[int, bool]]) -> None:
    window, width = 10_000, 1_000
    buckets: BucketCounts[str] = BucketCounts(window, width)
    events.sort()
    for i, (t, click) in enumerate(events):
        buckets.add("k", t, impressions=int(not click), clicks=int(click))
        low = t - window
        past = [(s, c) for s, c in events[: i + 1] if low < s - s % width <= t]
        expected = (sum(1 for _, c in past if not c), sum(1 for _, c in past if c))
        assert buckets.totals("k", t) == expected
        assert buckets.entries() <= window // width + 1
    if events:
        assert buckets.evict(events[-1][0] + window) == 1 and len(buckets) == 0
