"""The pure part of the hourly rollups: hours, runs, local-day spans, aggregation and
metrics (adfunnel.billing.rollups)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.rollup_store import DirtyHours, MemoryRollupStore
from adfunnel.billing.rollups import (
    HOUR,
    HourRollup,
    aggregate,
    cost_per_conversion_micros,
    ctr,
    ecpm_micros,
    hour_range,
    hours_of,
    ivt_reasons,
    local_days_span,
    rollup_rows,
    runs,
    total,
    utc_hour,
    utc_quarter,
)
from adfunnel.campaigns.schedule import zone

T0 = datetime(2026, 11, 3, 14, tzinfo=UTC)


def ev(imp: str, kind: EventType, at: datetime, cid: int = 1, ad: int = 10,
       placement: str = "feed") -> LedgerEvent:
    return LedgerEvent(imp, kind, cid, ad, placement, "CPM", 0, at, at.date())


def test_utc_hour_and_hours_of() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert utc_hour(datetime(2026, 11, 3, 16, 59, 59, 999, tzinfo=plus2)) == T0
    assert hours_of([T0, T0 + timedelta(minutes=59), T0 + HOUR]) == {T0, T0 + HOUR}
    with pytest.raises(ValueError, match="time zone"):
        utc_hour(datetime(2026, 11, 3, 14))


def test_hour_range_and_runs() -> None:
    assert hour_range(T0 + timedelta(minutes=30), T0 + timedelta(hours=2)) == [
        T0, T0 + HOUR, T0 + 2 * HOUR]
    assert hour_range(T0 + HOUR, T0) == []
    hours = [T0 + 3 * HOUR, T0, T0 + HOUR, T0 + 5 * HOUR, T0 + HOUR]
    assert runs(hours) == [(T0, T0 + 2 * HOUR), (T0 + 3 * HOUR, T0 + 4 * HOUR),
                           (T0 + 5 * HOUR, T0 + 6 * HOUR)]


def test_metrics_are_none_without_a_denominator_and_round_down() -> None:
    assert ctr(1, 0) is None and ctr(1, 4) == 0.25
    assert ecpm_micros(5, 0) is None and ecpm_micros(2_000, 3) == 666_666
    assert cost_per_conversion_micros(5, 0) is None
    assert cost_per_conversion_micros(10, 3) == 3


def test_rollup_rows_count_each_ledger_row_in_its_hour() -> None:
    at = T0 + timedelta(minutes=5)
    valid = [
        (ev("a", EventType.IMPRESSION, at), 2_000, 0),
        (ev("a", EventType.CLICK, at + timedelta(minutes=1)), 0, 0),
        (ev("a", EventType.CONVERSION, at + HOUR), 7_000, 1_000),
        (ev("b", EventType.IMPRESSION, at, placement="side"), 1_500, 500),
    ]
    invalid = [
        (ev("c", EventType.IMPRESSION, at), "crawler"),
        (ev("c", EventType.CLICK, at), "crawler"),
        (ev("d", EventType.IMPRESSION, at), "datacenter"),
    ]
    rows = rollup_rows(valid, invalid, {1: 7}.get)
    assert rows == [
        HourRollup(T0, 7, 1, 10, "feed", 1, 1, 0, 2_000, 0, {"crawler": 2, "datacenter": 1}),
        HourRollup(T0, 7, 1, 10, "side", 1, 0, 0, 1_500, 500),
        HourRollup(T0 + HOUR, 7, 1, 10, "feed", 0, 0, 1, 7_000, 1_000),
    ]
    assert rollup_rows(valid[:1], [])[0].advertiser_id == 0  # unknown advertiser


def _hour(at: datetime, cid: int = 1, ad: int = 10, placement: str = "feed",
          imps: int = 10, clicks: int = 1, convs: int = 0, billed: int = 10_000,
          ivt: dict[str, int] | None = None) -> HourRollup:
    return HourRollup(at, 7, cid, ad, placement, imps, clicks, convs, billed, 0, ivt or {})


def test_aggregate_groups_by_ad_campaign_and_placement() -> None:
    rows = [
        _hour(T0, ad=10, placement="feed", ivt={"crawler": 1}),
        _hour(T0, ad=11, placement="feed", convs=2, ivt={"crawler": 2, "ua_missing": 1}),
        _hour(T0, ad=11, placement="side"),
        _hour(T0 + HOUR, ad=10, placement="side", imps=0, clicks=0, billed=0),
    ]
    by_campaign = aggregate(rows, "hour", "campaign")
    assert [(r.period_start, r.campaign_id, r.ad_id, r.placement) for r in by_campaign] == [
        (T0, 1, None, None), (T0 + HOUR, 1, None, None)]
    first = by_campaign[0]
    assert (first.impressions, first.clicks, first.conversions, first.billed_micros) == (
        30, 3, 2, 30_000)
    assert first.ivt == {"crawler": 3, "ua_missing": 1}
    assert first.ctr == pytest.approx(0.1)
    assert first.ecpm_micros == 1_000_000 and first.cost_per_conversion_micros == 15_000
    later = by_campaign[1]
    assert (later.ctr, later.ecpm_micros, later.cost_per_conversion_micros) == (None,) * 3

    by_ad = aggregate(rows, "day", "ad")
    assert [(r.campaign_id, r.ad_id, r.impressions) for r in by_ad] == [(1, 10, 10), (1, 11, 20)]
    by_placement = aggregate(rows, "day", "placement")
    assert [(r.placement, r.impressions, r.campaign_id) for r in by_placement] == [
        ("feed", 20, None), ("side", 10, None)]
    assert ivt_reasons(by_ad) == ["crawler", "ua_missing"]
    whole = total(by_ad, T0)
    assert (whole.impressions, whole.conversions, whole.ivt) == (
        30, 2, {"crawler": 3, "ua_missing": 1})
    assert total([], T0).ctr is None


def test_day_buckets_are_local_dates_of_the_quarters_start() -> None:
    # New York, 2026-11-03: 04:00 UTC is 23:00 on the 2nd, 05:00 UTC midnight of the 3rd
    rows = [_hour(datetime(2026, 11, 3, 4, tzinfo=UTC)),
            _hour(datetime(2026, 11, 3, 5, tzinfo=UTC)),
            _hour(datetime(2026, 11, 4, 4, tzinfo=UTC))]
    days = aggregate(rows, "day", "campaign", "America/New_York")
    assert [r.period_start.isoformat() for r in days] == [
        "2026-11-02T00:00:00-05:00", "2026-11-03T00:00:00-05:00"]
    assert [r.impressions for r in days] == [10, 20]
    # Kolkata (+5:30): 18:15 UTC is 23:45 on the 3rd, 18:30 UTC midnight of the 4th
    rows = [_hour(datetime(2026, 11, 3, 18, 15, tzinfo=UTC)),
            _hour(datetime(2026, 11, 3, 18, 30, tzinfo=UTC))]
    days = aggregate(rows, "day", "campaign", "Asia/Kolkata")
    assert [(r.period_start.date(), r.impressions) for r in days] == [
        (date(2026, 11, 3), 10), (date(2026, 11, 4), 10)]
    hours = aggregate(rows, "hour", "campaign", "Asia/Kolkata")
    assert [r.period_start.isoformat() for r in hours] == [
        "2026-11-03T23:00:00+05:30", "2026-11-04T00:00:00+05:30"]


def test_utc_quarter() -> None:
    assert utc_quarter(T0 + timedelta(minutes=44, seconds=59)) == T0 + timedelta(minutes=30)
    assert utc_quarter(T0.astimezone(timezone(timedelta(hours=5, minutes=45)))) == T0


def test_aggregate_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError, match="granularity"):
        aggregate([], "week", "campaign")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group_by"):
        aggregate([], "day", "country")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time_zone"):
        aggregate([], "day", "ad", "Mars/Olympus")


ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Lord_Howe",
         "America/St_Johns", "America/Sao_Paulo", "Pacific/Apia", "Pacific/Chatham"]


@given(st.sampled_from(ZONES), st.dates(date(2010, 1, 1), date(2030, 12, 31)),
       st.integers(0, 3))
def test_local_days_span_holds_exactly_the_hours_starting_in_those_days(
    tz: str, first: date, extra: int
) -> None:
    last = first + timedelta(days=extra)
    start, end = local_days_span(first, last, tz)
    z = zone(tz)
    h = utc_hour(start) - 2 * HOUR
    while h < end + 2 * HOUR:
        inside = first <= h.astimezone(z).date() <= last
        assert (start <= h < end) == inside, (tz, first, last, h)
        h += HOUR


def test_local_days_span_on_special_days() -> None:
    # New York: 23 hours on 2026-03-08, 25 on 2026-11-01; Apia skipped 2011-12-30
    for day, hours in ((date(2026, 3, 8), 23), (date(2026, 11, 1), 25)):
        start, end = local_days_span(day, day, "America/New_York")
        assert (end - start) / HOUR == hours
    start, end = local_days_span(date(2011, 12, 30), date(2011, 12, 30), "Pacific/Apia")
    assert start == end
    start, end = local_days_span(date(2026, 11, 3), date(2026, 11, 3), "Asia/Kathmandu")
    assert len([h for h in hour_range(start, end) if start <= h < end]) == 24
    # St John's fell back from 00:01 to 23:01 on 2010-11-07: the 03:00 UTC hour starts
    # at 23:30 on the 6th again, so the 6th ends at the second midnight (hypothesis found
    # it; mutation seen red: the first midnight, 02:30 UTC)
    start, end = local_days_span(date(2010, 11, 6), date(2010, 11, 6), "America/St_Johns")
    assert (start, end) == (datetime(2010, 11, 6, 2, 30, tzinfo=UTC),
                            datetime(2010, 11, 7, 3, 30, tzinfo=UTC))


def test_dirty_hours_refresh_what_was_marked_once() -> None:
    ledger = MemoryLedger()
    store = MemoryRollupStore(ledger)
    dirty = DirtyHours(store)
    ledger.record(ev("a", EventType.IMPRESSION, T0 + timedelta(minutes=3)), 10**9)
    ledger.record(ev("b", EventType.IMPRESSION, T0 + HOUR), 10**9)
    dirty.mark([T0 + timedelta(minutes=3)])
    dirty.mark([T0 + timedelta(minutes=50), T0 + HOUR])
    assert dirty.pending() == {T0, T0 + HOUR}
    assert dirty.flush() == 2 and dirty.pending() == set()
    assert dirty.flush() == 0
    got = store.hours(start=T0, end=T0 + 2 * HOUR, campaign_ids=[1])
    assert [(r.hour, r.impressions) for r in got] == [(T0, 1), (T0 + HOUR, 1)]


def test_dirty_hours_stay_marked_when_a_refresh_fails() -> None:
    class Failing(MemoryRollupStore):
        def refresh(self, hours: Iterable[datetime]) -> int:
            raise OSError("database gone")

    dirty = DirtyHours(Failing(MemoryLedger()))
    dirty.mark([T0])
    with pytest.raises(OSError):
        dirty.flush()
    assert dirty.pending() == {T0}
