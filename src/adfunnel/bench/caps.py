"""Benchmark of the decision time that frequency caps add, on a real Redis.

``run_caps_bench(decisions, redis_url)`` builds a small catalogue (``campaigns``
campaigns of one 300x250 ad each, everyone targeted, one advertiser each); the
``capped`` highest bidders carry two caps each (campaign: ``cap_count`` per day; ad:
``cap_count`` per hour), so every request has ``capped`` candidates with caps. Two
:class:`~adfunnel.serving.decider.ColumnarDecider` s decide the same requests with the
same seeds: one enforces the caps through a
:class:`~adfunnel.frequency.redis_store.RedisFrequencyStore` at ``redis_url`` (one
``HMGET`` of ``2 × capped`` fields screens the candidates, one script call counts the
winner), the other enforces none (the baseline). Each request is decided by both, in
alternating order, so drift (load, caches) touches both alike. Each decision is
committed to its decider's own local spend gate, as a server does.

User keys cycle over ``users`` keys of this run (``bench-caps-<run>-<n>``), so a user
meets a cap counter ``decisions / users`` times at most; with ``cap_count`` above that
no cap binds and every decision does the full work (read, then count its winner).
The run's keys, the warm-up's included, are deleted at the end.

Result (times in µs, wall clock, ``time.perf_counter``)::

    {"redis_url", "decisions", "campaigns", "capped_candidates", "fields_read", "users",
     "measure", "p50_us", "p99_us", "screen_p50_us", "screen_p99_us",
     "count_p50_us", "count_p99_us", "delta_p50_us", "delta_p99_us",
     "with_caps": {"p50_us", "p99_us"}, "baseline": {"p50_us", "p99_us"},
     "target_p99_us", "meets_target", "counted", "cap_unavailable", "fill_rate",
     "key_prefix", "load_avg_1m"}

- ``p50_us``/``p99_us``: the added time: percentiles over decisions of the time spent
  in the cap steps themselves (``CapGate.screen``: plans, the read, the verdicts; plus
  ``CapGate.count``: the atomic script call), measured around those calls in each
  decision (``measure`` says so). ``screen_*``/``count_*``: the two steps apart.
- ``delta_p50_us``/``delta_p99_us``: the with-caps decisions' percentile minus the
  baseline's: the same added time seen from the outside (it also holds what the cap
  steps leave around them, and the noise of two distributions).
- ``with_caps``/``baseline``: percentiles of whole ``decide`` calls.
- ``counted``: decisions whose winner was counted in Redis; ``cap_unavailable``:
  decisions where Redis did not answer in time (their capped candidates dropped out).
- ``target_p99_us``: 1,000 µs; ``meets_target``: ``p99_us`` ≤ it.
- ``key_prefix``: the run's user keys (``fc:{<key_prefix><n>}``), all deleted.
"""

from __future__ import annotations

import gc
import os
import random
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import redis

from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    BidType,
    Campaign,
    CapLevel,
    CapWindow,
    FrequencyCap,
    Objective,
    Placement,
)
from adfunnel.clock import FixedClock, monotonic_ms
from adfunnel.frequency.redis_store import RedisFrequencyStore
from adfunnel.frequency.windows import CapPlan
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.caps import CAP_UNAVAILABLE, CapBook, CapGate, Screen
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision import Decision
from adfunnel.serving.request import PlacementIn, SelectRequest, SlotIn, UserIn

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
#: The added time a decision may spend on caps at p99, µs.
TARGET_P99_US = 1_000.0
NOW = datetime(2026, 6, 10, 14, 30, tzinfo=UTC)  # a Wednesday afternoon
WARMUP = 100  # decisions of each decider before timing (connections, script load)


class TimedCapGate(CapGate):
    """A :class:`CapGate` that adds the wall time of its calls to ``screen_s`` and
    ``count_s`` (seconds; the caller reads and resets them per decision)."""

    def __init__(self, store: RedisFrequencyStore, book: CapBook) -> None:
        super().__init__(store, book)
        self.screen_s = 0.0
        self.count_s = 0.0

    def screen(self, user_key: str | None, candidates: Sequence[tuple[int, Campaign]],
               at: datetime) -> Screen:
        t0 = time.perf_counter()
        try:
            return super().screen(user_key, candidates, at)
        finally:
            self.screen_s += time.perf_counter() - t0

    def count(self, user_key: str, plans: Sequence[CapPlan],
              at: datetime) -> list[str | None]:
        t0 = time.perf_counter()
        try:
            return super().count(user_key, plans, at)
        finally:
            self.count_s += time.perf_counter() - t0


def build_capped_catalog(campaigns: int, capped: int, cap_count: int) -> Catalog:
    """``campaigns`` campaigns of one 300x250 ad, the ``capped`` highest bidders with a
    day cap (campaign level) and an hour cap (ad level) of ``cap_count`` each."""
    caps = (FrequencyCap.counter(cap_count, CapWindow.DAY, CapLevel.CAMPAIGN),
            FrequencyCap.counter(cap_count, CapWindow.HOUR, CapLevel.AD))
    out = [
        Campaign(cid, cid, f"c{cid}", Objective.IMPRESSIONS, BidType.CPM,
                 1_000_000 + 10_000 * (campaigns - cid), 10**12, "UTC", date(2026, 1, 1),
                 frequency_caps=caps if cid <= capped else ())
        for cid in range(1, campaigns + 1)
    ]
    catalog = Catalog.shaped()
    catalog.load(Snapshot(
        [Advertiser(cid, f"a{cid}") for cid in range(1, campaigns + 1)], out,
        [Ad(cid, cid, "https://x.test/", f"cr/{cid}", "banner", 300, 250)
         for cid in range(1, campaigns + 1)],
        0, [Placement("feed", "feed", reserve_cpm_micros=200_000)]))
    return catalog


