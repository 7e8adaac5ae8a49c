"""The availability forecast's pure core (:mod:`adfunnel.forecast.availability`,
:mod:`adfunnel.forecast.project`): exact projections on hand-made samples, the booked
lines' allocation, and its invariants as properties.

Mutations seen red: the sample weights left out (each sampled request counted 1 where
:func:`~adfunnel.forecast.availability.forecast` sums ``r.weight``): the scaling property
and ``test_projection_by_hour_of_week_is_exact``;
the guaranteed lines' take not subtracted (``left[n] - took`` skipped):
``test_available_never_above_matching`` and the allocation cases; sponsorships not
taking their share (``took = 0``): ``test_sponsorship_takes_its_share_first``; hours of
day instead of hours of week with a week of history (``by_week`` False): the weekend
test; hours never lived left at 0 (the mean term of ``row_factors`` dropped): the clock
change test (and the API's one-hour basis).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.forecast.availability import (
    GUARANTEED,
    SPONSORSHIP,
    BookedLine,
    _matches,
    forecast,
)
from adfunnel.forecast.sample import SampledRequest
from adfunnel.targeting.evaluate import matches
from adfunnel.targeting.expr import All, Expr, In
from tests.strategies import trees

UTC_Z = ZoneInfo("UTC")
T0 = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday
WEEK = timedelta(days=7)
EVERYONE: Expr = All(())
US = In("geo.country", frozenset({"US"}))
MOBILE = In("device_type", frozenset({"mobile"}))


def _req(at: datetime, country: str = "US", device: str = "mobile", weight: float = 1.0,
         ) -> SampledRequest:
    return SampledRequest(at, {"geo.country": frozenset({country}),
                               "device_type": frozenset({device}),
                               "placement": frozenset({"feed"})}, weight)


def _hourly(days: int, per_hour: int, weight: float = 1.0, **attrs: str
            ) -> list[SampledRequest]:
    return [_req(T0 + timedelta(hours=h, minutes=m), weight=weight, **attrs)
            for h in range(days * 24) for m in range(per_hour)]


def _line(cid: int, expr: Expr, remaining: float = 0.0, share: float = 0.0,
          start: datetime = T0 + WEEK, end: datetime = T0 + 2 * WEEK,
          priority: str = GUARANTEED) -> BookedLine:
    return BookedLine(cid, f"line {cid}", priority, expr, start, end, remaining, share)


def test_projection_by_hour_of_week_is_exact() -> None:
    """A week of 3 sampled requests an hour, each standing for 4: the next week is
    expected to hold 12 × 168 requests; two days of it 12 × 48."""
    rows = _hourly(7, 3, weight=4.0)
    f = forecast(rows, EVERYONE, T0 + WEEK, T0 + 2 * WEEK, [], UTC_Z, T0 + WEEK, T0, T0 + WEEK)
    assert f.matching == pytest.approx(12 * 168)
    assert f.available == pytest.approx(f.matching)
    assert f.basis.by_week and f.basis.history_days == 7 and f.basis.sampled_requests == 504
    assert f.basis.sample_rate == pytest.approx(0.25)
    two = forecast(rows, EVERYONE, T0 + WEEK, T0 + WEEK + timedelta(days=2), [], UTC_Z,
                   T0 + WEEK, T0, T0 + WEEK)
    assert two.matching == pytest.approx(12 * 48)


def test_weekend_follows_the_hour_of_week() -> None:
    """Traffic only on Saturdays: a forecast of next Monday is 0, of next Saturday one
    Saturday's worth; with 3 days of history (Mon-Wed) hours of day are the slots."""
    rows = [r for r in _hourly(7, 2) if r.at.weekday() == 5]
    args = (UTC_Z, T0 + WEEK, T0, T0 + WEEK)
    monday = forecast(rows, EVERYONE, T0 + WEEK, T0 + WEEK + timedelta(days=1), [], *args)
    saturday = forecast(rows, EVERYONE, T0 + WEEK + timedelta(days=5),
                        T0 + WEEK + timedelta(days=6), [], *args)
    assert monday.matching == 0 and saturday.matching == pytest.approx(48)
    short = forecast(_hourly(3, 2), EVERYONE, T0 + timedelta(days=3),
                     T0 + timedelta(days=5), [], UTC_Z, T0 + timedelta(days=3), T0,
                     T0 + timedelta(days=3))
    assert not short.basis.by_week and short.matching == pytest.approx(2 * 48)


def test_the_past_of_the_flight_is_not_sold() -> None:
    rows = _hourly(7, 1)
    f = forecast(rows, EVERYONE, T0, T0 + 2 * WEEK, [], UTC_Z, T0 + WEEK, T0, T0 + WEEK)
    assert f.matching == pytest.approx(168)


