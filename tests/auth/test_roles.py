"""Roles over the embedded app: an advertiser key reaches only its own advertiser (404
for every other id, on every route family), reviewers review and change nothing else,
admin routes are the admin's, and a revoked key stops working at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api_keys import ADMIN_HEADERS

Headers = dict[str, str]
CAMPAIGN = {"name": "c", "objective": "impressions", "bid_type": "CPM",
            "bid_micros": 2_000_000, "daily_budget_micros": 100_000_000, "time_zone": "UTC",
            "flight_start": "2026-07-01"}
AD = {"landing_url": "https://x.test/", "creative_ref": "cr/1.png", "format": "banner",
      "width": 300, "height": 250}
SELECT = {"user": {"key": "u1"}, "placement": {"id": "feed"},
          "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]}


@dataclass
class Side:
    """One advertiser with a campaign and an ad (made by the admin), and its key."""

    advertiser: int
    campaign: int
    ad: int
    key: Headers


def _side(http: TestClient, key_for: Callable[..., Headers], name: str) -> Side:
    adv = http.post("/v1/advertisers", json={"name": name}, headers=ADMIN_HEADERS).json()["id"]
    c = http.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": adv},
                  headers=ADMIN_HEADERS).json()["id"]
    ad = http.post(f"/v1/campaigns/{c}/ads", json=AD, headers=ADMIN_HEADERS).json()["id"]
    return Side(adv, c, ad, key_for("advertiser", adv))


@pytest.fixture
def sides(http: TestClient, key_for: Callable[..., Headers]) -> tuple[Side, Side]:
    return _side(http, key_for, "a"), _side(http, key_for, "b")


def _routes(s: Side) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every advertiser-facing route family on ``s``'s ids: (method, path, body)."""
    return [
        ("GET", f"/v1/advertisers/{s.advertiser}", None),
        ("GET", f"/v1/advertisers/{s.advertiser}/report/rollups", None),
        ("GET", f"/v1/campaigns/{s.campaign}", None),
        ("PATCH", f"/v1/campaigns/{s.campaign}", {"name": "taken", "version": 1}),
        ("POST", f"/v1/campaigns/{s.campaign}:pause", None),
        ("POST", f"/v1/campaigns/{s.campaign}:resume", None),
        ("PUT", f"/v1/campaigns/{s.campaign}/budget", {"daily_budget_micros": 1}),
        ("GET", f"/v1/campaigns/{s.campaign}/report", None),
        ("GET", f"/v1/campaigns/{s.campaign}/report/rollups", None),
        ("POST", f"/v1/campaigns/{s.campaign}/ads", AD),
        ("GET", f"/v1/campaigns/{s.campaign}/ads", None),
        ("GET", f"/v1/ads/{s.ad}", None),
        ("PATCH", f"/v1/ads/{s.ad}", {"status": "paused"}),
    ]


def test_an_advertiser_key_gets_404_for_another_advertisers_ids(
        http: TestClient, sides: tuple[Side, Side]) -> None:
    mine, theirs = sides
    before = {p: http.get(p, headers=ADMIN_HEADERS).json()
              for p in (f"/v1/campaigns/{theirs.campaign}", f"/v1/ads/{theirs.ad}")}
    for method, path, body in _routes(theirs):
        r = http.request(method, path, json=body, headers=mine.key)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"] == "not_found" and r.json()["fields"]
    after = {p: http.get(p, headers=ADMIN_HEADERS).json() for p in before}
    assert after == before  # nothing of theirs changed
    for method, path, body in _routes(mine):  # the same routes on its own ids work
        r = http.request(method, path, json=body, headers=mine.key)
        assert r.status_code in (200, 201), (method, path, r.text)


def test_an_advertiser_key_cannot_tell_hidden_ids_from_unknown_ones(
        http: TestClient, sides: tuple[Side, Side]) -> None:
    mine, theirs = sides
    hidden = http.get(f"/v1/campaigns/{theirs.campaign}", headers=mine.key).json()
    unknown = http.get("/v1/campaigns/999", headers=mine.key).json()
    assert hidden["error"] == unknown["error"] == "not_found"
    assert hidden["fields"] == unknown["fields"]


