"""Conversions end to end through the embedded server (memory event log applied inline,
in-memory SQLite, manual clock): a CPA campaign is billed its price for the first
conversion of a click within the seven-day attribution window, and never again. The
conversion names its click by the click id the click's redirect carried
(``adf_click_id``), never by the serve token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign

BROWSER = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
           "Chrome/124.0.0.0 Safari/537.36")
UA = {"user-agent": BROWSER}
CPA_BID = 5_000_000


@pytest.fixture
def budget_mode() -> str:
    return "local"  # no pacing: every request is served


def move_clock(client: TestClient, runtime: Runtime, seconds: float) -> None:
    at = runtime.clock.now() + timedelta(seconds=seconds)
    r = client.put("/v1/admin/clock", json={"now": at.isoformat()})
    assert r.status_code == 200, r.text


def cpa_campaign(client: TestClient, **fields: Any) -> int:
    made = make_campaign(client, bid_type="CPA", objective="conversions", bid_micros=CPA_BID,
                         **fields)
    assert made["campaign"]["bid_type"] == "CPA"
    return int(made["campaign"]["id"])


#: A reserve (micros per mille), so the lone bidder pays a price above 0.
SLOTS = [{"id": "s1", "position": 1, "width": 300, "height": 250, "reserve_cpm_micros": 20}]


def serve(client: TestClient) -> dict[str, Any]:
    r = client.post("/v1/ads:select", json=ad_request(deadline_ms=5_000, slots=SLOTS))
    assert r.status_code == 200, r.text
    [ad] = r.json()["ads"]
    assert ad["billing_type"] == "CPA" and not ad["house"]
    return ad


def show_and_click(client: TestClient, runtime: Runtime, ad: dict[str, Any],
                   headers: dict[str, str] = UA) -> str:
    """Show and click ``ad``; the click id its redirect carried."""
    assert client.get(ad["impression_url"], headers=UA).status_code == 204
    move_clock(client, runtime, 5)  # a person's click, not an impossibly fast one
    r = client.get(ad["click_url"], headers=headers, follow_redirects=False)
    assert r.status_code == 302, r.text
    return click_id_of(r.headers["location"])


def click_id_of(location: str) -> str:
    """The ``adf_click_id`` of a click's redirect."""
    [click_id] = parse_qs(urlsplit(location).query)["adf_click_id"]
    return click_id


def convert(client: TestClient, click_id: str, **params: str) -> Any:
    return client.get("/v", params={"click_id": click_id, **params}, headers=UA)


