"""The delivery status rules: one case per status, and the order in which rules win."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adfunnel.ui.delivery import DeliveryFacts, DeliveryStatus, delivery_status

#: An active campaign that matched requests, won serves and spends on plan.
HEALTHY = DeliveryFacts(campaign_status="active", servable_ads=2, budget_state="metered",
                        pacing_status="pacing", matched_requests=400, capped_requests=10,
                        served_micros=120_000, billed_micros=90_000)


@pytest.mark.parametrize(("change", "expected"), [
    ({}, DeliveryStatus.DELIVERING),
    ({"budget_state": "open", "pacing_status": None}, DeliveryStatus.DELIVERING),
    ({"served_micros": 0}, DeliveryStatus.DELIVERING),  # billed spend counts too
    ({"budget_state": "exhausted"}, DeliveryStatus.LIMITED_BY_BUDGET),
    # the service's "limited_by_budget" is only its metered state: slices one by one
    ({"pacing_status": "limited_by_budget"}, DeliveryStatus.DELIVERING),
    ({"pacing_status": "exhausted"}, DeliveryStatus.LIMITED_BY_BUDGET),
    ({"budget_refusals": 3}, DeliveryStatus.LIMITED_BY_BUDGET),
    ({"pacing_status": "limited_by_bid_or_audience"}, DeliveryStatus.LIMITED_BY_BID),
    ({"served_micros": 0, "billed_micros": 0}, DeliveryStatus.LIMITED_BY_BID),
    ({"matched_requests": 0, "capped_requests": 0}, DeliveryStatus.LIMITED_BY_TARGETING),
    ({"capped_requests": 200}, DeliveryStatus.CAPPED),
    ({"capped_requests": 199}, DeliveryStatus.DELIVERING),
    ({"campaign_status": "paused"}, DeliveryStatus.PAUSED),
    ({"campaign_status": "ended"}, DeliveryStatus.ENDED),
    ({"flight_over": True}, DeliveryStatus.ENDED),
    ({"campaign_status": "archived"}, DeliveryStatus.ENDED),
    ({"campaign_status": "completed"}, DeliveryStatus.COMPLETED),
    ({"flight_not_started": True}, DeliveryStatus.SCHEDULED),
    ({"servable_ads": 0}, DeliveryStatus.NO_APPROVED_ADS),
    # traffic not counted (the local gate): neither targeting nor caps decide
    ({"matched_requests": None, "capped_requests": 0}, DeliveryStatus.DELIVERING),
    ({"matched_requests": None, "served_micros": 0, "billed_micros": 0},
     DeliveryStatus.LIMITED_BY_BID),
])
def test_each_status(change: dict[str, object], expected: DeliveryStatus) -> None:
    assert delivery_status(replace(HEALTHY, **change)) is expected


def test_every_status_is_reachable() -> None:
    cases = [
        HEALTHY,
        replace(HEALTHY, budget_state="exhausted"),
        replace(HEALTHY, pacing_status="limited_by_bid_or_audience"),
        replace(HEALTHY, matched_requests=0),
        replace(HEALTHY, capped_requests=400),
        replace(HEALTHY, campaign_status="paused"),
        replace(HEALTHY, campaign_status="ended"),
        replace(HEALTHY, campaign_status="completed"),
        replace(HEALTHY, flight_not_started=True),
        replace(HEALTHY, servable_ads=0),
    ]
    assert {delivery_status(c) for c in cases} == set(DeliveryStatus)


@pytest.mark.parametrize(("change", "expected"), [
    # the lifecycle decides before any spend signal
    ({"campaign_status": "paused", "budget_state": "exhausted"}, DeliveryStatus.PAUSED),
    ({"campaign_status": "completed", "flight_over": True}, DeliveryStatus.COMPLETED),
    ({"campaign_status": "paused", "flight_over": True}, DeliveryStatus.ENDED),
    ({"servable_ads": 0, "matched_requests": 0}, DeliveryStatus.NO_APPROVED_ADS),
    # budget before the audience: an exhausted campaign stops matching nothing
    ({"budget_state": "exhausted", "matched_requests": 0}, DeliveryStatus.LIMITED_BY_BUDGET),
    # caps before the bid: capped requests are not lost auctions
    ({"capped_requests": 400, "served_micros": 0, "billed_micros": 0}, DeliveryStatus.CAPPED),
    ({"matched_requests": 0, "pacing_status": "limited_by_bid_or_audience"},
     DeliveryStatus.LIMITED_BY_TARGETING),
])
def test_rule_order(change: dict[str, object], expected: DeliveryStatus) -> None:
    assert delivery_status(replace(HEALTHY, **change)) is expected


def test_labels_read_as_words() -> None:
    assert DeliveryStatus.LIMITED_BY_BUDGET.label == "limited by budget"
    assert DeliveryStatus.DELIVERING.label == "delivering"


@pytest.mark.parametrize("priority", ["sponsorship", "guaranteed"])
def test_a_direct_line_below_its_day_target_at_p_1_is_not_limited_by_bid(priority: str) -> None:
    """A sponsorship is never paced (its daily budget is a cap, not a target) and a
    guaranteed line is served ahead of the auction: neither is outbid. A home-page
    takeover filling every request read "limited by bid" on the campaign list."""
    f = replace(HEALTHY, priority=priority, pacing_status="limited_by_bid_or_audience")
    assert delivery_status(f) is DeliveryStatus.DELIVERING
    auction = replace(HEALTHY, pacing_status="limited_by_bid_or_audience")
    assert delivery_status(auction) is DeliveryStatus.LIMITED_BY_BID



def test_nothing_today_says_nothing_in_the_days_first_hour() -> None:
    """Five minutes after local midnight no campaign has matched or won anything yet: a
    guaranteed line read "limited by targeting" then. From an hour in, the same facts
    say it. Mutation seen red: the rules ignoring ``day_elapsed_s``."""
    idle = replace(HEALTHY, matched_requests=0, served_micros=0, billed_micros=0,
                   capped_requests=0, priority="guaranteed")
    assert delivery_status(replace(idle, day_elapsed_s=300)) is DeliveryStatus.DELIVERING
    assert delivery_status(replace(idle, day_elapsed_s=3_600)) \
        is DeliveryStatus.LIMITED_BY_TARGETING
    unwon = replace(HEALTHY, served_micros=0, billed_micros=0)
    assert delivery_status(replace(unwon, day_elapsed_s=300)) is DeliveryStatus.DELIVERING
    assert delivery_status(replace(unwon, day_elapsed_s=7_200)) is DeliveryStatus.LIMITED_BY_BID
