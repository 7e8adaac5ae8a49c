"""The placement report's figures (pure, ``adfunnel.api.placement_figures``): local days
and hours of any zone from UTC quarter-hours — a +5:45 zone, a DST day of 25 hours — and
the tiers' billed figures by campaign priority."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from adfunnel.api.placement_figures import placement_figures
from adfunnel.billing.rollups import HourRollup, local_days_span

Q = timedelta(minutes=15)


def _counts(requests: int, slots: int, **filled: int) -> dict[str, int]:
    return {"requests": requests, "slots": slots,
            **{f"filled_{t}": filled.get(t, 0)
               for t in ("sponsorship", "guaranteed", "auction", "house")}}


def test_a_quarter_past_a_local_midnight_at_plus_5_45_counts_on_the_new_day() -> None:
    """Kathmandu (+5:45): 18:15 UTC is 00:00 local of the next day, 18:00 UTC still
    23:45 of the day before. Mutation that turns it red: bucketing by UTC hour."""
    zone = "Asia/Kathmandu"
    start, end = local_days_span(date(2026, 7, 15), date(2026, 7, 16), zone)
    at = datetime(2026, 7, 15, 18, 0, tzinfo=UTC)
    traffic = [(at, _counts(1, 2, auction=1)), (at + Q, _counts(2, 2, house=2))]
    billed = [HourRollup(at + Q, 1, 7, 70, "p", impressions=4, billed_micros=9_000),
              HourRollup(at, 1, 8, 80, "p", impressions=1, billed_micros=500)]
    tier = {7: "sponsorship", 8: "auction"}
    totals, days = placement_figures(traffic, billed, tier.__getitem__, start=start,
                                     end=end, granularity="day", time_zone=zone)
    assert [d["day"] for d in days] == [date(2026, 7, 15), date(2026, 7, 16)]
    first, second = days
    assert (first["requests"], first["filled_slots"], first["revenue_micros"]) == (1, 1, 500)
    assert (second["requests"], second["slots_requested"], second["filled_slots"]) == (2, 2, 2)
    assert second["by_tier"]["house"]["filled_slots"] == 2
    assert second["by_tier"]["sponsorship"]["revenue_micros"] == 9_000
    assert second["by_tier"]["sponsorship"]["ecpm_micros"] == 9_000 * 1000 // 4
    assert second["by_tier"]["auction"]["ecpm_micros"] is None  # no impressions there
    assert totals["fill_rate"] == 3 / 4 and totals["ecpm_micros"] == 9_500 * 1000 // 5
    assert first["by_tier"]["auction"]["fill_rate"] == 1 / 2


def test_a_dst_day_lists_its_25_local_hours_and_an_empty_span_has_nulls() -> None:
    """New York's fall-back day has 25 local hours, the repeated 01:00 twice with two
    offsets; with no traffic every rate is null. Mutation that turns it red: keying hours
    by their wall-clock time (the repeated hour merged: 24)."""
    zone = "America/New_York"
    start, end = local_days_span(date(2026, 11, 1), date(2026, 11, 1), zone)
    totals, hours = placement_figures([], [], lambda _: "auction", start=start, end=end,
                                      granularity="hour", time_zone=zone)
    assert len(hours) == 25
    ones = [h["hour"] for h in hours if h["hour"].hour == 1]
    assert [h.utcoffset() for h in ones] == [timedelta(hours=-4), timedelta(hours=-5)]
    assert totals["fill_rate"] is None and totals["ecpm_micros"] is None
    assert totals["requests"] == 0
