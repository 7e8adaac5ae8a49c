"""Cap windows: calendar buckets in the campaign's zone across DST, field names, TTLs,
and the verdict on a user's values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.campaigns.model import CapLevel, CapWindow, FrequencyCap
from adfunnel.campaigns.schedule import zone
from adfunnel.clock import ManualClock
from adfunnel.frequency.store import MemoryFrequencyStore
from adfunnel.frequency.windows import (
    DAY_S,
    LIFETIME_TTL_S,
    CapCheck,
    CapPlan,
    CapStatus,
    Cooldown,
    counter_prefix,
    evaluate,
    fields_to_read,
    plan_caps,
    rule_holds,
    ttl_for,
    unix_s,
)

NY = "America/New_York"
#: 2026-11-01 (DST ends in New York: 25 hours) and 2026-03-08 (DST starts: 23 hours).
FALL_MIDNIGHT = datetime(2026, 11, 1, 4, tzinfo=UTC)  # 00:00 EDT
FALL_NEXT_MIDNIGHT = datetime(2026, 11, 2, 5, tzinfo=UTC)  # 00:00 EST, a Monday
SPRING_MIDNIGHT = datetime(2026, 3, 8, 5, tzinfo=UTC)  # 00:00 EST
SPRING_NEXT_MIDNIGHT = datetime(2026, 3, 9, 4, tzinfo=UTC)  # 00:00 EDT, a Monday

#: Instants over 2026 in whole seconds, DST days included.
YEAR_2026 = st.integers(
    int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()),
    int(datetime(2027, 1, 1, tzinfo=UTC).timestamp()),
)


def field_at(window: CapWindow, at: datetime, tz: str = NY) -> str:
    plan = plan_caps([FrequencyCap.counter(3, window, CapLevel.CAMPAIGN)], ad_id=5,
                     campaign_id=12, advertiser_id=7, time_zone=tz, at=at)
    (rule,) = plan.rules
    return rule.field


def at_s(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


# --- field names --------------------------------------------------------------------------


def test_field_names_per_level_and_window() -> None:
    at = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # 01:30 EDT, Sunday
    caps = [
        FrequencyCap.counter(1, CapWindow.HOUR, CapLevel.AD),
        FrequencyCap.counter(2, CapWindow.DAY, CapLevel.CAMPAIGN),
        FrequencyCap.counter(3, CapWindow.WEEK, CapLevel.ADVERTISER),
        FrequencyCap.counter(4, CapWindow.LIFETIME, CapLevel.CAMPAIGN),
        FrequencyCap.cooldown(1800, CapLevel.CAMPAIGN),
    ]
    plan = plan_caps(caps, ad_id=5, campaign_id=12, advertiser_id=7, time_zone=NY, at=at)
    assert plan.fields == (
        "a:5:h:2026-11-01T01-0400",
        "c:12:d:2026-11-01",
        "v:7:w:2026-W44",
        "c:12:l:all",
        "c:12:last",
    )
    assert plan.rules[0] == CapCheck("a:5:h:2026-11-01T01-0400", 1, CapLevel.AD, 5,
                                     CapWindow.HOUR)
    assert plan.rules[4] == Cooldown("c:12:last", 1800, CapLevel.CAMPAIGN, 12)
    assert plan.ttl_s == LIFETIME_TTL_S == 400 * 86_400
    assert counter_prefix("c:12:d:2026-11-01") == "c:12:d:"


def test_two_caps_on_one_field_keep_the_stricter() -> None:
    at = datetime(2026, 6, 1, 12, tzinfo=UTC)
    caps = [
        FrequencyCap.counter(5, CapWindow.DAY, CapLevel.CAMPAIGN),
        FrequencyCap.cooldown(60, CapLevel.AD),
        FrequencyCap.counter(2, CapWindow.DAY, CapLevel.CAMPAIGN),
        FrequencyCap.counter(9, CapWindow.DAY, CapLevel.CAMPAIGN),
        FrequencyCap.cooldown(600, CapLevel.AD),
        FrequencyCap.cooldown(30, CapLevel.AD),
    ]
    plan = plan_caps(caps, ad_id=5, campaign_id=12, advertiser_id=7, time_zone=NY, at=at)
    assert [(r.field, getattr(r, "limit", None) or getattr(r, "seconds", None))
            for r in plan.rules] == [("c:12:d:2026-06-01", 2), ("a:5:last", 600)]


def test_naive_instant_and_unknown_zone_are_refused() -> None:
    cap = [FrequencyCap.counter(1, CapWindow.DAY, CapLevel.AD)]
    with pytest.raises(ValueError):
        plan_caps(cap, ad_id=1, campaign_id=1, advertiser_id=1, time_zone=NY,
                  at=datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        plan_caps(cap, ad_id=1, campaign_id=1, advertiser_id=1, time_zone="Mars/Olympus",
                  at=datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError):
        unix_s(datetime(2026, 1, 1))


# --- calendar buckets across DST ---------------------------------------------------------


@pytest.mark.parametrize(
    ("midnight", "next_midnight", "day", "hours"),
    [
        (FALL_MIDNIGHT, FALL_NEXT_MIDNIGHT, "2026-11-01", 25),
        (SPRING_MIDNIGHT, SPRING_NEXT_MIDNIGHT, "2026-03-08", 23),
    ],
)
def test_a_dst_day_is_one_day_bucket(
    midnight: datetime, next_midnight: datetime, day: str, hours: int
) -> None:
    assert next_midnight - midnight == timedelta(hours=hours)
    second = timedelta(seconds=1)
    assert field_at(CapWindow.DAY, midnight - second) != f"c:12:d:{day}"
    assert field_at(CapWindow.DAY, midnight) == f"c:12:d:{day}"
    assert field_at(CapWindow.DAY, next_midnight - second) == f"c:12:d:{day}"
    assert field_at(CapWindow.DAY, next_midnight) != f"c:12:d:{day}"


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(offset=st.integers(0, 25 * 3600 - 1))
def test_every_instant_of_the_25_hour_day_is_in_its_bucket(offset: int) -> None:
    at = FALL_MIDNIGHT + timedelta(seconds=offset)
    assert field_at(CapWindow.DAY, at) == "c:12:d:2026-11-01"


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(offset=st.integers(0, 23 * 3600 - 1))
def test_every_instant_of_the_23_hour_day_is_in_its_bucket(offset: int) -> None:
    at = SPRING_MIDNIGHT + timedelta(seconds=offset)
    assert field_at(CapWindow.DAY, at) == "c:12:d:2026-03-08"


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(t=YEAR_2026, tz=st.sampled_from([NY, "Europe/Berlin", "Australia/Lord_Howe", "UTC"]))
def test_day_and_week_buckets_change_only_at_local_midnight(t: int, tz: str) -> None:
    """The day bucket changes exactly when the local time is 00:00:00; the week bucket
    exactly at Monday 00:00:00 local."""
    now, before = at_s(t), at_s(t - 1)
    local = now.astimezone(zone(tz))
    midnight = (local.hour, local.minute, local.second) == (0, 0, 0)
    assert (field_at(CapWindow.DAY, now, tz) != field_at(CapWindow.DAY, before, tz)) == midnight
    week_changed = field_at(CapWindow.WEEK, now, tz) != field_at(CapWindow.WEEK, before, tz)
    assert week_changed == (midnight and local.weekday() == 0)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(t=YEAR_2026, dt=st.integers(0, 8 * 86_400))
def test_new_york_hour_buckets_are_the_utc_hours(t: int, dt: int) -> None:
    """New York's offsets are whole hours, so two instants share an hour bucket exactly
    when they share a UTC hour — including the two 01:00 hours of a DST-end day."""
    a, b = at_s(t), at_s(t + dt)
    same = field_at(CapWindow.HOUR, a) == field_at(CapWindow.HOUR, b)
    assert same == (t // 3600 == (t + dt) // 3600)


def test_the_two_one_oclock_hours_of_dst_end_differ() -> None:
    first = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # 01:30 EDT
    second = datetime(2026, 11, 1, 6, 30, tzinfo=UTC)  # 01:30 EST
    assert first.astimezone(zone(NY)).hour == second.astimezone(zone(NY)).hour == 1
    assert field_at(CapWindow.HOUR, first) == "c:12:h:2026-11-01T01-0400"
    assert field_at(CapWindow.HOUR, second) == "c:12:h:2026-11-01T01-0500"


def test_week_buckets_change_monday_midnight_local() -> None:
    second = timedelta(seconds=1)
    assert field_at(CapWindow.WEEK, FALL_NEXT_MIDNIGHT - second) == "c:12:w:2026-W44"
    assert field_at(CapWindow.WEEK, FALL_NEXT_MIDNIGHT) == "c:12:w:2026-W45"
    # in UTC it is Monday already at 00:00Z, five hours before New York's Monday
    assert field_at(CapWindow.WEEK, datetime(2026, 11, 2, 0, 30, tzinfo=UTC)) == (
        "c:12:w:2026-W44"
    )
    # the ISO year of a week that straddles New Year
    assert field_at(CapWindow.WEEK, datetime(2027, 1, 1, 12, tzinfo=UTC)) == "c:12:w:2026-W53"


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(t=YEAR_2026)
def test_lifetime_bucket_is_constant(t: int) -> None:
    assert field_at(CapWindow.LIFETIME, at_s(t)) == "c:12:l:all"


# --- a day cap served through the day ----------------------------------------------------


@pytest.mark.parametrize(
    ("midnight", "next_midnight"),
    [(FALL_MIDNIGHT, FALL_NEXT_MIDNIGHT), (SPRING_MIDNIGHT, SPRING_NEXT_MIDNIGHT)],
)
def test_a_day_cap_resets_at_local_midnight(midnight: datetime, next_midnight: datetime) -> None:
    """2 per day: served at 00:00 and in the last second of the local day, refused in
    between, served again at the next local midnight."""
    clock = ManualClock(midnight)
    store = MemoryFrequencyStore(clock)
    caps = [FrequencyCap.counter(2, CapWindow.DAY, CapLevel.CAMPAIGN)]

    def serve(at: datetime) -> bool:
        clock.set(at)
        plan = plan_caps(caps, ad_id=5, campaign_id=12, advertiser_id=7, time_zone=NY, at=at)
        values = store.read("u", plan.fields)
        if not evaluate(plan, values, unix_s(at)).allowed:
            return False
        (ok,) = store.check_and_increment("u", [plan.rules], unix_s(at), plan.ttl_s)
        return ok

    last_second = next_midnight - timedelta(seconds=1)
    assert serve(midnight)
    assert serve(midnight + timedelta(hours=20))
    assert not serve(midnight + timedelta(hours=22))
    assert not serve(last_second)
    assert serve(next_midnight)
    assert serve(next_midnight + timedelta(hours=1))
    assert not serve(next_midnight + timedelta(hours=2))


# --- TTL ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "ttl"),
    [
        ([], 0),
        ([FrequencyCap.counter(1, CapWindow.HOUR, CapLevel.AD)], 3600 + DAY_S),
        ([FrequencyCap.counter(1, CapWindow.DAY, CapLevel.AD)], 2 * DAY_S),
        ([FrequencyCap.counter(1, CapWindow.WEEK, CapLevel.AD),
          FrequencyCap.counter(1, CapWindow.HOUR, CapLevel.AD)], 8 * DAY_S),
        ([FrequencyCap.cooldown(1800, CapLevel.CAMPAIGN)], 1800 + DAY_S),
        ([FrequencyCap.cooldown(30 * DAY_S, CapLevel.CAMPAIGN),
          FrequencyCap.counter(1, CapWindow.WEEK, CapLevel.AD)], 31 * DAY_S),
        ([FrequencyCap.counter(1, CapWindow.LIFETIME, CapLevel.AD),
          FrequencyCap.cooldown(60, CapLevel.AD)], LIFETIME_TTL_S),
        ([FrequencyCap.counter(1, CapWindow.LIFETIME, CapLevel.AD),
          FrequencyCap.cooldown(400 * DAY_S, CapLevel.AD)], 401 * DAY_S),
        ([FrequencyCap.cooldown(400 * DAY_S, CapLevel.AD),  # the longer cooldown first
          FrequencyCap.counter(1, CapWindow.LIFETIME, CapLevel.AD)], 401 * DAY_S),
    ],
)
def test_ttl_is_the_longest_window_plus_a_day(caps: list[FrequencyCap], ttl: int) -> None:
    assert ttl_for(caps) == ttl


# --- verdicts ------------------------------------------------------------------------------


DAY_CAP = CapCheck("c:12:d:2026-11-01", 5, CapLevel.CAMPAIGN, 12, CapWindow.DAY)
COOLDOWN = Cooldown("c:12:last", 1800, CapLevel.CAMPAIGN, 12)
NOW_S = 1_793_540_000


def test_counter_below_and_at_limit() -> None:
    assert evaluate([DAY_CAP], {}, NOW_S).allowed
    assert evaluate([DAY_CAP], {DAY_CAP.field: 4}, NOW_S).allowed
    verdict = evaluate([DAY_CAP], {DAY_CAP.field: 5}, NOW_S)
    assert verdict.status is CapStatus.CAPPED and verdict.rule == DAY_CAP
    assert verdict.reason() == "capped: campaign 12: 5 per day"


def test_cooldown_passes_at_exactly_its_seconds() -> None:
    assert evaluate([COOLDOWN], {}, NOW_S).allowed
    assert not evaluate([COOLDOWN], {COOLDOWN.field: NOW_S - 1799}, NOW_S).allowed
    assert evaluate([COOLDOWN], {COOLDOWN.field: NOW_S - 1800}, NOW_S).allowed
    assert not rule_holds(COOLDOWN, {COOLDOWN.field: NOW_S + 5}, NOW_S)  # a future serve
    # a serve further in the future than the cooldown itself still does not hold
    assert not rule_holds(COOLDOWN, {COOLDOWN.field: NOW_S + 3600}, NOW_S)


def test_unix_seconds_are_rounded_down() -> None:
    assert unix_s(datetime(2026, 11, 1, 4, 0, 0, 900_000, tzinfo=UTC)) == int(
        datetime(2026, 11, 1, 4, tzinfo=UTC).timestamp())


def test_all_caps_hold_together() -> None:
    """5/day and a 1800 s cooldown: 3 serves today, the last 20 minutes ago → refused by
    the cooldown, which the verdict names."""
    values = {DAY_CAP.field: 3, COOLDOWN.field: NOW_S - 20 * 60}
    verdict = evaluate(CapPlan((DAY_CAP, COOLDOWN), 2 * DAY_S), values, NOW_S)
    assert verdict.status is CapStatus.CAPPED and verdict.rule == COOLDOWN
    assert verdict.reason() == "capped: campaign 12: 1 per 1800 s"
    assert evaluate([DAY_CAP, COOLDOWN], values, NOW_S + 10 * 60).allowed


def test_a_failed_read_excludes_only_capped_candidates() -> None:
    verdict = evaluate([DAY_CAP], None, NOW_S)
    assert verdict.status is CapStatus.UNAVAILABLE and not verdict.allowed
    assert verdict.reason() == "cap_unavailable"
    assert evaluate(CapPlan((), 0), None, NOW_S).allowed
    assert evaluate([], None, NOW_S).reason() is None


def test_fields_to_read_are_the_union_in_order() -> None:
    a = CapPlan((DAY_CAP, COOLDOWN), 1)
    b = CapPlan((COOLDOWN, Cooldown("a:5:last", 60, CapLevel.AD, 5)), 1)
    assert fields_to_read([a, b, CapPlan((), 0)]) == [DAY_CAP.field, COOLDOWN.field, "a:5:last"]
