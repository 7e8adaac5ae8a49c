"""The dashboard in a real browser (Playwright driving Debian's Chromium) against a real
``adfunnel serve`` process (embedded SQLite, manual clock, admin key from
``ADFUNNEL_ADMIN_KEY``).

One walk through the product: an advertiser creates a campaign and an ad and sees it
pending; a reviewer approves it; ad requests and impression beacons go to the server
over HTTP; the advertiser sees the spend and the pacing chart's data points, pauses
the campaign and sees its status change. With ``ADFUNNEL_SCREENSHOT_DIR`` set, the
main pages are saved there as PNG (``docs/img/`` in the README).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from adfunnel.sim.server_proc import ServerProcess

pytestmark = pytest.mark.e2e

CHROMIUM = os.environ.get("ADFUNNEL_CHROMIUM", "/usr/bin/chromium")
ADMIN_KEY = "ui-browser-test-admin-key-0123456789abcdef"
START = datetime(2026, 7, 15, 9, 0, tzinfo=UTC)
#: A browser's user agent for the beacons (httpx's own is on the crawler list: not billed).
BROWSER_UA = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/131.0.0.0 Safari/537.36")


def _chromium() -> str:
    if shutil.which(CHROMIUM) is None:
        if os.environ.get("ADFUNNEL_REQUIRE_SERVICES"):
            pytest.fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    return CHROMIUM


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {"ADFUNNEL_ADMIN_KEY": ADMIN_KEY, "ADFUNNEL_TOKEN_SECRET": "t" * 40,
           "ADFUNNEL_SEED": "3"}
    with ServerProcess(f"sqlite:///{tmp_path / 'ui.sqlite3'}", clock="manual",
                       extra_env=env, log_path=tmp_path / "server.log") as proc:
        yield proc


class Admin:
    """The operator's side of the test, over the API with the bootstrap admin key."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10.0,
                                 headers={"Authorization": f"Bearer {ADMIN_KEY}"})

    def set_clock(self, at: datetime) -> None:
        r = self.http.put("/v1/admin/clock", json={"now": at.isoformat()})
        assert r.status_code == 200, r.text

    def key(self, role: str, advertiser_id: int | None = None) -> str:
        body = {"role": role, **({"advertiser_id": advertiser_id} if advertiser_id else {})}
        r = self.http.post("/v1/api-keys", json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["key"])


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[Admin]:
    """The operator's client, closed after the test (its sockets with it)."""
    a = Admin(server.url)
    yield a
    a.http.close()


def ad_request(user: str, **extra: object) -> dict[str, object]:
    return {"user": {"key": user, "attributes": {"geo.country": "US"}},
            "placement": {"id": "feed-top", "reserve_cpm_micros": 2_000_000},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
            "deadline_ms": 2000, **extra}


def send_traffic(url: str, admin: Admin, campaign_id: int, *, requests: int,
                 start: datetime, step: timedelta) -> int:
    """Ad requests for the 300×250 slot, each won impression's beacons sent (real HTTP,
    no key: the routes are open; rendered and viewable); the clock moves ``step`` after
    each request so the budget service runs its control steps. Returns the impressions sent."""
    sent = 0
    with httpx.Client(base_url=url, timeout=10.0, headers={"User-Agent": BROWSER_UA}) as http:
        for i in range(requests):
            admin.set_clock(start + i * step)
            r = http.post("/v1/ads:select", json=ad_request(f"user-{i}"))
            if r.status_code != 200:
                continue
            for ad in r.json()["ads"]:
                assert ad["campaign_id"] == campaign_id
                assert http.get(ad["impression_url"]).status_code == 204
                # in view, as the tag reports it: bills whatever the billable event
                assert http.get(ad["viewable_url"]).status_code == 204
                sent += 1
    admin.set_clock(start + requests * step)  # settles the events: billed in the ledger
    return sent


