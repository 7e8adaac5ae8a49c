"""An ad's ``creative`` through the advertiser API on a real SQLite store: each type's
fields validated on create and on edit (422 naming ``creative.<field>``), the round trip,
texts kept verbatim, and an advertiser's change of the creative sending the ad back to
review. ``creative_ref`` alone keeps working as before."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.campaigns.test_api import assert_invalid

IMAGE: dict[str, Any] = {"type": "image", "url": "https://cdn.test/a.png", "width": 600,
                         "height": 500, "alt": "A red car"}
NATIVE: dict[str, Any] = {"type": "native", "title": "<script>alert(1)</script>",
                          "body": "Two lines\nof <b>body</b>", "sponsor": "Acme",
                          "cta": "Shop now", "icon_url": "https://cdn.test/i.png"}
HTML: dict[str, Any] = {"type": "html", "markup": "<div onclick='x()'>hi</div>"}


@pytest.fixture
def campaign(client: TestClient) -> dict[str, Any]:
    adv = client.post("/v1/advertisers", json={"name": "Acme"}).json()
    r = client.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 1_000_000, "daily_budget_micros": 10**9,
        "time_zone": "UTC", "flight_start": "2026-11-01"})
    assert r.status_code == 201, r.text
    return r.json()


def ad_body(**over: Any) -> dict[str, Any]:
    body = {"landing_url": "https://x.test/", "format": "banner", "width": 300, "height": 250}
    body.update(over)
    return {k: v for k, v in body.items() if v is not None}


def create(client: TestClient, campaign: dict[str, Any], **over: Any) -> Any:
    return client.post(f"/v1/campaigns/{campaign['id']}/ads", json=ad_body(**over))


@pytest.mark.parametrize(("creative", "fmt"), [(IMAGE, "banner"), (NATIVE, "native"),
                                               (HTML, "html")])
def test_each_type_round_trips_verbatim(client: TestClient, campaign: dict[str, Any],
                                        creative: dict[str, Any], fmt: str) -> None:
    r = create(client, campaign, creative=creative, format=fmt)
    assert r.status_code == 201, r.text
    assert r.json()["creative"] == creative and r.json()["creative_ref"] == ""
    got = client.get(f"/v1/ads/{r.json()['id']}").json()
    assert got == r.json()  # stored and read back byte-identical, markup as data


def test_creative_ref_alone_works_as_before_and_both_may_be_given(
        client: TestClient, campaign: dict[str, Any]) -> None:
    old = create(client, campaign, creative_ref="cr/1.png")
    assert old.status_code == 201 and old.json()["creative"] is None
    both = create(client, campaign, creative_ref="cr/2.png", creative=IMAGE)
    assert both.status_code == 201
    assert both.json()["creative_ref"] == "cr/2.png" and both.json()["creative"] == IMAGE
    assert_invalid(create(client, campaign), "creative_ref")  # neither


BAD: list[tuple[dict[str, Any], str]] = [
    ({**NATIVE, "title": "t" * 91}, "creative.title"),
    ({**NATIVE, "body": "b" * 201}, "creative.body"),
    ({k: v for k, v in NATIVE.items() if k != "sponsor"}, "creative.sponsor"),
    ({k: v for k, v in NATIVE.items() if k != "cta"}, "creative.cta"),
    ({**NATIVE, "title": " "}, "creative.title"),
    ({**NATIVE, "title": "a\x07b"}, "creative.title"),
    ({**NATIVE, "image_url": "javascript:alert(1)"}, "creative.image_url"),
    ({**NATIVE, "markup": "<p>"}, "creative.markup"),  # a field of another type
    ({**IMAGE, "url": "ftp://cdn.test/a.png"}, "creative.url"),
    ({k: v for k, v in IMAGE.items() if k != "url"}, "creative.url"),  # neither url nor id
    ({**IMAGE, "upload_id": "abc"}, "creative.url"),  # both
    ({**IMAGE, "url": "/creatives/files/" + "a" * 64 + ".png"}, "creative.url"),  # an
    ({**IMAGE, "url": "/v1/keys"}, "creative.url"),  # upload's path is the server's to set
    ({**IMAGE, "width": 0}, "creative.width"),
    ({**IMAGE, "height": "250"}, "creative.height"),
    ({k: v for k, v in IMAGE.items() if k != "alt"}, "creative.alt"),
    ({"type": "video", "url": "https://v.test/"}, "creative.type"),
    ({"type": "html"}, "creative.markup"),
    ({**HTML, "unknown": 1}, "creative.unknown"),
]


@pytest.mark.parametrize(("creative", "field"), BAD)
def test_bad_creatives_name_the_field_on_create_and_edit(
        client: TestClient, campaign: dict[str, Any], creative: dict[str, Any],
        field: str) -> None:
    fmt = "html" if creative.get("type") == "html" else "banner"
    assert_invalid(create(client, campaign, creative=creative, format=fmt), field)
    ad = create(client, campaign, creative_ref="cr/1.png", format=fmt).json()
    assert_invalid(client.patch(f"/v1/ads/{ad['id']}", json={"creative": creative}), field)
    assert client.get(f"/v1/ads/{ad['id']}").json()["creative"] is None  # nothing written


def test_html_needs_the_html_format(client: TestClient, campaign: dict[str, Any]) -> None:
    assert_invalid(create(client, campaign, creative=HTML), "format")
    ad = create(client, campaign, creative=HTML, format="html").json()
    assert_invalid(client.patch(f"/v1/ads/{ad['id']}", json={"format": "banner"}), "format")


def test_an_unknown_upload_is_named(client: TestClient, campaign: dict[str, Any]) -> None:
    image = {k: v for k, v in IMAGE.items() if k != "url"} | {"upload_id": "f" * 64}
    assert_invalid(create(client, campaign, creative=image), "creative.upload_id")


def test_edit_replaces_and_removes_the_creative(client: TestClient,
                                                campaign: dict[str, Any]) -> None:
    ad = create(client, campaign, creative_ref="cr/1.png", creative=IMAGE).json()
    r = client.patch(f"/v1/ads/{ad['id']}", json={"creative": NATIVE, "version": 1})
    assert r.status_code == 200 and r.json()["creative"] == NATIVE and r.json()["version"] == 2
    r = client.patch(f"/v1/ads/{ad['id']}", json={"creative": None})
    assert r.status_code == 200 and r.json()["creative"] is None
    only = create(client, campaign, creative=IMAGE).json()  # no creative_ref to fall back on
    assert_invalid(client.patch(f"/v1/ads/{only['id']}", json={"creative": None}),
                   "creative_ref")


def test_an_advertisers_new_creative_goes_back_to_review(
        client: TestClient, campaign: dict[str, Any]) -> None:
    keys = client.app.state.api_keys  # type: ignore[attr-defined]
    mine = {"Authorization": f"Bearer {keys.issue('advertiser', campaign['advertiser_id']).key}"}
    ad = create(client, campaign, creative=IMAGE).json()
    assert ad["review_state"] == "approved"  # the admin's
    r = client.patch(f"/v1/ads/{ad['id']}", json={"status": "paused"}, headers=mine)
    assert r.json()["review_state"] == "approved"  # not a change of what it shows
    r = client.patch(f"/v1/ads/{ad['id']}", json={"creative": NATIVE}, headers=mine)
    assert r.status_code == 200, r.text
    assert r.json()["review_state"] == "pending_review"


def test_a_missing_field_is_named_with_its_creatives_type(client: TestClient,
                                                          campaign: dict[str, Any]) -> None:
    no_alt = {k: v for k, v in IMAGE.items() if k != "alt"}
    assert assert_invalid(create(client, campaign, creative=no_alt), "creative.alt") == (
        "is required in an image creative")
    no_sponsor = {k: v for k, v in NATIVE.items() if k != "sponsor"}
    assert assert_invalid(create(client, campaign, creative=no_sponsor),
                          "creative.sponsor") == "is required in a native creative"
