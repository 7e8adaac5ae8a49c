"""A bid's notices on the embedded app, as an exchange calls them: the billing notice
(or, billing on the beacon, the markup's impression beacon) bills the clearing price
once, never above the bid; the bid's in-flight cost is what the budget counted."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.openrtb.conftest import banner_campaign, banner_request

BID = 2_500_000


def _won(client: TestClient) -> dict[str, Any]:
    r = client.post("/openrtb2/bid", json=banner_request())
    assert r.status_code == 200, r.text
    bid: dict[str, Any] = r.json()["seatbid"][0]["bid"][0]
    return bid


def _call(client: TestClient, runtime: Runtime, url: str, price: str) -> int:
    """The exchange substitutes the macro and calls the URL (a path under our base)."""
    path = url.replace("https://ads.test", "").replace("${AUCTION_PRICE}", price)
    status = client.get(path).status_code
    assert runtime.events.settle()
    return status


def _billed(client: TestClient, campaign_id: int) -> tuple[int, int]:
    report = client.get(f"/v1/campaigns/{campaign_id}/report").json()
    return report["impressions"], report["billed_micros"]


@pytest.mark.slow
def test_the_billing_notice_bills_the_clearing_price_once(client: TestClient,
                                                          runtime: Runtime) -> None:
    """Breaks if our token does not let the notice desk bill (tried: ``billing_type``
    ``CPC`` in ``bid_token``: the notice bills nothing), or the price cap is not our bid
    (tried: ``price_micros`` the GSP price 0.50: 1.75 is refused as above the bid)."""
    cid = banner_campaign(client, bid_micros=BID)["campaign"]["id"]
    bid = _won(client)
    assert _call(client, runtime, bid["burl"], "2.6") == 400  # above our 2.50: refused
    assert _call(client, runtime, bid["burl"], "1.75") == 204
    assert _call(client, runtime, bid["burl"], "1.75") == 204  # a replay bills nothing
    assert _call(client, runtime, bid["adm"].split('src="')[-1].split('"')[0]
                 .replace("&amp;", "&"), "1.75") in (200, 204)  # the beacon: no bill
    assert _billed(client, cid) == (1, 1_750)  # 1.75 per mille, once


@pytest.mark.slow
@pytest.mark.parametrize("openrtb_settings", [{"openrtb_bills_on": "beacon"}])
def test_billing_on_the_beacon_bills_the_markups_impression(client: TestClient,
                                                             runtime: Runtime) -> None:
    """Breaks if ``beacon`` still marks the bid billable by notice (tried:
    ``BILLABLE_EVENT["beacon"] = "notice"``: the notice bills 2.00, not the beacon's
    1.50)."""
    cid = banner_campaign(client, bid_micros=BID)["campaign"]["id"]
    bid = _won(client)
    pixel = bid["adm"].split('src="')[-1].split('"')[0].replace("&amp;", "&")
    assert _call(client, runtime, bid["burl"], "2.0") == 204  # counted, bills nothing
    assert _call(client, runtime, pixel, "1.5") in (200, 204)
    assert _billed(client, cid) == (1, 1_500)  # the beacon's price, not the notice's
