"""A sponsorship or guaranteed line never bids on an exchange: it is sold on the
operator's own slots at its contract rate (a clicks goal paid per click), and an
OpenRTB bid is a CPM price billed at the exchange's clearing price. A tester sold a
5-click guaranteed line through 30 bids: 30 impressions billed 30,000 micros and 6
unbilled clicks completed a goal worth 5,000,000."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.openrtb.conftest import banner_campaign, banner_request

LINES = {
    "guaranteed": {"priority": "guaranteed", "bid_type": "CPC", "objective": "clicks",
                   "bid_micros": 1_000_000, "daily_budget_micros": 0,
                   "budget_period": "flight", "flight_end": "2026-07-31",
                   "goal": {"metric": "clicks", "total": 5}},
    "sponsorship": {"priority": "sponsorship", "bid_micros": 5_000_000,
                    "goal": {"metric": "share", "share": 1}},
}


@pytest.mark.parametrize("line", sorted(LINES))
def test_a_direct_line_is_never_bid_on_an_exchange(client: TestClient, runtime: Runtime,
                                                   line: str) -> None:
    """The line is left out of an exchange's request before the tiers (reason
    ``direct_line``), so the auction's campaign fills the slot: a tester saw every
    exchange request of a placement with a direct line answer no bid. Mutations seen
    red: the line left in (the bid was the line's, its token billing CPM; then, dropped
    after the decision, no bid at all)."""
    made = banner_campaign(client, **LINES[line])
    assert made["campaign"]["priority"] == line
    r = client.post("/openrtb2/bid?nbr=1", json=banner_request())
    assert r.status_code == 200, r.text
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"imp-1": "no_fill"}
    auction = banner_campaign(client, bid_micros=1_000_000)["campaign"]["id"]
    r = client.post("/openrtb2/bid", json=banner_request(id="req-2"))
    assert r.status_code == 200, r.text
    (bid,) = r.json()["seatbid"][0]["bid"]
    explained = runtime.decisions.explain("ortb-req-2")
    assert explained is not None
    assert explained["rejection_counts"] == {"direct_line": 1}
    assert [p["campaign_id"] for p in explained["placed"]] == [auction]
    served: Any = runtime.gate
    assert served.committed(made["campaign"]["id"], runtime.clock.now().date()) == 0
    # the same line still serves the operator's own slots (ads:select)
    r = client.post("/v1/ads:select", json={
        "user": {"key": "u1"}, "placement": {"id": "feed"},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]})
    assert r.status_code == 200, r.text
    assert r.json()["ads"][0]["campaign_id"] == made["campaign"]["id"]
    assert bid["price"] > 0
