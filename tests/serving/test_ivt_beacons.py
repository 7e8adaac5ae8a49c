"""Tier-1 invalid traffic on the beacons: never billed, counted per reason, the click
still redirected (real lists from shared/data, a real embedded server)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serving.helpers import ad_request, make_campaign

BROWSER = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
           "Chrome/120.0 Safari/537.36")
GOOGLEBOT = "Googlebot/2.1 (+http://www.google.com/bot.html)"
AWS = "3.5.140.1"  # in Amazon's published ranges
HOME = "81.2.69.142"


@pytest.fixture
def budget_mode() -> str:
    return "local"


def _serve(client: TestClient) -> dict:
    r = client.post("/v1/ads:select", json=ad_request(deadline_ms=5_000))
    assert r.status_code == 200, r.text
    return r.json()["ads"][0]


def _stats(client: TestClient) -> dict:
    return client.get("/v1/ledger/stats").json()


@pytest.mark.slow
def test_fifty_crawler_clicks_bill_nothing(client: TestClient) -> None:
    make_campaign(client, bid_type="CPC", objective="clicks", bid_micros=500_000)
    for _ in range(50):
        ad = _serve(client)
        shown = client.get(ad["impression_url"], headers={"user-agent": GOOGLEBOT})
        assert shown.status_code == 204
        r = client.get(ad["click_url"], headers={"user-agent": GOOGLEBOT},
                       follow_redirects=False)
        assert r.status_code == 302 and r.headers["location"].startswith("https://x.test/")
    stats = _stats(client)
    assert stats["rows"] == 0
    assert stats["counters"]["ivt_click_crawler_ua"] == 50
    assert stats["counters"]["ivt_impression_crawler_ua"] == 50


@pytest.mark.slow
def test_a_datacenter_address_is_flagged_and_a_home_one_billed(client: TestClient) -> None:
    make_campaign(client)
    ad = _serve(client)
    client.get(ad["impression_url"], headers={"user-agent": BROWSER, "x-forwarded-for": AWS})
    assert _stats(client)["counters"]["ivt_impression_datacenter_ip"] == 1
    assert _stats(client)["rows"] == 0
    ad = _serve(client)
    client.get(ad["impression_url"], headers={"user-agent": BROWSER, "x-forwarded-for": HOME})
    assert _stats(client)["rows"] == 1


def test_a_beacon_without_a_user_agent_is_not_billed(client: TestClient) -> None:
    make_campaign(client)
    ad = _serve(client)
    client.get(ad["impression_url"], headers={"user-agent": ""})
    assert _stats(client)["counters"]["ivt_impression_missing_ua"] == 1
    assert _stats(client)["rows"] == 0


def test_a_link_preview_bot_does_not_take_the_viewers_impression(client: TestClient) -> None:
    """One token; its beacon first from a link-preview bot (flagged ``crawler_ua``), then
    from the viewer's browser: the viewer's impression bills, once."""
    make_campaign(client)
    ad = _serve(client)
    bot = {"user-agent": GOOGLEBOT, "x-forwarded-for": HOME}
    viewer = {"user-agent": BROWSER, "x-forwarded-for": HOME}
    assert client.get(ad["impression_url"], headers=bot).status_code == 204
    for _ in range(2):  # the viewer's, and a re-sent copy of it
        assert client.get(ad["impression_url"], headers=viewer).status_code == 204
    stats = _stats(client)
    assert stats["counters"]["ivt_impression_crawler_ua"] == 1
    assert stats["counters"]["ivt_render_crawler_ua"] == 1
    assert stats["rows"] == 1
    assert stats["measured_rows"] == 1  # its render event (never billed)
    assert stats["duplicates_rejected"] == 1