def test_an_advertiser_lists_only_its_own_records(
        http: TestClient, sides: tuple[Side, Side]) -> None:
    mine, theirs = sides
    advertisers = http.get("/v1/advertisers", headers=mine.key).json()["items"]
    assert [a["id"] for a in advertisers] == [mine.advertiser]
    campaigns = http.get("/v1/campaigns", headers=mine.key).json()["items"]
    assert [c["id"] for c in campaigns] == [mine.campaign]
    r = http.get("/v1/campaigns", params={"advertiser_id": theirs.advertiser}, headers=mine.key)
    assert r.status_code == 200 and r.json()["items"] == []
    assert len(http.get("/v1/campaigns", headers=ADMIN_HEADERS).json()["items"]) == 2


def test_an_advertiser_creates_campaigns_only_for_itself(
        http: TestClient, sides: tuple[Side, Side]) -> None:
    mine, theirs = sides
    r = http.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": theirs.advertiser},
                  headers=mine.key)
    assert r.status_code == 422
    assert r.json()["fields"] == [{"field": "advertiser_id", "problem": "no such advertiser"}]
    r = http.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": mine.advertiser},
                  headers=mine.key)
    assert r.status_code == 201 and r.json()["advertiser_id"] == mine.advertiser
    r = http.post("/v1/advertisers", json={"name": "mine too"}, headers=mine.key)
    assert r.status_code == 403 and r.json()["fields"][0]["field"] == "authorization"


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/metrics"), ("PUT", "/v1/admin/clock"), ("GET", "/v1/admin/models"),
    ("GET", "/v1/ledger/stats"), ("GET", "/v1/serving/stats"), ("GET", "/v1/budget/pacing"),
    ("GET", "/v1/decisions/r1"), ("DELETE", "/v1/users/u1"), ("GET", "/v1/api-keys"),
    ("POST", "/v1/api-keys"), ("GET", "/v1/placements"), ("PUT", "/v1/ads/1/quality"),
    ("GET", "/v1/review/ads"), ("POST", "/v1/ads/1:approve"),
])
def test_admin_routes_refuse_an_advertiser_key_with_403(
        http: TestClient, sides: tuple[Side, Side], method: str, path: str) -> None:
    r = http.request(method, path, json={}, headers=sides[0].key)
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "forbidden"
    assert r.json()["fields"][0]["field"] == "authorization"


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/metrics"), ("PUT", "/v1/admin/clock"), ("GET", "/v1/ledger/stats"),
    ("GET", "/v1/decisions/r1"), ("GET", "/v1/advertisers"), ("POST", "/v1/campaigns"),
    ("GET", "/v1/campaigns/1/report"), ("GET", "/v1/api-keys"), ("GET", "/v1/serving/stats"),
])
@pytest.mark.parametrize("auth", [None, "Bearer not-a-key", "Basic YWxhZGRpbjpvcGVu", "Bearer"])
def test_protected_routes_answer_401_without_a_valid_key(
        http: TestClient, method: str, path: str, auth: str | None) -> None:
    headers = {"Authorization": auth} if auth is not None else {}
    r = http.request(method, path, json={}, headers=headers)
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"] == "unauthorized"
    assert r.json()["fields"][0]["field"] == "authorization"


def test_serving_tracking_and_health_stay_open(http: TestClient) -> None:
    assert http.get("/healthz").status_code == 200
    assert http.post("/v1/ads:select", json=SELECT).status_code == 204  # nothing to serve
    assert http.get("/i", params={"t": "forged"}).status_code == 400  # refused token, not 401
    assert http.get("/c", params={"t": "forged"}).status_code == 400
    assert http.get("/v", params={"t": "forged", "value": 1}).status_code == 400


@pytest.mark.slow
def test_a_revoked_key_stops_working_at_once(
        http: TestClient, sides: tuple[Side, Side]) -> None:
    mine, _ = sides
    path = f"/v1/campaigns/{mine.campaign}"
    assert http.get(path, headers=mine.key).status_code == 200
    key = mine.key["Authorization"].removeprefix("Bearer ")
    listed = http.get("/v1/api-keys", headers=ADMIN_HEADERS).json()["items"]
    assert key[:12] in [k["prefix"] for k in listed]
    assert http.delete(f"/v1/api-keys/{key[:12]}", headers=ADMIN_HEADERS).status_code == 204
    r = http.get(path, headers=mine.key)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    listed = http.get("/v1/api-keys", headers=ADMIN_HEADERS).json()["items"]
    assert key[:12] not in [k["prefix"] for k in listed]
    assert http.delete(f"/v1/api-keys/{key[:12]}", headers=ADMIN_HEADERS).status_code == 404


