"""Bid strategy terms changed while ads are served (issue #27): between the write and the
budget service's restarted λ reaching the ad server, an automatic campaign never bids
above the bid it made just before (README, *The λ controller*, Restart)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.budget.bulk_view import UNKNOWN_LAMBDA
from adfunnel.clock import ManualClock
from adfunnel.runtime.embedded import Runtime
from tests.serving.helpers import ad_request, make_campaign

CLICKS = {"objective": "clicks", "bid_type": "CPC"}
#: max_clicks on a daily budget of 5.00 without a cap: v = 1 % of it, 0.05 a click
UNCAPPED = {**CLICKS, "bid_micros": None, "bid_strategy": "max_clicks",
            "daily_budget_micros": 5_000_000}
MANUAL = {**CLICKS, "bid_micros": 50_000, "daily_budget_micros": 5_000_000}
BEFORE = 50_000  # the bid per click of both, micros, once λ = 1
NEW_CAP = {"bid_strategy": "max_clicks", "bid_cap_micros": 200_000}  # v = 0.20


def _first_price_click(client: TestClient, request_id: str) -> int:
    """The charge per click of the ad served for one request on a first-price placement
    (its own bid)."""
    r = client.post("/v1/ads:select", json=ad_request(
        request_id=request_id, user={"key": request_id, "attributes": {"geo.country": "US"}}))
    assert r.status_code == 200, r.text
    ad = r.json()["ads"][0]
    assert ad["billing_type"] == "CPC"
    return int(ad["price_micros"])


@pytest.mark.parametrize("made", [UNCAPPED, MANUAL], ids=["cap_raised", "manual_to_auto"])
def test_new_terms_bid_no_more_than_before_until_the_restarted_lambda_comes(
        runtime: Runtime, client: TestClient, made: dict[str, Any]) -> None:
    """A max_clicks campaign at λ = 1 bidding 0.05 a click gets a cap of 0.20, or a manual
    campaign bidding 0.05 becomes max_clicks with that cap: the service restarts λ at
    0.20 ÷ 0.05 = 4, but the ad server held the old λ (1: the manual one's too) until
    its next reply, so the requests in between bid, and on a first-price placement
    paid, the whole new value, 0.20 a click. Red without the client's ``_terms_version``
    (``BudgetClient.campaign_changed`` keeping λ of the old terms)."""
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    r = client.post("/v1/placements", json={"id": "feed", "name": "feed",
                                              "auction_type": "first_price"})
    assert r.status_code == 201, r.text
    cid = make_campaign(client, **made)["campaign"]["id"]
    for _ in range(45):  # behind plan with no spend: λ falls to 1 (42 steps)
        clock.advance(10)
    clock.advance(1)
    assert _first_price_click(client, "before") == BEFORE
    r = client.patch(f"/v1/campaigns/{cid}", json=NEW_CAP)
    assert r.status_code == 200, r.text
    assert r.json()["bid_micros"] == 200_000
    assert _first_price_click(client, "between") <= BEFORE
    assert runtime.gate.bid_multiplier(cid) == UNKNOWN_LAMBDA  # no λ of the new terms yet
    clock.advance(1)  # a report: the restarted λ arrives
    assert runtime.gate.bid_multiplier(cid) == 4.0
    assert _first_price_click(client, "after") == BEFORE


def test_two_term_changes_in_one_instant_both_restart_lambda(
        runtime: Runtime, client: TestClient) -> None:
    """Two cap changes at the same instant of the clock (a manual clock, a replay): the
    second wrote the same ``bid_strategy_since`` as the first, so neither the service nor
    the ad server saw new terms, and λ restarted for 0.20 a click (4) bid 2.00 ÷ 4 = 0.50,
    ten times the bid before. Red when ``bidding_terms`` sets ``now`` without moving past
    the last ``bid_strategy_since``."""
    clock = runtime.clock
    assert isinstance(clock, ManualClock)
    client.post("/v1/placements", json={"id": "feed", "name": "feed",
                                         "auction_type": "first_price"})
    cid = make_campaign(client, **UNCAPPED)["campaign"]["id"]
    for _ in range(45):
        clock.advance(10)
    clock.advance(1)
    assert _first_price_click(client, "before") == BEFORE
    for cap in (200_000, 2_000_000):
        r = client.patch(f"/v1/campaigns/{cid}", json={"bid_cap_micros": cap})
        assert r.status_code == 200, r.text
    clock.advance(1)
    assert _first_price_click(client, "after") == BEFORE
    assert runtime.gate.bid_multiplier(cid) == 40.0  # 2.00 ÷ (0.20 ÷ 4)
