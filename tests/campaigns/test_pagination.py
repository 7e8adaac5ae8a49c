"""Cursor pagination of every list route, the refusal of unknown query parameters, and
``Location`` on every 201 — over the campaign and operator APIs (admin key)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.api.pagination import decode_cursor, encode_cursor
from adfunnel.http_errors import ApiError

CAMPAIGN = {"name": "c", "objective": "impressions", "bid_type": "CPM",
            "bid_micros": 2_000_000, "daily_budget_micros": 100_000_000, "time_zone": "UTC",
            "flight_start": "2026-07-01"}
AD = {"landing_url": "https://x.test/", "creative_ref": "cr/1.png", "format": "banner",
      "width": 300, "height": 250}


def _walk(client: TestClient, path: str, limit: int, **params: Any) -> list[list[int | str]]:
    """Every page of a list, following next_cursor; the ids on each page."""
    pages: list[list[int | str]] = []
    body = client.get(path, params={**params, "limit": limit}).json()
    while True:
        pages.append([item.get("id", item.get("prefix")) for item in body["items"]])
        if body["next_cursor"] is None:
            return pages
        body = client.get(path, params={**params, "limit": limit,
                                        "cursor": body["next_cursor"]}).json()


@pytest.mark.slow
def test_every_list_pages_by_id_without_gaps_or_repeats(client: TestClient) -> None:
    adv = [client.post("/v1/advertisers", json={"name": f"a{i}"}).json()["id"]
           for i in range(5)]
    cids = [client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": adv[0]}).json()["id"]
            for _ in range(5)]
    ads = [client.post(f"/v1/campaigns/{cids[0]}/ads",
                       json={**AD, "review_state": "pending_review"}).json()["id"]
           for _ in range(5)]
    places = sorted(f"feed-{i}" for i in range(5))
    for p in places:
        client.post("/v1/placements", json={"id": p, "name": p})
    for path, ids in (("/v1/advertisers", adv), ("/v1/campaigns", cids),
                      (f"/v1/campaigns/{cids[0]}/ads", ads), ("/v1/review/ads", ads),
                      ("/v1/placements", places)):
        assert _walk(client, path, 2) == [ids[0:2], ids[2:4], ids[4:5]], path
        assert _walk(client, path, 5) == [ids], path
        assert _walk(client, path, 500) == [ids], path


@pytest.mark.slow
def test_a_page_after_new_rows_neither_skips_nor_repeats(client: TestClient) -> None:
    ids = [client.post("/v1/advertisers", json={"name": f"a{i}"}).json()["id"]
           for i in range(3)]
    first = client.get("/v1/advertisers", params={"limit": 2}).json()
    ids.append(client.post("/v1/advertisers", json={"name": "late"}).json()["id"])
    rest = client.get("/v1/advertisers", params={"limit": 2,
                                                 "cursor": first["next_cursor"]}).json()
    assert [a["id"] for a in first["items"] + rest["items"]] == ids


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["0", "501", "-1", "ten"])
def test_limit_out_of_bounds_is_refused_naming_it(client: TestClient, limit: str) -> None:
    r = client.get("/v1/campaigns", params={"limit": limit})
    assert r.status_code == 422
    assert [f["field"] for f in r.json()["fields"]] == ["limit"]


@pytest.mark.slow
@pytest.mark.parametrize("cursor", ["garbage", "", "eyJ4IjoxfQ",
                                    encode_cursor("placements", "feed"),
                                    encode_cursor("campaigns", "1")])
def test_a_cursor_of_another_list_or_no_cursor_at_all_is_refused(
        client: TestClient, cursor: str) -> None:
    r = client.get("/v1/campaigns", params={"cursor": cursor})
    assert r.status_code == 422
    assert r.json()["fields"] == [{"field": "cursor", "problem": "not a cursor of this list"}]


def test_cursors_round_trip() -> None:
    assert decode_cursor("campaigns", encode_cursor("campaigns", 41), int) == 41
    assert decode_cursor("placements", encode_cursor("placements", "a/b"), str) == "a/b"
    assert decode_cursor("campaigns", None, int) is None
    with pytest.raises(ApiError):
        decode_cursor("campaigns", encode_cursor("campaigns", True), int)


@pytest.mark.parametrize("path", ["/v1/advertisers", "/v1/campaigns", "/v1/placements",
                                  "/v1/campaigns/1", "/v1/campaigns/1/report",
                                  "/v1/review/ads", "/v1/admin/models"])
def test_an_unknown_query_parameter_gets_422_naming_it(client: TestClient, path: str) -> None:
    client.post("/v1/advertisers", json={"name": "a"})
    client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": 1})
    r = client.get(path, params={"limti": "5", "sort": "id"})
    assert r.status_code == 422, r.text
    assert r.json()["fields"] == [{"field": "limti", "problem": "unknown query parameter"},
                                  {"field": "sort", "problem": "unknown query parameter"}]


@pytest.mark.slow
def test_every_201_carries_a_location_that_answers(client: TestClient) -> None:
    created = [
        client.post("/v1/advertisers", json={"name": "a"}),
        client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": 1}),
        client.post("/v1/campaigns/1/ads", json=AD),
        client.post("/v1/placements", json={"id": "feed.top:1", "name": "top"}),
    ]
    for r in created:
        assert r.status_code == 201, r.text
        location = r.headers["location"]
        again = client.get(location)
        assert again.status_code == 200, location
        assert again.json()["id"] == r.json()["id"]


def test_each_route_is_judged_by_its_own_parameters() -> None:
    """Routes made and dropped one after another, each declaring another name: each
    is judged by its own (a cache by ``id(route)`` judged a new route by a dead one's
    names once the address was reused: a flaky 422 "unknown query parameter")."""
    from fastapi import Query
    from fastapi.routing import APIRoute

    from adfunnel.api.pagination import _declared

    for i in range(300):
        def endpoint(value: int = Query(0, alias=f"p{i}")) -> None: ...

        route = APIRoute("/a", endpoint)
        assert _declared(route) == frozenset({f"p{i}"})
        del route  # its address is free for the next one


@pytest.mark.parametrize(("path", "name"), [
    ("/v1/advertisers", "advertisers"), ("/v1/campaigns", "campaigns"),
    ("/v1/campaigns/1/ads", "ads-1"), ("/v1/review/ads", "review"),
    ("/v1/admin/models", "models")])
@pytest.mark.parametrize("key", [2**63, -(2**63) - 1, 10**30])
def test_a_forged_cursor_past_64_bits_is_refused_naming_it(
        client: TestClient, path: str, name: str, key: int) -> None:
    """A cursor is only base64 JSON, so a caller can forge one of its own list with a key
    past 64 bits: the keyset query then overflowed the database's integer (SQLite's
    OverflowError, a 500 with a traceback, for any advertiser or reviewer key)."""
    client.post("/v1/advertisers", json={"name": "a"})
    client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": 1})
    r = client.get(path, params={"cursor": encode_cursor(name, key)})
    assert r.status_code == 422, r.text
    assert r.json()["fields"] == [{"field": "cursor", "problem": "not a cursor of this list"}]


@pytest.mark.parametrize("advertiser_id", [2**63, 10**30, -(2**63) - 1])
def test_a_campaign_list_of_an_advertiser_id_past_64_bits_is_empty(
        client: TestClient, advertiser_id: int) -> None:
    """``?advertiser_id=`` names no advertiser past 64 bits (an empty list, as for any
    unknown id): it reached the query as it was and overflowed it (500)."""
    r = client.get("/v1/campaigns", params={"advertiser_id": str(advertiser_id)})
    assert r.status_code == 200, r.text
    assert r.json() == {"items": [], "next_cursor": None}


@pytest.mark.parametrize("model_id", [2**63, 2**64, -(2**63)])
def test_a_model_release_id_past_64_bits_is_not_found(client: TestClient,
                                                      model_id: int) -> None:
    """``GET /v1/admin/models/{id}`` of an id no release can have answers 404 naming it,
    as every other record's route does (it overflowed the keyset query: 500)."""
    r = client.get(f"/v1/admin/models/{model_id}")
    assert r.status_code == 404, r.text
    assert r.json()["fields"] == [{"field": "model_id", "problem": "not found"}]