def test_a_reviewer_reads_and_reviews_but_cannot_edit(
        http: TestClient, sides: tuple[Side, Side], key_for: Callable[..., Headers]) -> None:
    mine, _ = sides
    reviewer = key_for("reviewer")
    c = f"/v1/campaigns/{mine.campaign}"
    assert http.get(c, headers=reviewer).status_code == 200
    assert len(http.get("/v1/campaigns", headers=reviewer).json()["items"]) == 2
    for method, path, body in [
        ("PATCH", c, {"name": "x"}), ("POST", f"{c}:pause", None),
        ("PUT", f"{c}/budget", {"daily_budget_micros": 5}),
        ("POST", "/v1/campaigns", {**CAMPAIGN, "advertiser_id": mine.advertiser}),
        ("POST", f"{c}/ads", AD), ("PATCH", f"/v1/ads/{mine.ad}", {"status": "paused"}),
    ]:
        r = http.request(method, path, json=body, headers=reviewer)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json()["error"] == "forbidden"
    campaign = http.get(c, headers=ADMIN_HEADERS).json()
    assert (campaign["name"], campaign["status"], campaign["version"]) == ("c", "active", 1)


def test_ads_an_advertiser_creates_wait_for_approval_before_they_serve(
        http: TestClient, sides: tuple[Side, Side], key_for: Callable[..., Headers]) -> None:
    mine, theirs = sides
    reviewer = key_for("reviewer")
    for s in sides:  # only the advertiser's own ad may serve: the admin's ones go away
        http.post(f"/v1/campaigns/{s.campaign}:pause", headers=ADMIN_HEADERS)
    c = http.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": mine.advertiser},
                  headers=mine.key).json()
    ad = http.post(f"/v1/campaigns/{c['id']}/ads", json=AD, headers=mine.key).json()
    assert ad["review_state"] == "pending_review"
    assert http.post("/v1/ads:select", json=SELECT).status_code == 204
    queue = http.get("/v1/review/ads", headers=reviewer).json()["items"]
    assert [a["id"] for a in queue] == [ad["id"]]

    approved = http.post(f"/v1/ads/{ad['id']}:approve", headers=reviewer)
    assert approved.status_code == 200 and approved.json()["review_state"] == "approved"
    served = http.post("/v1/ads:select", json=SELECT)
    assert served.status_code == 200 and served.json()["ads"][0]["ad_id"] == ad["id"]
    assert http.get("/v1/review/ads", headers=reviewer).json()["items"] == []

    # a new creative is reviewed again before it serves
    edited = http.patch(f"/v1/ads/{ad['id']}", json={"creative_ref": "cr/2.png"},
                        headers=mine.key).json()
    assert edited["review_state"] == "pending_review"
    assert http.post("/v1/ads:select", json=SELECT).status_code == 204
    rejected = http.post(f"/v1/ads/{ad['id']}:reject", headers=reviewer).json()
    assert rejected["review_state"] == "rejected"
    assert http.post("/v1/ads:select", json=SELECT).status_code == 204
    assert theirs.ad != ad["id"]


def test_an_advertiser_cannot_set_the_review_state(
        http: TestClient, sides: tuple[Side, Side]) -> None:
    mine, _ = sides
    r = http.post(f"/v1/campaigns/{mine.campaign}/ads",
                  json={**AD, "review_state": "approved"}, headers=mine.key)
    assert r.status_code == 403 and r.json()["fields"][0]["field"] == "review_state"
    r = http.patch(f"/v1/ads/{mine.ad}", json={"review_state": "approved"}, headers=mine.key)
    assert r.status_code == 403 and r.json()["fields"][0]["field"] == "review_state"
    pending = http.post(f"/v1/campaigns/{mine.campaign}/ads",
                        json={**AD, "review_state": "pending_review"}, headers=mine.key)
    assert pending.status_code == 201 and pending.json()["review_state"] == "pending_review"


@pytest.mark.slow
def test_an_admin_creates_ads_approved_or_pending(
        http: TestClient, sides: tuple[Side, Side]) -> None:
    mine, _ = sides
    path = f"/v1/campaigns/{mine.campaign}/ads"
    assert http.post(path, json=AD, headers=ADMIN_HEADERS).json()["review_state"] == "approved"
    r = http.post(path, json={**AD, "review_state": "pending_review"}, headers=ADMIN_HEADERS)
    assert r.json()["review_state"] == "pending_review"