def report(client: TestClient, cid: int, last_days: int = 0) -> dict[str, Any]:
    first = START.date()
    last = first + timedelta(days=last_days)
    r = client.get(f"/v1/campaigns/{cid}/report",
                   params={"from": first.isoformat(), "to": last.isoformat()})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_conversion_bills_the_cpa_price_once(client: TestClient, runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    price = ad["price_micros"]
    assert 0 < price <= CPA_BID, price
    click_id = show_and_click(client, runtime, ad)
    before = report(client, cid)
    assert (before["impressions"], before["clicks"], before["conversions"]) == (1, 1, 0)
    assert before["billed_micros"] == 0  # a CPA campaign's impression and click are free

    move_clock(client, runtime, 3_600)
    assert convert(client, click_id, value="123").status_code == 204
    got = report(client, cid)
    assert got["conversions"] == 1
    assert got["billed_micros"] == price
    assert got["cost_per_conversion_micros"] == price
    assert got["absorbed_overspend_micros"] == 0

    assert convert(client, click_id).status_code == 204  # acknowledged, but billed once
    assert convert(client, click_id, value="456").status_code == 204
    again = report(client, cid)
    assert again["conversions"] == 1 and again["billed_micros"] == price
    # past the log's two-hour dedupe window the ledger's unique row still holds
    move_clock(client, runtime, 3 * 3_600)
    duplicates = runtime.ledger.stats().duplicates_rejected
    assert convert(client, click_id).status_code == 204
    assert runtime.ledger.stats().duplicates_rejected == duplicates + 1
    later = report(client, cid)
    assert later["conversions"] == 1 and later["billed_micros"] == price


@pytest.mark.slow
def test_a_conversion_postback_may_be_a_post(client: TestClient, runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    r = client.post("/v", params={"click_id": click_id, "value": "0"}, headers=UA)
    assert r.status_code == 204, r.text
    assert report(client, cid)["conversions"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "", "9223372036854775808", "١٢"])
def test_a_bad_value_is_422_naming_value(client: TestClient, runtime: Runtime,
                                        value: str) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    r = convert(client, click_id, value=value)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "validation"
    assert [f["field"] for f in body["fields"]] == ["value"]
    assert report(client, cid)["conversions"] == 0  # nothing was appended


@pytest.mark.slow
def test_a_refused_click_id_is_400_naming_click_id(client: TestClient,
                                                  runtime: Runtime) -> None:
    cpa_campaign(client)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    r = client.get("/v", params={"click_id": click_id[:-4] + "AAAA"}, headers=UA)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "invalid_token"
    assert r.json()["fields"] == [{"field": "click_id", "problem": "bad_signature"}]
    r = client.get("/v", headers=UA)
    assert r.status_code == 400 and r.json()["fields"] == [{"field": "click_id",
                                                             "problem": "malformed"}]


def test_the_click_id_handed_to_the_landing_page_posts_the_conversion_back(
        client: TestClient, runtime: Runtime) -> None:
    """The landing URL's ``{click_id}`` macro becomes the click id at the redirect; the
    advertiser posts it back as ``/v?click_id=`` and the conversion bills once."""
    cid = cpa_campaign(client, ad={"landing_url": "https://shop.test/l?src=adf&cid={click_id}"})
    ad = serve(client)
    assert client.get(ad["impression_url"], headers=UA).status_code == 204
    move_clock(client, runtime, 5)
    r = client.get(ad["click_url"], headers=UA, follow_redirects=False)
    assert r.status_code == 302, r.text
    location = urlsplit(r.headers["location"])
    assert (location.netloc, location.path) == ("shop.test", "/l")
    [click_id] = parse_qs(location.query)["cid"]
    assert "{" not in click_id and "adf_click_id" not in location.query  # once, in place
    r = client.get("/v", params={"click_id": click_id, "value": "12000000"}, headers=UA)
    assert r.status_code == 204, r.text
    got = report(client, cid)
    assert (got["conversions"], got["billed_micros"]) == (1, ad["price_micros"])
    # posted back again: still one conversion
    assert client.post("/v", params={"click_id": click_id}, headers=UA).status_code == 204
    assert report(client, cid)["conversions"] == 1


@pytest.mark.slow
def test_a_made_up_click_id_is_400(client: TestClient, runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    show_and_click(client, runtime, ad)
    r = client.get("/v", params={"click_id": "0f3c2b1a9d8e7f60"}, headers=UA)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "invalid_token"
    assert r.json()["fields"] == [{"field": "click_id", "problem": "malformed"}]
    assert report(client, cid)["conversions"] == 0  # nothing was appended


def test_a_conversion_without_a_click_is_not_billed(client: TestClient,
                                                    runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    assert client.get(ad["impression_url"], headers=UA).status_code == 204
    move_clock(client, runtime, 60)
    r = client.get("/v", params={"t": ad["token"]}, headers=UA)  # no click: no click id
    assert r.status_code == 400, r.text
    got = report(client, cid)
    assert (got["conversions"], got["billed_micros"]) == (0, 0)


def test_a_conversion_after_the_attribution_window_is_not_billed(
    client: TestClient, runtime: Runtime
) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    move_clock(client, runtime, 8 * 86_400)  # past the token, within the tracker's grace
    r = convert(client, click_id, value="123")
    assert r.status_code == 204, r.text  # the tracker accepts it; the ledger does not bill
    got = report(client, cid, last_days=8)
    assert got["conversions"] == 0 and got["billed_micros"] == 0
    assert runtime.ledger.counters()["conversions_outside_window"] == 1


def test_a_campaigns_own_attribution_window_applies(client: TestClient,
                                                    runtime: Runtime) -> None:
    cid = cpa_campaign(client, attribution_window_s=3_600)
    early, late = serve(client), serve(client)
    early_id = show_and_click(client, runtime, early)  # clicked at +5 s
    move_clock(client, runtime, 120)  # one click a minute per address (tier 2)
    late_id = show_and_click(client, runtime, late)  # clicked at +130 s
    move_clock(client, runtime, 2_875)  # +3,005 s: 3,000 s after the early click
    assert convert(client, early_id).status_code == 204
    move_clock(client, runtime, 726)  # +3,731 s: 3,601 s after the late click
    assert convert(client, late_id).status_code == 204
    got = report(client, cid)
    assert (got["clicks"], got["conversions"]) == (2, 1)
    assert got["billed_micros"] == early["price_micros"]
    assert runtime.ledger.counters()["conversions_outside_window"] == 1


def test_a_crawler_conversion_is_counted_as_ivt_and_not_billed(
    client: TestClient, runtime: Runtime
) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    r = client.get("/v", params={"click_id": click_id},
                   headers={"user-agent": "Googlebot/2.1 (+http://www.google.com/bot.html)"})
    assert r.status_code == 204
    got = report(client, cid)
    assert (got["conversions"], got["billed_micros"]) == (0, 0)
    assert runtime.ledger.counters()["ivt_conversion_crawler_ua"] == 1


@pytest.mark.slow
def test_with_nowhere_to_store_the_event_the_answer_is_503_and_nothing_is_billed(
    client: TestClient, runtime: Runtime
) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    runtime.events.log.close()  # the embedded memory log has no spool behind it
    r = convert(client, click_id, value="123")
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "1"
    assert r.json()["error"] == "event_log_unavailable"
    assert [f["field"] for f in r.json()["fields"]] == ["click_id"]
    assert runtime.tracker.counts()["unavailable"] == 1
    assert report(client, cid)["conversions"] == 0
