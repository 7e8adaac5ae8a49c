"""Rollups agree with the ledger's own per-day report in every zone: random events in
zones with :30 and :45 offsets and DST land in the same local day in both, and in the
local hour of their own wall-clock time (memory and SQLite rollup stores alike)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from adfunnel.billing.ledger import Ledger, MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.rollup_store import MemoryRollupStore, RollupStore
from adfunnel.billing.rollups import hours_of, local_days_span, local_hour
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.sql_rollups import make_rollup_store
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.schedule import local_day, zone
from adfunnel.db import make_engine

#: Zones whose offsets are not whole hours, or that change offset (DST), or both.
ZONES = ["Australia/Adelaide", "Asia/Kolkata", "Asia/Kathmandu", "Pacific/Chatham",
         "Australia/Lord_Howe", "America/St_Johns", "Australia/Eucla", "Asia/Tehran",
         "America/New_York", "Europe/London"]
BUDGET = 10**15
_IDS = itertools.count(1)  # each example has a campaign of its own

# Events within a few days around a DST change or an ordinary day, minute-exact.
instants = st.builds(
    lambda day, minute: datetime(day.year, day.month, day.day, tzinfo=UTC)
    + timedelta(minutes=minute),
    st.sampled_from([date(2026, 3, 3), date(2026, 4, 4), date(2026, 10, 3),
                     date(2026, 3, 28), date(2026, 11, 1), date(2026, 9, 26)]),
    st.integers(0, 3 * 24 * 60 - 1),
)


def _check(ledger: Ledger, rollups: RollupStore, tz: str, times: list[datetime]) -> None:
    cid = next(_IDS)
    for i, at in enumerate(times):
        ev = LedgerEvent(f"z{cid}-{i}", EventType.IMPRESSION, cid, 1, "feed", "CPM", 1_000 + i,
                         at, local_day(at, tz))
        ledger.record(ev, BUDGET)
    rollups.refresh(hours_of(times))
    first = min(local_day(t, tz) for t in times) - timedelta(days=1)
    last = max(local_day(t, tz) for t in times) + timedelta(days=1)
    start, end = local_days_span(first, last, tz)

    days = rollups.query(start=start, end=end, campaign_ids=[cid], granularity="day",
                         time_zone=tz)
    report = ledger.day_totals(cid, first, last)
    assert [(r.period_start.date(), r.impressions, r.billed_micros) for r in days] == [
        (d.day, d.impressions, d.billed_micros) for d in report]
    assert all(r.period_start.tzinfo is not None
               and r.period_start.utcoffset() == r.period_start.astimezone(zone(tz)).utcoffset()
               for r in days)

    hours = rollups.query(start=start, end=end, campaign_ids=[cid], granularity="hour",
                          time_zone=tz)
    want = Counter(local_hour(t, zone(tz)) for t in times)
    assert {r.period_start.astimezone(UTC): r.impressions for r in hours} == dict(want)
    for r in hours:  # each row names its local wall-clock hour, in the report's zone
        local = r.period_start.astimezone(zone(tz))
        assert local.utcoffset() == r.period_start.utcoffset()
        assert local.minute == 0 or _missing(local.replace(minute=0)), local


def _missing(wall: datetime) -> bool:
    """Whether the local wall time ``wall`` does not exist in its zone (a DST gap: Lord
    Howe springs forward from 02:00 to 02:30, so its hour 02 starts at 02:30)."""
    back = wall.astimezone(UTC).astimezone(wall.tzinfo)
    return back.replace(tzinfo=None) != wall.replace(tzinfo=None)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ZONES), st.lists(instants, min_size=1, max_size=12))
@example("Australia/Lord_Howe", [datetime(2026, 10, 3, 15, 40, tzinfo=UTC)])  # hour 02 from 02:30
def test_memory_rollups_bucket_like_the_ledger_report(tz: str, times: list[datetime]) -> None:
    ledger = MemoryLedger()
    _check(ledger, MemoryRollupStore(ledger), tz, times)


@pytest.fixture(scope="module")
def sql() -> Iterator[tuple[SqlLedger, RollupStore]]:
    """One migrated SQLite database for every example."""
    engine = make_engine("sqlite://")
    upgrade(engine)
    yield SqlLedger(engine), make_rollup_store(engine)
    engine.dispose()


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(tz=st.sampled_from(ZONES), times=st.lists(instants, min_size=1, max_size=12))
@example(tz="Australia/Lord_Howe", times=[datetime(2026, 10, 3, 15, 40, tzinfo=UTC)])
def test_sql_rollups_bucket_like_the_ledger_report(
    sql: tuple[SqlLedger, RollupStore], tz: str, times: list[datetime]
) -> None:
    _check(*sql, tz, times)


def test_the_adelaide_midnight_of_the_issue() -> None:
    """23:50 local on 3 March and 00:10 on 4 March: one impression on each day."""
    ledger = MemoryLedger()
    _check(ledger, MemoryRollupStore(ledger), "Australia/Adelaide",
           [datetime(2026, 3, 3, 13, 20, tzinfo=UTC), datetime(2026, 3, 3, 13, 40, tzinfo=UTC)])