def _request(user: str) -> SelectRequest:
    return SelectRequest(UserIn(user, {"geo.country": "US"}), PlacementIn("feed"),
                         [SlotIn("s1", 1, 300, 250)])


def _decider(catalog: Catalog, caps: CapGate | None, seed: int) -> ColumnarDecider:
    return ColumnarDecider(catalog, LocalSpendGate(), SmoothedCtr(0.001, 1_000.0),
                           FixedClock(NOW), b"k" * 32, caps=caps, rng=random.Random(seed))


def _decide(decider: ColumnarDecider, req: SelectRequest, rid: str) -> tuple[float, Decision]:
    t0 = time.perf_counter()
    d = decider.decide(req, rid, monotonic_ms() + 60_000)
    elapsed = time.perf_counter() - t0
    decider.commit(d)
    return elapsed, d


def _pct(values: Sequence[float] | np.ndarray, q: float) -> float:
    return round(float(np.percentile(values, q)), 1)


def _shown(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def run_caps_bench(decisions: int = 5_000, redis_url: str = DEFAULT_REDIS_URL, *,
                   campaigns: int = 50, capped: int = 5, users: int = 1_000,
                   cap_count: int = 1_000_000, seed: int = 1) -> dict[str, Any]:
    """Build, decide with and without caps, measure (module docstring).

    Raises:
        ValueError: ``decisions`` < 1, ``users`` < 1, or not 1 <= ``capped`` <=
            ``campaigns``.
        ConnectionError: Redis at ``redis_url`` does not answer a PING within 1 s.
    """
    if decisions < 1 or users < 1 or not 1 <= capped <= campaigns:
        raise ValueError("need decisions >= 1, users >= 1 and 1 <= capped <= campaigns")
    probe = redis.Redis.from_url(redis_url, socket_timeout=1, socket_connect_timeout=1)
    try:
        probe.ping()
    except (redis.RedisError, OSError) as exc:
        raise ConnectionError(f"Redis at {_shown(redis_url)} did not answer: {exc}") from exc

    catalog = build_capped_catalog(campaigns, capped, cap_count)
    store = RedisFrequencyStore(redis_url)
    gate = TimedCapGate(store, catalog.caps)
    with_caps, baseline = _decider(catalog, gate, seed), _decider(catalog, None, seed)
    prefix = f"bench-caps-{uuid.uuid4().hex[:8]}-"
    warm = [f"{prefix}w{n}" for n in range(min(users, WARMUP))]
    keys = [f"{prefix}{n}" for n in range(users)]
    try:
        for i in range(WARMUP):
            req = _request(warm[i % len(warm)])
            _decide(with_caps, req, f"w{i}")
            _decide(baseline, req, f"w{i}")
        gc.collect()
        lat_caps = np.zeros(decisions)
        lat_base = np.zeros(decisions)
        screen_s = np.zeros(decisions)
        count_s = np.zeros(decisions)
        counted = unavailable = filled = 0
        capped_ids = set(range(1, capped + 1))
        for i in range(decisions):
            req = _request(keys[i % users])
            gate.screen_s = gate.count_s = 0.0
            if i % 2:  # alternate which goes first
                lat_base[i], _ = _decide(baseline, req, f"b{i}")
                lat_caps[i], d = _decide(with_caps, req, f"r{i}")
            else:
                lat_caps[i], d = _decide(with_caps, req, f"r{i}")
                lat_base[i], _ = _decide(baseline, req, f"b{i}")
            screen_s[i], count_s[i] = gate.screen_s, gate.count_s
            filled += bool(d.placed)
            counted += any(p.campaign.id in capped_ids for p in d.placed)
            unavailable += bool((d.reason_counts or {}).get(CAP_UNAVAILABLE))
    finally:
        _erase(redis_url, [store.key(k) for k in warm + keys])
        store.close()
        probe.close()

    added = (screen_s + count_s) * 1e6
    lat_caps *= 1e6
    lat_base *= 1e6
    p99 = _pct(added, 99)
    return {
        "redis_url": _shown(redis_url), "decisions": decisions, "campaigns": campaigns,
        "capped_candidates": capped, "fields_read": 2 * capped, "users": users,
        "measure": "cap_steps: per-decision wall time of CapGate.screen + CapGate.count",
        "p50_us": _pct(added, 50), "p99_us": p99,
        "screen_p50_us": _pct(screen_s * 1e6, 50), "screen_p99_us": _pct(screen_s * 1e6, 99),
        "count_p50_us": _pct(count_s * 1e6, 50), "count_p99_us": _pct(count_s * 1e6, 99),
        "delta_p50_us": round(_pct(lat_caps, 50) - _pct(lat_base, 50), 1),
        "delta_p99_us": round(_pct(lat_caps, 99) - _pct(lat_base, 99), 1),
        "with_caps": {"p50_us": _pct(lat_caps, 50), "p99_us": _pct(lat_caps, 99)},
        "baseline": {"p50_us": _pct(lat_base, 50), "p99_us": _pct(lat_base, 99)},
        "target_p99_us": TARGET_P99_US, "meets_target": p99 <= TARGET_P99_US,
        "counted": counted, "cap_unavailable": unavailable,
        "fill_rate": round(filled / decisions, 3), "key_prefix": prefix,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def _erase(redis_url: str, keys: list[str]) -> None:
    """Delete ``keys`` (500 per ``DEL``)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])
    finally:
        client.close()
