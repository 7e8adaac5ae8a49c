"""Time zones: budget days, dayparts and DST days (DESIGN.md: the budget day is local)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from adfunnel.campaigns.model import BidType, Campaign, Daypart, Objective
from adfunnel.campaigns.schedule import day_bounds, in_daypart, in_flight, local_day


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_sao_paulo_budget_day_resets_at_03z() -> None:
    assert local_day(utc(2026, 7, 15, 2, 59, 59), "America/Sao_Paulo") == date(2026, 7, 14)
    assert local_day(utc(2026, 7, 15, 3, 0, 0), "America/Sao_Paulo") == date(2026, 7, 15)
    start, _ = day_bounds(date(2026, 7, 15), "America/Sao_Paulo")
    assert start == utc(2026, 7, 15, 3)


def _eligible_utc_hours(day: date) -> list[int]:
    parts = (Daypart(tuple(range(7)), 12, 24),)
    base = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return [h for h in range(24) if in_daypart(parts, base + timedelta(hours=h), "Europe/Vienna")]


def test_vienna_afternoon_daypart_in_summer_and_winter() -> None:
    # 12:00-24:00 local: CEST (UTC+2) → 10:00Z-21:59Z; CET (UTC+1) → 11:00Z-22:59Z.
    assert _eligible_utc_hours(date(2026, 7, 15)) == list(range(10, 22))
    assert _eligible_utc_hours(date(2026, 1, 15)) == list(range(11, 23))
    parts = (Daypart(tuple(range(7)), 12, 24),)
    assert in_daypart(parts, utc(2026, 7, 15, 21, 59, 59), "Europe/Vienna")
    assert not in_daypart(parts, utc(2026, 7, 15, 22, 0, 0), "Europe/Vienna")


def _campaign(start: date) -> Campaign:
    return Campaign(
        1, 1, "c", Objective.CLICKS, BidType.CPC, 1_000_000, 100_000_000, "America/New_York", start
    )


def test_dst_days_are_one_budget_day_each() -> None:
    for day, hours in ((date(2026, 11, 1), 25), (date(2026, 3, 8), 23)):
        start, end = day_bounds(day, "America/New_York")
        assert end - start == timedelta(hours=hours)
        # every instant of the local day maps to that one budget day
        t = start
        while t < end:
            assert local_day(t, "America/New_York") == day
            t += timedelta(minutes=30)
        assert local_day(end, "America/New_York") == day + timedelta(days=1)


def test_flight_start_is_a_local_date() -> None:
    c = _campaign(date(2026, 11, 1))
    assert not in_flight(c, utc(2026, 11, 1, 3, 59))  # still Oct 31 in New York
    assert in_flight(c, utc(2026, 11, 1, 4, 0))


def test_a_25_hour_day_gets_one_daily_budget() -> None:
    """Charges across the whole 25-hour 2026-11-01 in New York share one daily budget."""
    from adfunnel.billing.ledger import MemoryLedger
    from adfunnel.billing.model import EventType, LedgerEvent

    ledger = MemoryLedger()
    start, end = day_bounds(date(2026, 11, 1), "America/New_York")
    billed = []
    for i, at in enumerate((start, start + timedelta(hours=12), end - timedelta(minutes=1))):
        day = local_day(at, "America/New_York")
        event = LedgerEvent(f"imp{i}", EventType.IMPRESSION, 1, 1, "p", "CPM", 400, at, day)
        billed.append(ledger.record(event, daily_budget_micros=1_000).billed_micros)
    assert billed == [400, 400, 200]  # the third hits the one budget of the long day
    assert [t.day for t in ledger.day_totals(1, date(2026, 10, 31), date(2026, 11, 2))] == [
        date(2026, 11, 1)
    ]
