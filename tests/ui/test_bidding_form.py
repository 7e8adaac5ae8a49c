"""The dashboard sets how a campaign bids (#27): the new-campaign form and the campaign
page's "Bidding" form send the bid strategy, cap and target through the API (an automatic
strategy's bid is derived there, never sent), and the API's refusals show by field."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from adfunnel.campaigns.model import BidStrategy
from adfunnel.runtime.embedded import Runtime
from adfunnel.ui.bidding import bidding_fields
from tests.ui.test_pages import client, log_in, rt, world  # noqa: F401  (fixtures)

#: The new-campaign form of an auction line billed per click, 20.00 a day.
CPC_LINE = {"name": "Clicks", "objective": "clicks", "bid_type": "CPC", "bid": "",
            "daily_budget": "20", "time_zone": "UTC", "flight_start": "2026-07-13",
            "flight_end": "", "priority": "auction", "goal_metric": "", "goal_total": "",
            "goal_share": "", "budget_period": "", "flight_budget": "",
            "pacing_mode": "even", "targeting": "", "bid_strategy": "max_clicks",
            "bid_cap": "", "target_cpa": ""}


def test_bidding_fields_send_only_what_the_strategy_takes() -> None:
    """Red when a manual bid is sent with an automatic strategy (the API refuses it)."""
    assert bidding_fields({"bid_strategy": "max_clicks", "bid": "2", "bid_cap": "0.4"},
                          edit=True) == {"bid_strategy": "max_clicks",
                                         "bid_cap_micros": 400_000}
    assert bidding_fields({"bid_strategy": "max_conversions", "bid_cap": ""}, edit=True) == {
        "bid_strategy": "max_conversions", "bid_cap_micros": None}
    assert bidding_fields({"bid_strategy": "target_cpa", "target_cpa": "12"}, edit=False) == {
        "bid_strategy": "target_cpa", "target_cpa_micros": 12_000_000}
    assert bidding_fields({"bid": "2.5"}, edit=False) == {"bid_strategy": "manual",
                                                          "bid_micros": 2_500_000}
    assert bidding_fields({"bid_strategy": "manual", "bid": ""}, edit=True) == {
        "bid_strategy": "manual"}


def test_new_automatic_campaign_and_its_bidding_form(
        rt: Runtime, client: TestClient, world: dict[str, Any]) -> None:  # noqa: F811
    """Red when the new-campaign form drops the strategy (the campaign is made manual or
    refused for want of a bid), or when the Bidding form is not routed."""
    log_in(client, world["key_a"])
    r = client.post("/ui/campaigns", data=CPC_LINE)
    assert r.status_code == 303, r.text
    cid = int(r.headers["location"].rsplit("/", 1)[1])
    made = rt.store.get_campaign(cid)
    assert (made.bid_strategy, made.bid_micros) == (BidStrategy.MAX_CLICKS, 200_000)
    page = client.get(f"/ui/campaigns/{cid}").text
    assert 'id="bidding-form"' in page and 'value="max_clicks" selected' in page
    url = f"/ui/campaigns/{cid}/bidding"
    base = {"version": str(made.version), "bid": "", "bid_cap": "", "target_cpa": ""}
    r = client.post(url, data={**base, "bid_strategy": "max_clicks", "bid_cap": "0.35"})
    assert r.status_code == 303, r.text
    capped = rt.store.get_campaign(cid)
    assert (capped.bid_cap_micros, capped.bid_micros) == (350_000, 350_000)
    assert capped.bid_strategy_since is not None
    base["version"] = str(capped.version)
    r = client.post(url, data={**base, "bid_strategy": "target_cpa"},
                    headers={"HX-Request": "true"})  # CPC, and no target: both named
    assert 'data-field="target_cpa_micros"' in r.text and 'data-field="bid_type"' in r.text
    r = client.post(url, data={**base, "bid_strategy": "manual", "bid": "0.30"})
    assert r.status_code == 303, r.text
    manual = rt.store.get_campaign(cid)
    assert (manual.bid_strategy, manual.bid_micros, manual.bid_cap_micros) == (
        BidStrategy.MANUAL, 300_000, None)