def test_advertiser_reviewer_walkthrough(server: ServerProcess, admin: Admin,
                                        tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    chromium = _chromium()
    shots = os.environ.get("ADFUNNEL_SCREENSHOT_DIR")
    admin.set_clock(START)
    advertiser = admin.http.post("/v1/advertisers", json={"name": "Northwind"}).json()
    advertiser_key = admin.key("advertiser", advertiser["id"])
    reviewer_key = admin.key("reviewer")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(15_000)

        def log_in(key: str) -> None:
            page.goto(f"{server.url}/ui/login")
            page.fill("#api_key", key)
            page.click("button[type=submit]")

        def shot(name: str) -> None:
            if shots:
                page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)

        # 1. the advertiser creates a campaign and an ad
        log_in(advertiser_key)
        expect(page).to_have_url(f"{server.url}/ui/campaigns")
        page.click("#new-campaign summary")
        page.fill("#nc-name", "Autumn launch")
        page.select_option("#nc-bid-type", "CPM")
        page.fill("#nc-bid", "4.00")
        page.fill("#nc-budget", "0.50")
        page.click("#new-campaign button[type=submit]")
        expect(page.locator("h1")).to_contain_text("Autumn launch")
        campaign_id = int(page.url.rsplit("/", 1)[1])
        page.fill("#ad-url", "https://northwind.example/autumn")
        page.fill("#ad-creative", "autumn-300x250.png")
        page.click("#ad-form button[type=submit]")

        # 2. the ad waits for review; nothing can serve
        review = page.locator("#ads [data-review]")
        expect(review).to_have_attribute("data-review", "pending_review")
        expect(page.locator("#delivery-status [data-status]")).to_have_attribute(
            "data-status", "no_approved_ads")

        # 3. the reviewer approves it
        page.click("header .who button")
        log_in(reviewer_key)
        expect(page).to_have_url(f"{server.url}/ui/review")
        row = page.locator("#review-queue tr[data-ad-id]")
        expect(row).to_have_count(1)
        shot("review-queue")
        row.locator("button.approve").click()
        expect(page.locator("#review-queue tr[data-ad-id]")).to_have_count(0)

        # 4. traffic: ad requests and impression beacons over HTTP
        impressions = send_traffic(server.url, admin, campaign_id, requests=40,
                                   start=START + timedelta(minutes=1),
                                   step=timedelta(minutes=3))
        assert impressions > 0

        # 5. the advertiser sees spend and the pacing chart's data
        page.click("header .who button")
        log_in(advertiser_key)
        total = page.locator("#hourly tfoot th.num").first
        for _ in range(60):  # the rollups behind the hourly table refresh every few seconds
            page.goto(f"{server.url}/ui/campaigns/{campaign_id}")
            if total.text_content() == str(impressions):
                break
            page.wait_for_timeout(250)
        expect(total).to_have_text(str(impressions))  # every beacon, hour by hour
        expect(page.locator("#ads [data-review]")).to_have_attribute("data-review", "approved")
        expect(page.locator("#pacing-chart[data-rendered=true] canvas")).to_have_count(1)
        chart = json.loads(page.locator("#pacing-data").text_content() or "{}")
        assert chart["campaign_id"] == campaign_id
        spend = [v for v in chart["spend_micros"] if v is not None]
        assert spend[0] == 0 and spend[-1] > 0  # cumulative spend from midnight to now
        assert spend == sorted(spend)
        assert chart["budget_micros"] == 500_000 and max(spend) <= 500_000 * 1.05
        targets = [v for v in chart["target_micros"] if v is not None]
        assert len(targets) == len(chart["hours"]) and targets == sorted(targets)
        assert targets[-1] == pytest.approx(500_000, rel=1e-6)
        ps = [v for v in chart["p"] if v is not None]
        assert ps and all(0 < p <= 1 for p in ps)
        shot("campaign")
        page.goto(f"{server.url}/ui/campaigns")
        listed = page.locator(f"#campaigns tr[data-campaign-id='{campaign_id}']")
        expect(listed).to_contain_text("Autumn launch")
        assert "0.00 /" not in (listed.locator(".spend").text_content() or "")

        # 6. pause it and see the status change
        page.goto(f"{server.url}/ui/campaigns/{campaign_id}")
        page.click("#pause-button")
        expect(page.locator("#delivery-status [data-status]")).to_have_attribute(
            "data-status", "paused")
        expect(page.locator("#campaign-status")).to_have_text("paused")
        page.goto(f"{server.url}/ui/campaigns")
        expect(listed.locator("[data-status]")).to_have_attribute("data-status", "paused")

        # the operator's view: every advertiser, and one decision explained
        other = admin.http.post("/v1/advertisers", json={"name": "Contoso"}).json()
        rival = admin_campaign(admin, other["id"], "Contoso always-on")
        admin_campaign(admin, other["id"], "Contoso France only",
                       targeting={"attr": "geo.country", "in": ["FR"]})
        explained = httpx.post(f"{server.url}/v1/ads:select",
                               json=ad_request("explained", request_id="ui-explain-1",
                                               explain=True),
                               headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
        assert explained["ads"][0]["campaign_id"] == rival
        admin.set_clock(START + timedelta(hours=2, minutes=5))  # the serve reaches the service
        page.click("header .who button")
        log_in(ADMIN_KEY)
        expect(page.locator("#campaigns tr[data-campaign-id]")).to_have_count(3)
        shot("campaigns-admin")
        page.goto(f"{server.url}/ui/explain")
        page.fill("#request_id", "ui-explain-1")
        page.click("form.inline button")
        expect(page.locator("#explain-placed tbody")).to_contain_text(f"#{rival}")
        expect(page.locator("#explain-rejections tbody")).to_contain_text("paused")
        shot("explainer")
        browser.close()


def admin_campaign(admin: Admin, advertiser_id: int, name: str, **extra: object) -> int:
    """A campaign with one approved 300×250 ad, made by the admin over the API."""
    body = {"advertiser_id": advertiser_id, "name": name, "objective": "clicks",
            "bid_type": "CPM", "bid_micros": 3_000_000, "daily_budget_micros": 5_000_000,
            "time_zone": "UTC", "flight_start": START.date().isoformat(), **extra}
    r = admin.http.post("/v1/campaigns", json=body)
    assert r.status_code == 201, r.text
    cid = int(r.json()["id"])
    r = admin.http.post(f"/v1/campaigns/{cid}/ads", json={
        "landing_url": "https://contoso.example/", "creative_ref": f"{cid}.png",
        "format": "banner", "width": 300, "height": 250, "review_state": "approved"})
    assert r.status_code == 201, r.text
    return cid