def test_time_zone_moves_the_hours() -> None:
    """Requests only at 09:00 UTC: a flight of one local day in Tokyo (UTC+9) from its
    midnight (15:00 UTC the day before) holds the 09:00 UTC hour once."""
    rows = [r for r in _hourly(7, 1) if r.at.hour == 9]
    tokyo = ZoneInfo("Asia/Tokyo")
    start = datetime(2026, 11, 10, tzinfo=tokyo)
    f = forecast(rows, EVERYONE, start, start + timedelta(days=1), [], tokyo,
                 T0 + WEEK, T0, T0 + WEEK)
    assert f.matching == pytest.approx(1)


def _world() -> list[SampledRequest]:
    """A week: per hour 2 US mobile, 2 US desktop, 2 GB mobile requests."""
    return (_hourly(7, 2, country="US", device="mobile")
            + _hourly(7, 2, country="US", device="desktop")
            + _hourly(7, 2, country="GB", device="mobile"))


def test_a_booked_line_takes_its_goal_in_proportion() -> None:
    """Next week: 336 US mobile, 336 US desktop, 336 GB mobile. A mobile line with 336
    impressions left takes a uniform half of mobile (HWM's one water level): 168 of the
    US candidate's 672, whose 504 are left."""
    line = _line(7, MOBILE, remaining=336)
    f = forecast(_world(), US, T0 + WEEK, T0 + 2 * WEEK, [line], UTC_Z, T0 + WEEK, T0,
                 T0 + WEEK)
    assert f.matching == pytest.approx(672)
    assert f.available == pytest.approx(504)
    assert f.takes == pytest.approx({7: 168})


def test_a_line_spreads_its_goal_over_its_whole_flight() -> None:
    """A mobile line of 1,344 impressions over two weeks (672 mobile a week) needs all of
    the first week's share: 672 in the candidate's week, 336 of the US ones."""
    line = _line(7, MOBILE, remaining=672, end=T0 + 3 * WEEK)
    f = forecast(_world(), US, T0 + WEEK, T0 + 2 * WEEK, [line], UTC_Z, T0 + WEEK, T0,
                 T0 + WEEK)
    assert f.takes[7] == pytest.approx(168)
    half = forecast(_world(), US, T0 + WEEK, T0 + 2 * WEEK,
                    [_line(7, MOBILE, remaining=1344, end=T0 + 3 * WEEK)], UTC_Z,
                    T0 + WEEK, T0, T0 + WEEK)
    assert half.takes[7] == pytest.approx(336) and half.available == pytest.approx(336)


def test_the_narrow_line_is_served_first() -> None:
    """HWM: a narrow line (US mobile, 336 left = all of its supply) is served before a
    broad one (everyone, 672 left): the narrow takes all US mobile, the broad the same
    fraction of what it can reach elsewhere."""
    narrow = _line(5, All((US, MOBILE)), remaining=336)
    broad = _line(9, EVERYONE, remaining=672)
    f = forecast(_world(), US, T0 + WEEK, T0 + 2 * WEEK, [broad, narrow], UTC_Z,
                 T0 + WEEK, T0, T0 + WEEK)
    assert f.takes[5] == pytest.approx(336)
    # the broad line: 672 of 1,008 supply, 672 over the 672 US desktop and GB mobile left
    assert f.takes[9] == pytest.approx(336) and f.available == 0


def test_sponsorship_takes_its_share_first() -> None:
    """A sponsorship of half of mobile takes 168 of the US mobile requests; a mobile
    guaranteed line with 168 left then finds half of what is left of mobile."""
    spons = _line(3, MOBILE, share=0.5, priority=SPONSORSHIP)
    f = forecast(_world(), US, T0 + WEEK, T0 + 2 * WEEK, [spons], UTC_Z, T0 + WEEK, T0,
                 T0 + WEEK)
    assert f.takes == pytest.approx({3: 168}) and f.available == pytest.approx(504)
    g = forecast(_world(), US, T0 + WEEK, T0 + 2 * WEEK,
                 [spons, _line(8, MOBILE, remaining=168)], UTC_Z, T0 + WEEK, T0, T0 + WEEK)
    assert g.takes == pytest.approx({3: 168, 8: 84}) and g.available == pytest.approx(420)


def test_lines_outside_the_flight_take_nothing() -> None:
    later = _line(7, MOBILE, remaining=10_000, start=T0 + 2 * WEEK, end=T0 + 3 * WEEK)
    f = forecast(_world(), US, T0 + WEEK, T0 + 2 * WEEK, [later], UTC_Z, T0 + WEEK, T0,
                 T0 + WEEK)
    assert f.takes == {} and f.available == pytest.approx(672)


# --- properties ------------------------------------------------------------------------

_COUNTRIES = ["US", "GB", "DE"]
_DEVICES = ["mobile", "desktop"]
_EXPRS: list[Expr] = [EVERYONE, US, MOBILE, All((US, MOBILE)),
                      In("geo.country", frozenset({"GB", "DE"}))]

_rows = st.lists(st.tuples(st.integers(0, 7 * 24 * 60 - 1), st.sampled_from(_COUNTRIES),
                           st.sampled_from(_DEVICES), st.integers(1, 5)),
                 min_size=1, max_size=60)
