"""The dashboard's placement pages (issue #26, the operator's view) on a real embedded app
(SQLite in memory, manual clock, a server configured in EUR): the list links each
placement to its page; the page shows the placement report's figures (totals, by tier,
per day) in the server's currency; admin only; the API's field errors; 404."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.ui.test_pages import log_in

START = datetime(2026, 7, 15, 9, 0, tzinfo=UTC)
ADMIN_KEY = "ui-placements-admin-key-0123456789abcdef"
HOUSE = {"creative_ref": "house/app.png", "landing_url": "https://operator.test/app",
         "format": "banner", "width": 728, "height": 90}


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY, budget="local", currency="EUR")
    runtime = build_runtime(settings, ManualClock(START), seed=1)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(rt), follow_redirects=False) as c:
        yield c


def _traffic(client: TestClient, rt: Runtime) -> None:
    """Placement ``feed`` with a house ad and one auction campaign; three requests of an
    auction slot and a house slot, their impressions fired."""
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    r = client.post("/v1/placements", headers=auth,
                    json={"id": "feed", "name": "Feed", "house_ad": HOUSE})
    assert r.status_code == 201, r.text
    adv = rt.store.create_advertiser("Alpha")
    c = rt.store.create_campaign(
        advertiser_id=adv.id, name="one", objective="impressions", bid_type="CPM",
        bid_micros=900_000_000, daily_budget_micros=10**10, time_zone="UTC",
        flight_start=date(2026, 7, 1), billable_event="rendered")
    rt.store.create_ad(campaign_id=c.id, landing_url="https://a.example/", creative_ref="x",
                       format="banner", width=300, height=250)
    slots = [{"id": "a", "position": 1, "width": 300, "height": 250,
              "reserve_cpm_micros": 500_000_000},
             {"id": "h", "position": 2, "width": 728, "height": 90}]
    for i in range(3):
        r = client.post("/v1/ads:select", json={
            "request_id": f"r{i}", "user": {"key": f"u{i}"}, "placement": {"id": "feed"},
            "slots": slots, "deadline_ms": 5_000})
        assert r.status_code == 200, r.text
        for ad in r.json()["ads"]:
            assert client.get(ad["impression_url"],
                              headers={"user-agent": "Mozilla/5.0"}).status_code == 204
    assert rt.events.settle()
    r = client.put("/v1/admin/clock", headers=auth, json={"now": "2026-07-15T09:10:00+00:00"})
    assert r.status_code == 200, r.text


def _text(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', html)
    assert found, element_id
    return found.group(1)


def test_the_placement_page_shows_the_reports_figures_in_the_servers_currency(
        client: TestClient, rt: Runtime) -> None:
    """The list links ``feed``; its page shows the API report's totals, its tiers and its
    day, money in EUR, as every dashboard page does. Mutation that turns it red: the
    money filter without the server's currency (the campaigns list's bid)."""
    _traffic(client, rt)
    api = client.get("/v1/placements/feed/report",
                     headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    assert (api["requests"], api["filled_slots"], api["currency"]) == (3, 6, "EUR")
    assert api["by_tier"]["house"]["filled_slots"] == 3 and api["impressions"] == 3
    log_in(client, ADMIN_KEY)
    listed = client.get("/ui/placements")
    assert listed.status_code == 200 and 'href="/ui/placements/feed"' in listed.text
    assert '<td class="auction-type">second price</td>' in listed.text  # the default
    campaigns = client.get("/ui/campaigns").text
    assert 'href="/ui/placements"' in campaigns  # the nav links it
    assert "900.00 EUR CPM" in campaigns  # every page names the server's currency
    page = client.get("/ui/placements/feed")
    assert page.status_code == 200, page.text
    html = page.text
    assert _text(html, "total-requests") == "3" and _text(html, "total-filled") == "6"
    assert _text(html, "total-fill-rate") == "100.0%"
    assert _text(html, "total-impressions") == "3"
    revenue = api["revenue_micros"]
    assert revenue > 0
    units = f"{revenue // 10**6:,}.{revenue % 10**6 // 10**4:02d}"
    assert _text(html, "total-revenue") == f"{units} EUR"
    assert _text(html, "currency") == "EUR"
    assert 'data-tier="house"' in html and 'data-period="2026-07-15"' in html
    hourly = client.get("/ui/placements/feed", params={"granularity": "hour"}).text
    assert 'data-period="2026-07-15T09:00:00Z"' in hourly  # UTC hours: "Z"


def test_placement_pages_are_the_admins_and_show_the_apis_errors(
        client: TestClient, rt: Runtime) -> None:
    """An advertiser's session gets 403 on both pages; a bad time zone shows the API's
    error naming ``time_zone``; an unknown placement is 404. Mutation that turns it red:
    the pages without their admin check while the API lets advertiser keys into
    ``/v1/placements`` (the pages read as the viewer, so either guard alone holds)."""
    _traffic(client, rt)
    adv = rt.store.create_advertiser("Beta")
    log_in(client, rt.keys.issue("advertiser", adv.id).key)
    assert client.get("/ui/placements").status_code == 403
    assert client.get("/ui/placements/feed").status_code == 403
    log_in(client, ADMIN_KEY)
    bad = client.get("/ui/placements/feed", params={"time_zone": "Mars/Olympus"})
    assert bad.status_code == 422 and "time_zone" in _text(bad.text, "report-errors")
    assert client.get("/ui/placements/nowhere").status_code == 404
