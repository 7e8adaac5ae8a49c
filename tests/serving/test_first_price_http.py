"""An auction on a first-price placement end to end over HTTP (#27): the operator makes
the placement through the API, two manual campaigns compete, the winner's token carries
its own bid and its impression beacon bills exactly that; on a second-price placement the
same two pay the GSP price (the runner-up's)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serving.helpers import ad_request, make_campaign

#: CPM bids, micros per mille: the winner bids 3.00, the runner-up 2.00.
WINNER_BID, RUNNER_UP_BID = 3_000_000, 2_000_000


@pytest.fixture
def budget_mode() -> str:
    return "local"  # no pacing: every request is served


@pytest.mark.slow
@pytest.mark.parametrize(("auction_type", "price"), [("first_price", WINNER_BID),
                                                     ("second_price", RUNNER_UP_BID)])
def test_the_winner_pays_what_its_placement_prices(client: TestClient, auction_type: str,
                                                   price: int) -> None:
    """Red when the decider runs every placement's auction at second price (the first
    price case bills 2.00 per mille), or when the placements API drops ``auction_type``."""
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed",
                                            "auction_type": auction_type})
    assert r.status_code == 201 and r.json()["auction_type"] == auction_type, r.text
    winner = make_campaign(client, bid_micros=WINNER_BID)
    make_campaign(client, bid_micros=RUNNER_UP_BID)
    n = 4
    for _ in range(n):
        r = client.post("/v1/ads:select", json=ad_request())
        assert r.status_code == 200, r.text
        [ad] = r.json()["ads"]
        assert (ad["campaign_id"], ad["price_micros"]) == (winner["campaign"]["id"], price)
        assert client.get(ad["impression_url"]).status_code == 204
    report = client.get(f"/v1/campaigns/{winner['campaign']['id']}/report").json()
    assert (report["impressions"], report["billed_micros"]) == (n, n * price // 1_000)
