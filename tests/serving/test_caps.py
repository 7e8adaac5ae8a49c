"""Frequency caps at serve time, in one embedded process (memory store, manual clock).

The real-Redis, several-process cases are in tests/e2e/test_caps_e2e.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from adfunnel.frequency.store import MemoryFrequencyStore
from adfunnel.frequency.windows import CapRule
from adfunnel.runtime.embedded import Runtime
from tests.serving.helpers import ad_request, make_campaign

CAP_2_PER_HOUR = [{"level": "campaign", "count": 2, "window": "hour"}]


@pytest.fixture
def budget_mode() -> str:
    return "local"  # budgets never bind here: what limits serves is the cap


def _explain(client: TestClient, body: dict | None = None) -> dict:
    """The explain record of one decision (every candidate's reason, filled or not)."""
    body = {**(body or ad_request()), "explain": True, "request_id": "x"}
    client.post("/v1/ads:select", json=body)
    return client.get("/v1/decisions/x").json()


def _served(client: TestClient, user: str | None = "u1", explain: bool = False) -> list[dict]:
    body = ad_request(explain=explain)
    if user is None:
        del body["user"]["key"]
    else:
        body["user"]["key"] = user
    r = client.post("/v1/ads:select", json=body)
    assert r.status_code in (200, 204), r.text
    return r.json()["ads"] if r.status_code == 200 else []


def test_a_campaign_capped_at_2_per_hour_serves_one_user_twice(client: TestClient,
                                                                 runtime: Runtime) -> None:
    cid = make_campaign(client, frequency_caps=CAP_2_PER_HOUR)["campaign"]["id"]
    got = [len(_served(client)) for _ in range(5)]
    assert got == [1, 1, 0, 0, 0]
    assert len(_served(client, "u2")) == 1  # another user
    runtime.clock.advance(3600)  # the next calendar hour (UTC campaign)
    assert [a["campaign_id"] for a in _served(client)] == [cid]


def test_explain_names_the_cap_that_bound(client: TestClient) -> None:
    make_campaign(client, frequency_caps=CAP_2_PER_HOUR)
    _served(client)
    _served(client)
    r = _explain(client)
    [rej] = [x for x in r["rejections"] if x["reason"] == "capped"]
    assert rej["detail"] == "campaign {}: 2 per hour".format(rej["campaign_id"])


def test_no_user_key_never_gets_a_capped_ad(client: TestClient) -> None:
    make_campaign(client, frequency_caps=CAP_2_PER_HOUR)
    free = make_campaign(client, bid_micros=1_000_000)["campaign"]["id"]
    assert [a["campaign_id"] for a in _served(client, None)] == [free]
    r = _explain(client, {**ad_request(), "user": {"attributes": {}}})
    assert "no_user_key" in {x["reason"] for x in r["rejections"]}


def test_an_advertiser_cap_counts_every_campaign_of_the_advertiser(client: TestClient) -> None:
    first = make_campaign(client, frequency_caps=[
        {"level": "advertiser", "count": 2, "window": "day"}])
    adv = first["advertiser"]["id"]
    body = {"advertiser_id": adv, "name": "b", "objective": "impressions", "bid_type": "CPM",
            "bid_micros": 1_500_000, "daily_budget_micros": 100_000_000, "time_zone": "UTC",
            "flight_start": "2026-07-01"}
    other = client.post("/v1/campaigns", json=body).json()  # declares no cap of its own
    client.post(f"/v1/campaigns/{other['id']}/ads", json={
        "landing_url": "https://x.test/b", "creative_ref": "b.png", "format": "banner",
        "width": 300, "height": 250})
    served = [a["campaign_id"] for _ in range(6) for a in _served(client)]
    assert len(served) == 2  # both campaigns together, one advertiser


def test_an_advertiser_cap_holds_across_campaigns_of_two_time_zones(
        client: TestClient) -> None:
    """Advertiser-level 2 per hour declared by a UTC and an Asia/Kolkata campaign: the
    two zones' hour buckets differ (offsets +0000 and +0530), and each serve used to drop
    the other's (a tester got 10 serves of 10). Mutation seen red: the store dropping
    planned buckets again (10 served)."""
    cap = [{"level": "advertiser", "count": 2, "window": "hour"}]
    first = make_campaign(client, frequency_caps=cap)
    body = {"advertiser_id": first["advertiser"]["id"], "name": "b",
            "objective": "impressions", "bid_type": "CPM", "bid_micros": 1_500_000,
            "daily_budget_micros": 100_000_000, "time_zone": "Asia/Kolkata",
            "flight_start": "2026-07-01", "frequency_caps": cap}
    other = client.post("/v1/campaigns", json=body).json()
    r = client.post(f"/v1/campaigns/{other['id']}/ads", json={
        "landing_url": "https://x.test/b", "creative_ref": "b.png", "format": "banner",
        "width": 300, "height": 250})
    assert r.status_code == 201, r.text
    served = [a["campaign_id"] for _ in range(10) for a in _served(client)]
    assert len(served) == 2


def test_cooldown_and_count_hold_together(client: TestClient, runtime: Runtime) -> None:
    make_campaign(client, frequency_caps=[
        {"level": "campaign", "count": 5, "window": "day"},
        {"level": "campaign", "cooldown_s": 1800}])
    assert len(_served(client)) == 1
    runtime.clock.advance(1200)
    assert _served(client) == []  # 20 min after the last: cooldown binds
    runtime.clock.advance(600)
    assert len(_served(client)) == 1


def test_a_slot_lost_at_count_is_refilled_by_the_next_candidate(client: TestClient,
                                                                runtime: Runtime) -> None:
    """Another process serves the user between this decision's read and its count: the
    winner is refused at count and the next candidate fills the slot."""
    capped = make_campaign(client, bid_micros=3_000_000, frequency_caps=[
        {"level": "campaign", "count": 1, "window": "day"}])["campaign"]["id"]
    free = make_campaign(client, bid_micros=1_000_000)["campaign"]["id"]
    store = runtime.caps
    assert isinstance(store, MemoryFrequencyStore)
    real = store.check_and_increment

    def racing(user: str, winners: Sequence[Sequence[CapRule]], now_s: int,
               ttl_s: int) -> list[bool]:
        real(user, winners, now_s, ttl_s)  # the parallel request's serve, first
        return real(user, winners, now_s, ttl_s)

    store.check_and_increment = racing  # type: ignore[method-assign]
    r = _explain(client)
    assert [p["campaign_id"] for p in r["placed"]] == [free]
    assert {(x["campaign_id"], x["reason"]) for x in r["rejections"]} >= {(capped, "capped")}


def test_a_store_that_fails_excludes_capped_campaigns_only(client: TestClient,
                                                          runtime: Runtime) -> None:
    make_campaign(client, bid_micros=3_000_000, frequency_caps=CAP_2_PER_HOUR)
    free = make_campaign(client, bid_micros=1_000_000)["campaign"]["id"]
    runtime.caps.close()
    r = _explain(client)
    assert [p["campaign_id"] for p in r["placed"]] == [free]
    assert "cap_unavailable" in {x["reason"] for x in r["rejections"]}
    metrics = client.get("/metrics").text
    assert 'adfunnel_cap_unavailable_total{step="screen"}' in metrics


def test_deleting_a_user_erases_their_cap_records(client: TestClient) -> None:
    make_campaign(client, frequency_caps=CAP_2_PER_HOUR)
    _served(client)
    _served(client)
    assert _served(client) == []
    assert client.delete("/v1/users/u1").status_code == 204
    assert len(_served(client)) == 1


def test_the_columnar_path_counts_capped_rejections(client: TestClient,
                                                   runtime: Runtime) -> None:
    make_campaign(client, frequency_caps=CAP_2_PER_HOUR)
    for _ in range(3):
        _served(client)
    counts: dict[str, int] = {}
    for d in list(runtime.decisions._items.values()):
        for k, v in d.rejection_counts().items():
            counts[k] = counts.get(k, 0) + v
    assert counts.get("capped") == 1


def test_caps_follow_the_injected_clock_day(client: TestClient, runtime: Runtime) -> None:
    make_campaign(client, frequency_caps=[{"level": "campaign", "count": 1, "window": "day"}])
    assert len(_served(client)) == 1
    runtime.clock.advance(timedelta(hours=11, minutes=59).total_seconds())  # 23:59 UTC
    assert _served(client) == []
    runtime.clock.advance(120)  # the next local (UTC) day
    assert len(_served(client)) == 1