_lines = st.lists(st.tuples(st.sampled_from([GUARANTEED, GUARANTEED, SPONSORSHIP]),
                            st.sampled_from(_EXPRS), st.integers(0, 400),
                            st.sampled_from([0.1, 0.5, 1.0]), st.integers(0, 13),
                            st.integers(1, 14)),
                  max_size=4)


def _build(rows: list[tuple[int, str, str, int]], lines: list[tuple[str, Expr, int, float,
                                                                   int, int]],
           k: float = 1.0, bump: int | None = None) -> tuple[list[SampledRequest],
                                                             list[BookedLine]]:
    sample = [_req(T0 + timedelta(minutes=m), c, d, w * k) for m, c, d, w in rows]
    booked = [BookedLine(i + 1, f"l{i}", p, e, T0 + timedelta(days=s),
                         T0 + timedelta(days=s + n), (rem + (50 if bump == i else 0)) * k,
                         share)
              for i, (p, e, rem, share, s, n) in enumerate(lines)]
    return sample, booked


def _run(sample: list[SampledRequest], booked: list[BookedLine], expr: Expr):
    return forecast(sample, expr, T0 + WEEK, T0 + 2 * WEEK, booked, UTC_Z,
                    T0 + WEEK + timedelta(hours=5), T0, T0 + WEEK)


@settings(max_examples=60, deadline=None)
@given(_rows, _lines, st.sampled_from(_EXPRS))
def test_available_never_above_matching(rows, lines, expr) -> None:
    f = _run(*_build(rows, lines), expr)
    assert -1e-9 <= f.available <= f.matching + 1e-9
    assert sum(f.takes.values()) == pytest.approx(f.matching - f.available, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(_rows, _lines.filter(bool), st.sampled_from(_EXPRS), st.data())
def test_available_is_monotone_in_booked_goals(rows, lines, expr, data) -> None:
    bump = data.draw(st.integers(0, len(lines) - 1))
    before = _run(*_build(rows, lines), expr)
    after = _run(*_build(rows, lines, bump=bump), expr)
    assert after.available <= before.available + 1e-6


@settings(max_examples=60, deadline=None)
@given(_rows, _lines, st.sampled_from(_EXPRS), st.sampled_from([2.0, 3.0, 10.0]))
def test_scaling_the_sample_scales_the_forecast(rows, lines, expr, k) -> None:
    """Every weight and every booked goal × k: every figure × k (the rate recorded with
    the sample scales counts back exactly)."""
    one = _run(*_build(rows, lines), expr)
    many = _run(*_build(rows, lines, k=k), expr)
    assert many.matching == pytest.approx(k * one.matching)
    assert many.available == pytest.approx(k * one.available, abs=1e-6)
    assert many.takes.keys() == one.takes.keys()
    for j, t in one.takes.items():
        assert many.takes[j] == pytest.approx(k * t)


_ATTRS = ["geo.country", "interests", "device_type"]
_VALUES = ["a", "b", "c", "d"]
_requests = st.lists(st.dictionaries(st.sampled_from(_ATTRS),
                                     st.frozensets(st.sampled_from([*_VALUES, "x", "y"]),
                                                   min_size=1, max_size=3)),
                     min_size=1, max_size=20)


@settings(max_examples=80, deadline=None)
@given(trees(_ATTRS, _VALUES), st.lists(trees(_ATTRS, _VALUES), max_size=3), _requests)
def test_matches_agree_with_the_reference_evaluator(expr, others, requests) -> None:
    """The forecast's matching (the conjunction index on each request's view of the values
    the expressions name) equals the reference evaluator on the whole request. Red when
    the view names only the candidate's values (the booked lines' left out)."""
    rows = [SampledRequest(T0, r, 1.0) for r in requests]
    lines = [_line(i + 1, e) for i, e in enumerate(others)]
    got = _matches(rows, expr, lines)
    for r, ids in zip(requests, got, strict=True):
        want = {0} if matches(expr, r) else set()
        want |= {i + 1 for i, e in enumerate(others) if matches(e, r)}
        assert ids == want, r


def test_a_week_across_the_clock_change() -> None:
    """Paris falls back on 25 October 2026: a history week of one request per UTC hour
    across it lives local 02:00 of that Sunday twice (2 requests, mean 1) and one
    hour-of-week not at all (the mean of the lived hours: 1). The next local week: 168."""
    paris = ZoneInfo("Europe/Paris")
    start = datetime(2026, 10, 19, tzinfo=paris).astimezone(UTC)
    rows = [_req(start + timedelta(hours=h)) for h in range(168)]
    nxt = datetime(2026, 10, 26, tzinfo=paris)
    f = forecast(rows, EVERYONE, nxt, nxt + WEEK, [], paris, start + WEEK, start,
                 start + WEEK)
    assert f.basis.by_week and f.matching == pytest.approx(168)
