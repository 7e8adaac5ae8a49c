"""The operator API: placements (create, read, patch with versions) and ad quality.

Every refusal is a 4xx JSON body naming the field; advertisers cannot set quality.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.sql_store import SqlCampaignStore
from tests.campaigns.test_api import ad_body, assert_invalid, campaign_body

HOUSE: dict[str, Any] = {
    "creative_ref": "house/app.png", "landing_url": "https://operator.test/app?src=house",
    "format": "banner", "width": 300, "height": 250,
}


def placement_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "feed-top",
        "name": "Feed, top",
        "reserve_cpm_micros": 500_000,
        "country_reserves_cpm_micros": {"us": 2_000_000, "DE": 1_000_000},
        "allowed_sizes": ["300x250", "728x90"],
        "allowed_formats": ["banner"],
        "house_ad": HOUSE,
    }
    body.update(over)
    return body


@pytest.fixture
def placement(client: TestClient) -> dict[str, Any]:
    r = client.post("/v1/placements", json=placement_body())
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture
def ad(client: TestClient) -> dict[str, Any]:
    adv = client.post("/v1/advertisers", json={"name": "Acme"}).json()
    camp = client.post("/v1/campaigns", json=campaign_body(adv["id"])).json()
    r = client.post(f"/v1/campaigns/{camp['id']}/ads", json=ad_body())
    assert r.status_code == 201, r.text
    return r.json()


# --- placements --------------------------------------------------------------------------


@pytest.mark.slow
def test_placement_create_read_list(
    client: TestClient, placement: dict[str, Any], store: SqlCampaignStore
) -> None:
    assert placement == {
        "id": "feed-top", "name": "Feed, top", "reserve_cpm_micros": 500_000,
        "country_reserves_cpm_micros": {"DE": 1_000_000, "US": 2_000_000},  # codes upper-cased
        "allowed_sizes": ["300x250", "728x90"], "allowed_formats": ["banner"],
        "house_ad": HOUSE, "version": 1, "allowed_origins": [], "auction_type": "second_price",
    }
    assert client.get("/v1/placements/feed-top").json() == placement
    assert client.get("/v1/placements").json()["items"] == [placement]
    assert store.get_placement("feed-top").reserve_for(["US"]) == 2_000_000


def test_placement_allowed_origins_are_stored_and_patched(
    client: TestClient, store: SqlCampaignStore
) -> None:
    r = client.post("/v1/placements", json={"id": "p", "name": "P", "allowed_origins": [
        "https://News.Example", "http://localhost:8080", "https://[::1]:443"]})
    assert r.status_code == 201, r.text
    assert r.json()["allowed_origins"] == ["https://news.example", "http://localhost:8080",
                                           "https://[::1]"]
    assert store.get_placement("p").allowed_origins == (
        "https://news.example", "http://localhost:8080", "https://[::1]")
    r = client.patch("/v1/placements/p", json={"allowed_origins": ["https://b.example"]})
    assert r.json()["allowed_origins"] == ["https://b.example"], r.text
    assert store.get_placement("p").allowed_origins == ("https://b.example",)
    r = client.patch("/v1/placements/p", json={"allowed_origins": ["https://b.example"] * 2})
    assert r.status_code == 422
    with pytest.raises(InvalidChange, match="allowed_origins"):  # the store checks too
        store.update_placement("p", {"allowed_origins": ("https://B.example/",)})


def test_minimal_placement_allows_everything(client: TestClient) -> None:
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["reserve_cpm_micros"] == 0 and body["country_reserves_cpm_micros"] == {}
    assert body["allowed_sizes"] == body["allowed_formats"] == [] and body["house_ad"] is None


@pytest.mark.slow
def test_duplicate_placement_id_is_409(client: TestClient, placement: dict[str, Any]) -> None:
    r = client.post("/v1/placements", json=placement_body(name="again"))
    assert_invalid(r, "id", status=409)
    assert r.json()["error"] == "conflict"
    assert client.get("/v1/placements/feed-top").json() == placement


def test_unknown_placement_is_404(client: TestClient) -> None:
    for path in ("/v1/placements/nope", "/v1/placements/bad%20id"):
        r = client.get(path)
        assert r.status_code == 404 and r.json()["error"] == "not_found"
    assert client.patch("/v1/placements/nope", json={"name": "x"}).status_code == 404


def test_patch_with_version_and_conflict(client: TestClient, placement: dict[str, Any]) -> None:
    r = client.patch("/v1/placements/feed-top",
                     json={"version": 1, "country_reserves_cpm_micros": {"FR": 3_000_000}})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 2
    assert r.json()["country_reserves_cpm_micros"] == {"FR": 3_000_000}
    r = client.patch("/v1/placements/feed-top", json={"version": 1, "name": "late"})
    assert r.status_code == 409 and r.json()["error"] == "version_conflict"
    r = client.patch("/v1/placements/feed-top", json={"house_ad": None})
    assert r.status_code == 200 and r.json()["house_ad"] is None and r.json()["version"] == 3
    assert_invalid(client.patch("/v1/placements/feed-top", json={"name": None}), "name")
    assert_invalid(client.patch("/v1/placements/feed-top", json={"version": 3}), "body")
    assert_invalid(client.patch("/v1/placements/feed-top", json={"id": "x"}), "id")
    assert client.get("/v1/placements/feed-top").json()["name"] == "Feed, top"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"id": "feed/top"}, "id"),
        ({"id": ""}, "id"),
        ({"name": "  "}, "name"),
        ({"colour": "red"}, "colour"),
        ({"reserve_cpm_micros": 1.5}, "reserve_cpm_micros"),
        ({"reserve_cpm_micros": -1}, "reserve_cpm_micros"),
        ({"reserve_cpm_micros": "100"}, "reserve_cpm_micros"),
        ({"reserve_cpm_micros": 10**12 + 1}, "reserve_cpm_micros"),
        ({"country_reserves_cpm_micros": {"UK": 1}}, "country_reserves_cpm_micros"),
        ({"country_reserves_cpm_micros": {"us": 1, "US": 2}}, "country_reserves_cpm_micros"),
        ({"country_reserves_cpm_micros": {"US": -1}}, "country_reserves_cpm_micros.US"),
        ({"country_reserves_cpm_micros": {"US": 0.5}}, "country_reserves_cpm_micros.US"),
        ({"allowed_sizes": ["300"]}, "allowed_sizes[0]"),
        ({"allowed_sizes": ["300x250", "300x250"]}, "allowed_sizes"),
        ({"allowed_formats": [""]}, "allowed_formats[0]"),
        ({"allowed_sizes": ["728x90"]}, "house_ad"),  # the house ad would not fit
        ({"house_ad": {**HOUSE, "landing_url": "javascript:alert(1)"}}, "house_ad.landing_url"),
        ({"house_ad": {**HOUSE, "width": 0}}, "house_ad.width"),
        ({"house_ad": {"creative_ref": "x"}}, "house_ad.landing_url"),
    ],
)
def test_bad_placement_fields_are_named(
    client: TestClient, store: SqlCampaignStore, over: dict[str, Any], field: str
) -> None:
    assert_invalid(client.post("/v1/placements", json=placement_body(**over)), field)
    assert store.list_placements() == []


# --- ad quality -----------------------------------------------------------------------


def test_quality_is_an_operator_setting(
    client: TestClient, ad: dict[str, Any], store: SqlCampaignStore
) -> None:
    assert ad["quality_micros"] == 0
    # the advertiser routes refuse it
    campaign_id = ad["campaign_id"]
    r = client.post(f"/v1/campaigns/{campaign_id}/ads", json=ad_body(quality_micros=5))
    assert assert_invalid(r, "quality_micros") == "unknown field"
    assert_invalid(client.patch(f"/v1/ads/{ad['id']}", json={"quality_micros": 5}),
                   "quality_micros")
    # the operator route sets it, signed, with versions
    r = client.put(f"/v1/ads/{ad['id']}/quality", json={"quality_micros": -1_500, "version": 1})
    assert r.status_code == 200, r.text
    assert (r.json()["quality_micros"], r.json()["version"]) == (-1_500, 2)
    assert client.get(f"/v1/ads/{ad['id']}").json()["quality_micros"] == -1_500
    assert store.get_ad(ad["id"]).quality_micros == -1_500
    r = client.put(f"/v1/ads/{ad['id']}/quality", json={"quality_micros": 1, "version": 1})
    assert r.status_code == 409 and r.json()["error"] == "version_conflict"
    assert client.put("/v1/ads/999/quality", json={"quality_micros": 1}).status_code == 404


@pytest.mark.slow
@pytest.mark.parametrize("bad", [0.5, "7", True, None, 10**9 + 1, -(10**9) - 1])
def test_bad_quality_is_named(client: TestClient, ad: dict[str, Any], bad: Any) -> None:
    assert_invalid(client.put(f"/v1/ads/{ad['id']}/quality", json={"quality_micros": bad}),
                   "quality_micros")
    assert client.get(f"/v1/ads/{ad['id']}").json()["quality_micros"] == 0


def test_placement_auction_type_is_set_patched_and_checked(
        client: TestClient, store: SqlCampaignStore) -> None:
    """A placement prices first or second price (#27), stored and shown. Red when
    PlacementOut leaves ``auction_type`` out."""
    r = client.post("/v1/placements", json={"id": "fp", "name": "First price",
                                            "auction_type": "first_price"})
    assert r.status_code == 201, r.text
    assert r.json()["auction_type"] == "first_price"
    assert store.get_placement("fp").auction_type == "first_price"
    r = client.patch("/v1/placements/fp", json={"auction_type": "second_price"})
    assert (r.json()["auction_type"], r.json()["version"]) == ("second_price", 2)
    assert_invalid(client.patch("/v1/placements/fp", json={"auction_type": "vickrey"}),
                   "auction_type")
