"""Catalogue columns: week masks, local dates per zone and minute, growth, versions."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.campaigns.model import Ad, BidType, Campaign, CampaignStatus, Daypart, Objective
from adfunnel.campaigns.schedule import in_daypart, local_day
from adfunnel.serving.columns import NO_END, STATUS_CODES, CatalogColumns, daypart_mask

ZONES = ["UTC", "America/New_York", "Europe/London", "Asia/Kolkata", "Australia/Lord_Howe",
         "Pacific/Chatham", "America/St_Johns"]

dayparts = st.builds(
    lambda wd, a, b: Daypart(tuple(sorted(wd)), min(a, b), max(a, b) + 1),
    st.sets(st.integers(0, 6), min_size=1), st.integers(0, 23), st.integers(0, 23),
)
instants = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31),
                        timezones=st.just(UTC))


@pytest.mark.slow
@given(st.lists(dayparts, min_size=1, max_size=3), instants, st.sampled_from(ZONES))
def test_week_mask_at_the_zone_clock_equals_in_daypart(
        parts: list[Daypart], now: datetime, tz: str) -> None:
    cols = CatalogColumns()
    code = cols.zones.code(tz)
    ordinals, hours = cols.zones.at(now)
    assert ordinals[code] == local_day(now, tz).toordinal()
    assert daypart_mask(parts)[hours[code]] == in_daypart(tuple(parts), now, tz)


def test_zone_clock_follows_dst_ends_and_half_hour_zones_minute_by_minute() -> None:
    cols = CatalogColumns()
    for tz in ZONES:
        cols.zones.code(tz)
    start = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # New York's 25-hour day
    for minute in range(0, 24 * 60, 7):
        now = start + timedelta(minutes=minute, seconds=minute % 60)
        ordinals, hours = cols.zones.at(now)
        for tz, code in cols.zones.codes.items():
            local = now.astimezone(ZoneInfo(tz))
            assert ordinals[code] == local.date().toordinal()
            assert hours[code] == local.weekday() * 24 + local.hour


def _campaign(cid: int, **kw: object) -> Campaign:
    base = dict(advertiser_id=7, name="c", objective=Objective.CLICKS, bid_type=BidType.CPM,
                bid_micros=1_500_001, daily_budget_micros=9_000, time_zone="Asia/Kolkata",
                flight_start=date(2026, 1, 2))
    base.update(kw)
    return Campaign(cid, **base)  # type: ignore[arg-type]


def test_columns_grow_and_overwrite_in_place() -> None:
    cols = CatalogColumns()
    cols.put_campaigns([_campaign(3, lifetime_budget_micros=5_000)])
    cols.put_ads([Ad(5000, 3, "https://x.test/", "c", "banner", 300, 250, quality_micros=-4)])
    v = cols.view()
    assert v.c_known[3] and not v.c_known[2]
    assert v.c_charge[3] == 1_501  # a CPM impression's bound, rounded up
    assert (v.c_daily[3], v.c_lifetime[3]) == (9_000, 5_000)
    assert (v.c_daily[2], v.c_lifetime[2]) == (-1, -1)
    assert v.c_end[3] == NO_END and v.c_start[3] == date(2026, 1, 2).toordinal()
    assert v.ad_campaign[5000] == 3 and v.ad_quality[5000] == -4 and v.ad_campaign[4999] == -1
    assert v.ad_shape[5000] == cols.shape_code("banner", 300, 250) == 0
    cols.put_campaigns([_campaign(3, status=CampaignStatus.PAUSED, version=2),
                        _campaign(70_000)])
    v2 = cols.view()
    assert v2.c_status[3] == STATUS_CODES[CampaignStatus.PAUSED] and v2.c_version[3] == 2
    assert v2.c_known[70_000] and len(v2.c_known) > 70_000
    assert cols.shape_code("banner", 728, 90) == -1  # a shape no ad has
