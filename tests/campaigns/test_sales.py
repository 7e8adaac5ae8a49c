"""How a campaign is sold (#25): the rules of priority, goal and budget period, each
broken one named at once; a goal's money limit; the average-day limits; and the new
fields through the SQLite and PostgreSQL stores, their change log and old payloads."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from adfunnel.campaigns import codec
from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import (
    BidType,
    BudgetPeriod,
    Campaign,
    Goal,
    GoalMetric,
    Objective,
    PacingMode,
    Priority,
)
from adfunnel.campaigns.sales import (
    MAX_GOAL_TOTAL,
    average_day_limits,
    goal_cost_micros,
    sale_problems,
)
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import FixedClock
from adfunnel.db import make_engine

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)
AUCTION = Campaign(id=1, advertiser_id=1, name="c", objective=Objective.CLICKS,
                   bid_type=BidType.CPC, bid_micros=400_000, daily_budget_micros=10_000_000,
                   time_zone="UTC", flight_start=date(2026, 11, 1))
GUARANTEED = dataclasses.replace(
    AUCTION, objective=Objective.IMPRESSIONS, bid_type=BidType.CPM, bid_micros=5_000_000,
    daily_budget_micros=0, flight_end=date(2026, 11, 28), priority=Priority.GUARANTEED,
    goal=Goal(GoalMetric.IMPRESSIONS, total=2_000_000), budget_period=BudgetPeriod.FLIGHT)
SPONSORSHIP = dataclasses.replace(
    AUCTION, bid_type=BidType.CPM, bid_micros=8_000_000, priority=Priority.SPONSORSHIP,
    goal=Goal(GoalMetric.SHARE, share=1.0), flight_end=date(2026, 11, 3))


def fields(c: Campaign) -> list[str]:
    return [f for f, _ in sale_problems(c)]


def test_valid_lines_of_each_kind() -> None:
    assert sale_problems(AUCTION) == []
    assert sale_problems(GUARANTEED) == []
    assert sale_problems(SPONSORSHIP) == []
    clicks = dataclasses.replace(GUARANTEED, bid_type=BidType.CPC,
                                 goal=Goal(GoalMetric.CLICKS, total=1))
    assert sale_problems(clicks) == []
    flight = dataclasses.replace(AUCTION, budget_period=BudgetPeriod.FLIGHT,
                                 flight_end=date(2026, 11, 30), flight_budget_micros=10**9)
    assert sale_problems(flight) == []
    average = dataclasses.replace(AUCTION, budget_period=BudgetPeriod.AVERAGE_DAY,
                                  pacing_mode=PacingMode.FRONTLOADED)
    assert sale_problems(average) == []


@pytest.mark.parametrize(("changes", "named"), [
    # sponsorship
    ({"priority": Priority.SPONSORSHIP, "goal": None}, ["goal"]),
    ({"goal": Goal(GoalMetric.SHARE, share=0.0)}, ["goal.share"]),
    ({"goal": Goal(GoalMetric.SHARE, share=1.01)}, ["goal.share"]),
    ({"goal": Goal(GoalMetric.SHARE, share=float("nan"))}, ["goal.share"]),
    ({"goal": Goal(GoalMetric.SHARE)}, ["goal.share"]),
    ({"goal": Goal(GoalMetric.SHARE, share=0.5, total=3)}, ["goal.total"]),
    ({"goal": Goal(GoalMetric.IMPRESSIONS, total=3)}, ["goal.metric", "goal.share",
                                                      "goal.total"]),
    ({"bid_type": BidType.CPC}, ["bid_type"]),
])
def test_sponsorship_rules(changes: dict[str, Any], named: list[str]) -> None:
    assert fields(dataclasses.replace(SPONSORSHIP, **changes)) == named


@pytest.mark.parametrize(("changes", "named"), [
    ({"goal": None}, ["goal"]),
    ({"goal": Goal(GoalMetric.IMPRESSIONS, total=0)}, ["goal.total"]),
    ({"goal": Goal(GoalMetric.IMPRESSIONS, total=MAX_GOAL_TOTAL + 1)}, ["goal.total"]),
    ({"goal": Goal(GoalMetric.IMPRESSIONS)}, ["goal.total"]),
    ({"goal": Goal(GoalMetric.IMPRESSIONS, total=5, share=0.5)}, ["goal.share"]),
    ({"goal": Goal(GoalMetric.SHARE, share=0.5)}, ["goal.metric", "goal.total",
                                                  "goal.share"]),
    ({"goal": Goal(GoalMetric.CLICKS, total=5)}, ["bid_type"]),  # clicks are CPC
    ({"bid_type": BidType.CPC}, ["bid_type"]),
    ({"flight_end": None}, ["flight_end"]),  # named once, not again for the period
    ({"budget_period": BudgetPeriod.DAY}, ["budget_period"]),
    ({"budget_period": BudgetPeriod.AVERAGE_DAY}, ["budget_period", "daily_budget_micros"]),
    ({"flight_end": None, "bid_type": BidType.CPC, "goal": Goal(GoalMetric.IMPRESSIONS)},
     ["goal.total", "bid_type", "flight_end"]),  # every problem at once
])
def test_guaranteed_rules(changes: dict[str, Any], named: list[str]) -> None:
    assert fields(dataclasses.replace(GUARANTEED, **changes)) == named


@pytest.mark.parametrize(("changes", "named"), [
    ({"goal": Goal(GoalMetric.IMPRESSIONS, total=5)}, ["goal"]),  # an auction has no goal
    ({"budget_period": BudgetPeriod.FLIGHT}, ["flight_end", "flight_budget_micros"]),
    ({"budget_period": BudgetPeriod.FLIGHT, "flight_end": date(2026, 11, 9)},
     ["flight_budget_micros"]),
    ({"flight_budget_micros": 10**9}, ["flight_budget_micros"]),  # day has no flight budget
    ({"budget_period": BudgetPeriod.AVERAGE_DAY, "daily_budget_micros": 0},
     ["daily_budget_micros"]),
])
def test_auction_and_period_rules(changes: dict[str, Any], named: list[str]) -> None:
    assert fields(dataclasses.replace(AUCTION, **changes)) == named


def test_goal_cost_is_what_the_ledger_bills_for_the_goal() -> None:
    assert goal_cost_micros(GUARANTEED) == 2_000_000 * 5_000_000 // 1000  # 10,000 units
    odd = dataclasses.replace(GUARANTEED, bid_micros=1_234_567,
                              goal=Goal(GoalMetric.IMPRESSIONS, total=3))
    assert goal_cost_micros(odd) == 3_703  # floor(3 * 1234567 / 1000): never rounded up
    clicks = dataclasses.replace(GUARANTEED, bid_type=BidType.CPC, bid_micros=700_000,
                                 goal=Goal(GoalMetric.CLICKS, total=9))
    assert goal_cost_micros(clicks) == 6_300_000
    assert goal_cost_micros(SPONSORSHIP) is None and goal_cost_micros(AUCTION) is None


def test_average_day_limits() -> None:
    assert average_day_limits(10_000_000) == (20_000_000, 304_000_000)
    assert average_day_limits(7) == (14, 212)  # 30.4 x 7 = 212.8, rounded down


# --- through the stores -----------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[SqlCampaignStore]:
    url = "sqlite://" if request.param == "sqlite" else request.getfixturevalue("pg_schema_url")
    engine = make_engine(url)
    upgrade(engine)
    yield SqlCampaignStore(engine, FixedClock(NOW))
    engine.dispose()


def _values(c: Campaign, advertiser_id: int) -> dict[str, Any]:
    skip = {"id", "version", "advertiser_id"}
    return {f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.name not in skip
            } | {"advertiser_id": advertiser_id}


def test_each_kind_round_trips_through_store_change_log_and_snapshot(
        store: SqlCampaignStore) -> None:
    adv = store.create_advertiser("a")
    made = [store.create_campaign(**_values(c, adv.id)) for c in (GUARANTEED, SPONSORSHIP)]
    flight = store.create_campaign(**_values(AUCTION, adv.id) | {
        "budget_period": "flight", "flight_end": date(2026, 11, 30),
        "flight_budget_micros": 123_456_789, "pacing_mode": "frontloaded"})
    made.append(flight)
    for c in made:
        assert store.get_campaign(c.id) == c
    logged = {ch.entity_id: ch.record for ch in store.changes_since(0) if ch.entity == "campaign"}
    assert [logged[c.id] for c in made] == made
    assert store.snapshot()[1] == made
    assert made[1].goal == Goal(GoalMetric.SHARE, share=1.0)
    assert made[2].pacing_mode is PacingMode.FRONTLOADED
    raised = store.update_campaign(made[0].id, {"goal": {"metric": "impressions",
                                                        "total": 2_500_000}}, 1)
    assert raised.goal == Goal(GoalMetric.IMPRESSIONS, total=2_500_000)
    assert store.changes_since(0)[-1].record == raised == store.get_campaign(raised.id)


def test_the_store_refuses_every_broken_rule_at_once(store: SqlCampaignStore) -> None:
    adv = store.create_advertiser("a")
    with pytest.raises(InvalidChange) as refused:
        store.create_campaign(**_values(GUARANTEED, adv.id) | {
            "bid_type": "CPC", "flight_end": None, "goal": {"metric": "impressions"},
            "flight_budget_micros": 0})
    assert [f for f, _ in refused.value.problems] == [
        "flight_budget_micros", "goal.total", "bid_type", "flight_end"]
    made = store.create_campaign(**_values(AUCTION, adv.id))
    with pytest.raises(InvalidChange) as refused:
        store.update_campaign(made.id, {"priority": "guaranteed"})
    assert [f for f, _ in refused.value.problems] == ["goal", "flight_end", "budget_period"]
    assert store.get_campaign(made.id).version == 1


def test_payloads_from_before_the_fields_decode_to_an_auction_by_day() -> None:
    new = codec.to_payload(GUARANTEED)
    old = {k: v for k, v in new.items()
           if k not in ("priority", "goal", "budget_period", "flight_budget_micros")}
    decoded = codec.from_payload("campaign", json.dumps(old))
    assert isinstance(decoded, Campaign)
    assert (decoded.priority, decoded.goal, decoded.budget_period,
            decoded.flight_budget_micros) == (Priority.AUCTION, None, BudgetPeriod.DAY, None)
    assert new["goal"] == {"metric": "impressions", "total": 2_000_000}
    assert codec.from_payload("campaign", codec.dumps_payload(SPONSORSHIP)) == SPONSORSHIP
    assert codec.dumps_payload(SPONSORSHIP) == codec.dumps_payload(
        codec.from_payload("campaign", codec.dumps_payload(SPONSORSHIP)))


def test_the_change_feed_carries_the_sale_to_a_read_model(store: SqlCampaignStore) -> None:
    from adfunnel.campaigns.change_feed import ChangeFeed
    from adfunnel.campaigns.readmodel import CampaignReadModel

    adv = store.create_advertiser("a")
    model = CampaignReadModel.read(store)
    feed = ChangeFeed(store, model)
    line = store.create_campaign(**_values(GUARANTEED, adv.id))
    sponsor = store.create_campaign(**_values(SPONSORSHIP, adv.id))
    assert feed.poll_once() == 2
    assert model.campaign(line.id) == line and model.campaign(sponsor.id) == sponsor
    edited = store.update_campaign(sponsor.id, {"goal": {"metric": "share", "share": 0.5},
                                                "budget_period": "flight",
                                                "flight_budget_micros": 10**9})
    feed.poll_once()
    held = model.campaign(sponsor.id)
    assert held == edited and held is not None
    assert (held.goal, held.budget_period, held.flight_budget_micros) == (
        Goal(GoalMetric.SHARE, share=0.5), BudgetPeriod.FLIGHT, 10**9)
    assert CampaignReadModel.read(store).campaigns == model.campaigns  # a fresh boot agrees


# most drawn combinations break a rule (that is the point of the matrix above), so the
# filter is heavy by design
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(priority=st.sampled_from(list(Priority)), period=st.sampled_from(list(BudgetPeriod)),
       metric=st.sampled_from(list(GoalMetric)),
       share=st.none() | st.floats(min_value=1e-9, max_value=1.0),
       total=st.none() | st.integers(1, MAX_GOAL_TOTAL),
       flight=st.none() | st.integers(1, 2**62), pacing=st.sampled_from(list(PacingMode)))
def test_any_valid_sale_round_trips_its_payload_byte_for_byte(
        priority: Priority, period: BudgetPeriod, metric: GoalMetric, share: float | None,
        total: int | None, flight: int | None, pacing: PacingMode) -> None:
    """Whatever the sale, a record the rules accept decodes from its change-log payload
    to itself, and encodes again to the same bytes (what ad servers and the tracker
    read is what the store wrote)."""
    goal = None if priority is Priority.AUCTION else Goal(metric, share, total)
    c = dataclasses.replace(GUARANTEED, priority=priority, goal=goal, budget_period=period,
                            flight_budget_micros=flight, pacing_mode=pacing,
                            bid_type=BidType.CPC if metric is GoalMetric.CLICKS else BidType.CPM)
    assume(sale_problems(c) == [])
    text = codec.dumps_payload(c)
    back = codec.from_payload("campaign", text)
    assert back == c and codec.dumps_payload(back) == text
    row = codec.to_row("campaign", {f.name: getattr(c, f.name)
                                    for f in dataclasses.fields(c)})
    assert codec.from_row("campaign", row) == c


def test_a_flight_budget_spans_at_most_ten_years() -> None:
    """A flight budget is planned hour by hour over its whole flight (pacing.flight), so
    a flight of 1970-01-01..8999-12-31 (dates the API takes) made the create take ~100 s
    and gigabytes in the budget service, and each of its pages ~10 s, holding up every ad
    request (tried with an admin's guaranteed line; an advertiser may book a flight
    budget too). Breaks if such a flight is stored."""
    long = dataclasses.replace(GUARANTEED, flight_start=date(1970, 1, 1),
                               flight_end=date(8999, 12, 31))
    problems = dict(sale_problems(long))
    assert "at most 3660 days" in problems["flight_end"]
    auction = dataclasses.replace(AUCTION, budget_period=BudgetPeriod.FLIGHT,
                                  flight_budget_micros=10**9, flight_start=date(2026, 1, 1),
                                  flight_end=date(2036, 1, 9))
    assert fields(auction) == ["flight_end"]
    assert sale_problems(dataclasses.replace(auction, flight_end=date(2035, 12, 31))) == []
    # a day's budget is not planned over the flight: its flight may be long
    assert sale_problems(dataclasses.replace(AUCTION, flight_end=date(8999, 12, 31))) == []
