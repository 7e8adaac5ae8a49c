"""DELETE archives a campaign or an ad: the record stays (status ``archived``), lists
leave it out unless ``include_archived=true``, it takes no more edits (409)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

CAMPAIGN = {"name": "c", "objective": "impressions", "bid_type": "CPM",
            "bid_micros": 2_000_000, "daily_budget_micros": 100_000_000, "time_zone": "UTC",
            "flight_start": "2026-07-01"}
AD = {"landing_url": "https://x.test/", "creative_ref": "cr/1.png", "format": "banner",
      "width": 300, "height": 250}


def _campaign(client: TestClient) -> tuple[int, int]:
    adv = client.post("/v1/advertisers", json={"name": "a"}).json()["id"]
    cid = client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": adv}).json()["id"]
    ad = client.post(f"/v1/campaigns/{cid}/ads", json=AD).json()["id"]
    return cid, ad


def test_an_archived_campaign_is_kept_but_not_listed_by_default(client: TestClient) -> None:
    cid, _ = _campaign(client)
    kept = client.post("/v1/campaigns", json={**CAMPAIGN, "advertiser_id": 1}).json()["id"]
    assert client.delete(f"/v1/campaigns/{cid}").status_code == 204
    got = client.get(f"/v1/campaigns/{cid}").json()
    assert got["status"] == "archived" and got["version"] == 2
    assert [c["id"] for c in client.get("/v1/campaigns").json()["items"]] == [kept]
    every = client.get("/v1/campaigns", params={"include_archived": "true"}).json()["items"]
    assert [c["id"] for c in every] == [cid, kept]
    assert client.get(f"/v1/campaigns/{cid}/report").status_code == 200  # history stays
    assert client.delete(f"/v1/campaigns/{cid}").status_code == 204  # again: nothing new
    assert client.get(f"/v1/campaigns/{cid}").json()["version"] == 2


@pytest.mark.slow
def test_an_archived_campaign_takes_no_more_edits(client: TestClient) -> None:
    cid, ad = _campaign(client)
    client.delete(f"/v1/campaigns/{cid}")
    for method, path, body in [
        ("PATCH", f"/v1/campaigns/{cid}", {"name": "x"}),
        ("POST", f"/v1/campaigns/{cid}:resume", None),
        ("PUT", f"/v1/campaigns/{cid}/budget", {"daily_budget_micros": 5}),
        ("POST", f"/v1/campaigns/{cid}/ads", AD),
        ("PATCH", f"/v1/ads/{ad}", {"status": "paused"}),
    ]:
        r = client.request(method, path, json=body)
        assert r.status_code == 409, (method, path, r.text)
        assert r.json()["error"] == "archived"
        assert r.json()["fields"][0]["field"] == "status"


def test_an_archived_ad_is_kept_but_not_listed_by_default(client: TestClient) -> None:
    cid, ad = _campaign(client)
    other = client.post(f"/v1/campaigns/{cid}/ads", json=AD).json()["id"]
    assert client.delete(f"/v1/ads/{ad}").status_code == 204
    assert client.get(f"/v1/ads/{ad}").json()["status"] == "archived"
    listed = client.get(f"/v1/campaigns/{cid}/ads").json()["items"]
    assert [a["id"] for a in listed] == [other]
    every = client.get(f"/v1/campaigns/{cid}/ads", params={"include_archived": True}).json()
    assert [a["id"] for a in every["items"]] == [ad, other]
    r = client.patch(f"/v1/ads/{ad}", json={"status": "active"})
    assert r.status_code == 409 and r.json()["error"] == "archived"


def test_archiving_is_delete_only(client: TestClient) -> None:
    cid, ad = _campaign(client)
    r = client.patch(f"/v1/campaigns/{cid}", json={"status": "archived"})
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "status"
    r = client.patch(f"/v1/ads/{ad}", json={"status": "archived"})
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "status"
