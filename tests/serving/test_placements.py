"""Operator placements and ad quality, end to end through HTTP on a real embedded app.

Configured reserves (per country, else the default) apply as the higher of them and the
request's; sizes and formats the placement does not allow are not served there; the
operator's quality enters the total value; the house ad fills a slot nothing else
fills, at price 0, and is never billed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import monotonic_ms
from adfunnel.runtime.embedded import Runtime
from adfunnel.serving.request import decode_request
from tests.serving.helpers import ad_request, make_campaign

HOUSE: dict[str, Any] = {
    "creative_ref": "house/app.png", "landing_url": "https://operator.test/app?src=house",
    "format": "banner", "width": 300, "height": 250,
}


def placement(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed", **body})
    assert r.status_code == 201, r.text
    return r.json()


def select(client: TestClient, country: str = "US", **over: Any) -> Any:
    body = ad_request(**over)
    body["user"]["attributes"]["geo.country"] = country
    return client.post("/v1/ads:select", json=body)


def reasons(runtime: Runtime, country: str = "US", **over: Any) -> list[str]:
    body = ad_request(**over)
    body["user"]["attributes"]["geo.country"] = country
    counted = runtime.decider.decide(decode_request(json.dumps(body).encode()), "r",
                                     monotonic_ms() + 5_000).rejection_counts()
    req = decode_request(json.dumps({**body, "explain": True}).encode())
    listed = [r.reason for r in runtime.decider.decide(req, "r", monotonic_ms() + 5_000).rejections]
    assert counted == {r: listed.count(r) for r in listed}  # both paths agree
    return listed


# --- reserves --------------------------------------------------------------------------


def test_country_reserve_above_the_bid_leaves_the_slot_empty(
    client: TestClient, runtime: Runtime
) -> None:
    make_campaign(client)  # CPM 2,000,000
    placement(client, country_reserves_cpm_micros={"US": 3_000_000})
    assert select(client, "US").status_code == 204
    assert select(client, "us").status_code == 204  # codes compare upper-cased
    assert reasons(runtime, "US") == ["below_reserve"]
    r = select(client, "DE")  # no configured reserve for DE, default 0
    assert r.status_code == 200 and r.json()["ads"][0]["price_micros"] == 0


@pytest.mark.parametrize(
    ("configured", "request_over", "country", "price"),
    [
        ({"reserve_cpm_micros": 1_500_000}, {}, "US", 1_500_000),
        ({"reserve_cpm_micros": 1_500_000},
         {"placement": {"id": "feed", "reserve_cpm_micros": 1_700_000}}, "US", 1_700_000),
        ({"reserve_cpm_micros": 1_500_000},
         {"slots": [{"id": "s1", "position": 1, "width": 300, "height": 250,
                     "reserve_cpm_micros": 1_200_000}]}, "US", 1_500_000),
        ({"reserve_cpm_micros": 1_500_000, "country_reserves_cpm_micros": {"DE": 1_200_000}},
         {}, "DE", 1_200_000),
        ({"reserve_cpm_micros": 0, "country_reserves_cpm_micros": {"DE": 1_200_000}},
         {"placement": {"id": "feed", "reserve_cpm_micros": 900_000}}, "DE", 1_200_000),
    ],
)
def test_the_higher_of_request_and_configured_reserve_prices_the_win(
    client: TestClient, configured: dict[str, Any], request_over: dict[str, Any],
    country: str, price: int,
) -> None:
    make_campaign(client)  # a lone CPM bidder pays the reserve
    placement(client, **configured)
    r = select(client, country, **request_over)
    assert r.status_code == 200, r.text
    assert r.json()["ads"][0]["price_micros"] == price


@pytest.mark.slow
def test_a_placement_edit_applies_to_the_next_request(client: TestClient) -> None:
    make_campaign(client)
    placement(client, reserve_cpm_micros=1_000_000)
    assert select(client).json()["ads"][0]["price_micros"] == 1_000_000
    r = client.patch("/v1/placements/feed", json={"version": 1, "reserve_cpm_micros": 2_500_000})
    assert r.status_code == 200, r.text
    assert select(client).status_code == 204
    other = ad_request(placement={"id": "other-placement"})  # unconfigured: request's only
    assert client.post("/v1/ads:select", json=other).json()["ads"][0]["price_micros"] == 0


# --- sizes and formats ----------------------------------------------------------------------


def test_sizes_and_formats_the_placement_does_not_allow_are_not_served(
    client: TestClient, runtime: Runtime
) -> None:
    make_campaign(client)  # a 300x250 banner
    placement(client, allowed_sizes=["728x90"])
    assert select(client).status_code == 204
    assert reasons(runtime) == ["size_not_allowed"]
    client.patch("/v1/placements/feed", json={"allowed_sizes": [], "allowed_formats": ["native"]})
    assert select(client).status_code == 204
    assert reasons(runtime) == ["format_not_allowed"]
    client.patch("/v1/placements/feed", json={"allowed_formats": ["native", "banner"]})
    assert select(client).status_code == 200


# --- quality ------------------------------------------------------------------------------


def test_quality_enters_the_total_value_and_the_price(client: TestClient) -> None:
    a = make_campaign(client, bid_micros=2_000_000)  # 2,000 micros per impression
    b = make_campaign(client, bid_micros=1_800_000)  # 1,800
    assert select(client).json()["ads"][0]["ad_id"] == a["ad"]["id"]
    r = client.put(f"/v1/ads/{b['ad']['id']}/quality", json={"quality_micros": 500})
    assert r.status_code == 200, r.text
    [won] = select(client).json()["ads"]
    # B's total 2,300 beats 2,000; it pays (2,000 - 500) per impression = 1,500,000 CPM
    assert (won["ad_id"], won["price_micros"]) == (b["ad"]["id"], 1_500_000)
    client.put(f"/v1/ads/{b['ad']['id']}/quality", json={"quality_micros": 0})
    client.put(f"/v1/ads/{a['ad']['id']}/quality", json={"quality_micros": -300})
    [won] = select(client).json()["ads"]
    # A's total 1,700 now loses to B's 1,800; B pays A's total
    assert (won["ad_id"], won["price_micros"]) == (b["ad"]["id"], 1_700_000)


# --- house ad -----------------------------------------------------------------------------


def test_house_ad_fills_an_empty_slot_and_is_never_billed(
    client: TestClient, runtime: Runtime
) -> None:
    placement(client, house_ad=HOUSE)
    r = select(client)
    assert r.status_code == 200, r.text
    [ad] = r.json()["ads"]
    assert ad["house"] is True and ad["price_micros"] == 0 and ad["billing_type"] == "house"
    assert (ad["ad_id"], ad["campaign_id"], ad["creative_ref"]) == (0, 0, "house/app.png")
    assert client.get(ad["impression_url"]).status_code == 204
    click = client.get(ad["click_url"], follow_redirects=False)
    assert click.status_code == 302 and click.headers["location"] == HOUSE["landing_url"]
    stats = client.get("/v1/ledger/stats").json()
    assert stats["rows"] == 0  # nothing billable recorded
    assert stats["tracker"]["house_render"] == 1 and stats["tracker"]["house_click"] == 1


def test_house_ad_takes_only_the_slots_left_empty_that_it_fits(client: TestClient) -> None:
    made = make_campaign(client)
    placement(client, house_ad=HOUSE)
    slots = [{"id": "s1", "position": 1, "width": 300, "height": 250},
             {"id": "s2", "position": 2, "width": 300, "height": 250},
             {"id": "s3", "position": 3, "width": 728, "height": 90}]
    ads = {a["slot_id"]: a for a in select(client, slots=slots).json()["ads"]}
    assert set(ads) == {"s1", "s2"}  # nothing fits s3, the house ad neither
    assert (ads["s1"]["ad_id"], ads["s1"]["house"]) == (made["ad"]["id"], False)
    assert (ads["s2"]["ad_id"], ads["s2"]["house"]) == (0, True)
    only_leaderboard = [{"id": "s3", "position": 1, "width": 728, "height": 90}]
    assert select(client, slots=only_leaderboard).status_code == 204


def test_removing_the_house_ad_brings_back_no_fill(client: TestClient) -> None:
    placement(client, house_ad=HOUSE)
    assert select(client).status_code == 200
    assert client.patch("/v1/placements/feed", json={"house_ad": None}).status_code == 200
    assert select(client).status_code == 204
