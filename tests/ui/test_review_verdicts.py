"""The dashboard's review verdicts are bound to the ad the reviewer was shown: the queue's
approve and reject forms carry the version of the ad on the page, so an advertiser's
edit between the page and the click is refused (409), never approved unseen."""

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
from adfunnel.ui.session import COOKIE

START = datetime(2026, 7, 15, 9, 0, tzinfo=UTC)
ADMIN_KEY = "ui-review-admin-key-0123456789abcdefghij"


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    runtime = build_runtime(settings, ManualClock(START), seed=1)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(rt), follow_redirects=False) as c:
        yield c


def verdict_form(page: str, ad_id: int, verdict: str) -> dict[str, str]:
    """The hidden fields of the queue's ``verdict`` form of ``ad_id``: what a browser posts."""
    form = re.search(rf'<form[^>]*action="/ui/review/{ad_id}/{verdict}"[^>]*>(.*?)</form>',
                     page, re.S)
    assert form is not None, page
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"',
                           form.group(1)))


@pytest.mark.parametrize("verdict", ["approve", "reject"])
def test_a_verdict_applies_to_the_ad_the_reviewer_saw(rt: Runtime, client: TestClient,
                                                      verdict: str) -> None:
    """The advertiser swaps the landing URL (and so what a click leads to) after the
    reviewer opened the queue: the reviewer's click on Approve approved the new, unseen
    URL, since the form sent no version. Now it is refused with 409 and shown again."""
    advertiser = rt.store.create_advertiser("Alpha")
    campaign = rt.store.create_campaign(
        advertiser_id=advertiser.id, name="c", objective="clicks", bid_type="CPM",
        bid_micros=2_000_000, daily_budget_micros=10_000_000, time_zone="UTC",
        flight_start=date(2026, 7, 1))
    ad = rt.store.create_ad(campaign_id=campaign.id, landing_url="https://shop.example/",
                            creative_ref="banner.png", format="banner", width=300,
                            height=250, review_state="pending_review")
    advertiser_key = rt.keys.issue("advertiser", advertiser.id).key
    r = client.post("/ui/login", data={"api_key": rt.keys.issue("reviewer").key})
    client.cookies.set(COOKIE, r.cookies[COOKIE], path="/ui")
    page = client.get("/ui/review").text
    assert "https://shop.example/" in page

    swapped = client.patch(f"/v1/ads/{ad.id}", json={"landing_url": "https://evil.example/"},
                           headers={"Authorization": f"Bearer {advertiser_key}"})
    assert swapped.status_code == 200, swapped.text

    r = client.post(f"/ui/review/{ad.id}/{verdict}", data=verdict_form(page, ad.id, verdict))
    assert r.status_code == 409, r.text
    assert "https://evil.example/" in r.text  # the queue again, with what the ad shows now
    assert rt.store.get_ad(ad.id).review_state.value == "pending_review"

    again = client.post(f"/ui/review/{ad.id}/{verdict}", data=verdict_form(r.text, ad.id, verdict))
    assert again.status_code == 303, again.text
    expected = "approved" if verdict == "approve" else "rejected"
    assert rt.store.get_ad(ad.id).review_state.value == expected


def test_the_queue_shows_what_each_ad_shows(rt: Runtime, client: TestClient) -> None:
    """The queue showed an ad's ``creative_ref``, format, size and landing URL only: an
    html ad's markup, an image's URL and a native ad's texts (and the declared categories
    and domains block lists judge) were approved without a reviewer ever seeing them.
    Now each is on the page, as text."""
    advertiser = rt.store.create_advertiser("Alpha")
    campaign = rt.store.create_campaign(
        advertiser_id=advertiser.id, name="c", objective="clicks", bid_type="CPM",
        bid_micros=2_000_000, daily_budget_micros=10_000_000, time_zone="UTC",
        flight_start=date(2026, 7, 1))
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    ads = [
        {"format": "html", "width": 300, "height": 250,
         "creative": {"type": "html", "markup": "<script>steal()</script>"}},
        {"format": "banner", "width": 300, "height": 250, "adomain": ["shop.example"],
         "categories": ["IAB7"],
         "creative": {"type": "image", "url": "https://cdn.example/b.png", "width": 300,
                      "height": 250, "alt": "Sale"}},
        {"format": "native", "width": 1, "height": 1,
         "creative": {"type": "native", "title": "Miracle cure", "body": "b",
                      "sponsor": "s", "cta": "Buy"}},
    ]
    for ad in ads:
        r = client.post(f"/v1/campaigns/{campaign.id}/ads", headers=headers,
                        json={**ad, "landing_url": "https://shop.example/",
                              "review_state": "pending_review"})
        assert r.status_code == 201, r.text
    r = client.post("/ui/login", data={"api_key": rt.keys.issue("reviewer").key})
    client.cookies.set(COOKIE, r.cookies[COOKIE], path="/ui")
    page = client.get("/ui/review").text
    for shown in ("&lt;script&gt;steal()&lt;/script&gt;", "https://cdn.example/b.png",
                  "shop.example", "IAB7", "Miracle cure", "Buy"):
        assert shown in page, shown
    assert "<script>steal()" not in page  # text, never markup
