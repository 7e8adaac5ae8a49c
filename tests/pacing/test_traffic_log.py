"""Eligible-traffic log: counts per campaign and hour, and the curve shapes made from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adfunnel.campaigns.migrate import upgrade
from adfunnel.db import make_engine
from adfunnel.pacing.traffic_log import (
    MIN_REQUESTS,
    EligibleCounter,
    SqlTrafficLog,
    local_shape,
    shapes,
    window_start,
)

T0 = datetime(2026, 7, 15, 0, 0, tzinfo=UTC)


def test_counter_buckets_by_utc_hour_and_drains() -> None:
    c = EligibleCounter()
    c.add(1, T0 + timedelta(minutes=5))
    c.add(1, T0 + timedelta(minutes=55))
    c.add(1, T0 + timedelta(hours=1))
    assert c.drain() == {(1, T0): 2, (1, T0 + timedelta(hours=1)): 1}
    assert c.drain() == {}


def test_local_shape_follows_the_campaign_time_zone() -> None:
    # all traffic at 10:00Z: 12:00 in Vienna (CEST), 06:00 in New York (EDT)
    counts = {T0: 0, T0 + timedelta(hours=10): 50}  # lived from 00:00Z for a day
    now = T0 + timedelta(days=1)
    vienna = local_shape(counts, "Europe/Vienna", now)
    new_york = local_shape(counts, "America/New_York", now)
    assert vienna[12] == 1.0 and sum(vienna) == 1.0
    assert new_york[6] == 1.0


def test_new_campaign_gets_the_placement_average() -> None:
    # 1 and 2 lived the whole day (a request at 00:00), 3 too little
    busy = {T0: 1} | {T0 + timedelta(hours=h): MIN_REQUESTS for h in (8, 9)}
    traffic = {1: busy, 2: {T0: 1, T0 + timedelta(hours=20): MIN_REQUESTS}, 3: {T0: 3}}
    got = shapes(traffic, {1: "UTC", 2: "UTC", 3: "UTC", 4: "UTC"}, T0 + timedelta(days=1))
    assert got[1][8] == pytest.approx(0.5, rel=0.01) and got[2][20] == pytest.approx(1, rel=0.01)
    assert got[3] == got[4]  # too little history / none: the average of the others
    assert got[4][8] == pytest.approx(0.25, rel=0.01)
    assert got[4][20] == pytest.approx(0.5, rel=0.01)


def test_no_history_anywhere_is_flat() -> None:
    assert shapes({}, {1: "UTC"}, T0)[1] == pytest.approx([1 / 24] * 24)


@pytest.fixture(params=["sqlite", "postgres"])
def traffic_log(request: pytest.FixtureRequest, tmp_path):
    url = (f"sqlite:///{tmp_path / 't.db'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_schema_url"))
    engine = make_engine(url)
    upgrade(engine)
    yield SqlTrafficLog(engine)
    engine.dispose()


@pytest.mark.slow
def test_writes_from_many_servers_add_up(traffic_log: SqlTrafficLog) -> None:
    traffic_log.add({(1, T0): 3, (2, T0): 1})
    traffic_log.add({(1, T0): 4})
    traffic_log.add({})
    got = traffic_log.hourly(window_start(T0 + timedelta(days=1)))
    assert got == {1: {T0: 7}, 2: {T0: 1}}
    assert traffic_log.hourly(T0 + timedelta(hours=1)) == {}


def test_peek_reads_without_taking_and_forget_drops_old_hours() -> None:
    import numpy as np

    c = EligibleCounter()
    t0 = datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    c.add(7, t0)
    c.add_many(np.array([3, 7], dtype=np.int64), t0 + timedelta(hours=1))
    c.add_many([9], t0 + timedelta(hours=1))
    h10, h11 = t0.replace(minute=0), t0.replace(minute=0) + timedelta(hours=1)
    want = {(7, h10): 1, (3, h11): 1, (7, h11): 1, (9, h11): 1}
    assert c.peek() == want
    assert c.peek() == want  # nothing taken
    c.forget_before(h11)
    assert c.peek() == {k: v for k, v in want.items() if k[1] == h11}
    assert c.drain() == {k: v for k, v in want.items() if k[1] == h11}
    assert c.peek() == {}


def test_requests_since_sums_the_asked_campaigns_only() -> None:
    engine = make_engine("sqlite://")
    upgrade(engine)
    log = SqlTrafficLog(engine)
    h = datetime(2026, 3, 1, 10, tzinfo=UTC)
    log.add({(1, h): 3, (1, h + timedelta(hours=1)): 4, (2, h): 5, (3, h - timedelta(hours=1)): 9})
    log.add({(1, h): 1})
    assert log.requests_since([1, 3, 4], h) == {1: 8, 3: 0, 4: 0}
    assert log.requests_since([], h) == {}
