"""Issue 7 §10 end to end: a lifetime budget through serving, beacons, ledger, status
and report (embedded app, local spend gate)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import monotonic_ms
from adfunnel.runtime.embedded import Runtime
from adfunnel.serving.request import decode_request
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign


@pytest.fixture
def budget_mode() -> str:
    return "local"


def test_lifetime_budget_is_enforced_over_days(client: TestClient, runtime: Runtime) -> None:
    """Lifetime 10,000 µ, daily 100,000 µ, 2,000 µ per impression, three days: it used to
    bill 60,000 µ. Now 10,000 µ, then the campaign is completed and no longer served."""
    made = make_campaign(client, bid_micros=2_000_000, daily_budget_micros=100_000,
                         lifetime_budget_micros=10_000)
    cid = made["campaign"]["id"]
    slots = [{"id": "s1", "position": 1, "width": 300, "height": 250,
              "reserve_cpm_micros": 2_000_000}]
    billed = 0
    for d in range(3):
        runtime.clock.set(START + timedelta(days=d))  # type: ignore[attr-defined]
        for _ in range(10):
            r = client.post("/v1/ads:select", json=ad_request(slots=slots))
            if r.status_code == 204:
                break
            assert client.get(r.json()["ads"][0]["impression_url"]).status_code == 204
        report = client.get(f"/v1/campaigns/{cid}/report",
                            params={"from": START.date().isoformat()}).json()
        billed = report["billed_micros"]
        assert billed <= 10_000
    assert billed == 10_000
    assert report["lifetime_budget_micros"] == 10_000
    assert report["lifetime_billed_micros"] == 10_000
    assert report["lifetime_remaining_micros"] == 0
    assert client.get(f"/v1/campaigns/{cid}").json()["status"] == "completed"
    req = decode_request(json.dumps(ad_request()).encode())
    d = runtime.decider.decide(req, "r", monotonic_ms() + 10_000)  # the reason, as data
    assert d.rejection_counts() == {"completed": 1}


def test_charges_above_a_lowered_lifetime_budget_are_absorbed(
    client: TestClient, runtime: Runtime
) -> None:
    made = make_campaign(client, bid_micros=2_000_000, daily_budget_micros=100_000,
                         lifetime_budget_micros=10_000)
    cid = made["campaign"]["id"]
    slots = [{"id": "s1", "position": 1, "width": 300, "height": 250,
              "reserve_cpm_micros": 2_000_000}]
    urls = []
    for _ in range(5):
        r = client.post("/v1/ads:select", json=ad_request(slots=slots))
        urls.append(r.json()["ads"][0]["impression_url"])
    # the advertiser lowers the lifetime budget while five impressions are in flight
    version = client.get(f"/v1/campaigns/{cid}").json()["version"]
    r = client.put(f"/v1/campaigns/{cid}/budget", json={
        "daily_budget_micros": 100_000, "lifetime_budget_micros": 6_000, "version": version})
    assert r.status_code == 200, r.text
    for url in urls:
        assert client.get(url).status_code == 204
    report = client.get(f"/v1/campaigns/{cid}/report").json()
    assert (report["billed_micros"], report["absorbed_overspend_micros"]) == (6_000, 4_000)
    assert report["lifetime_remaining_micros"] == 0
    assert client.get(f"/v1/campaigns/{cid}").json()["status"] == "completed"


@pytest.mark.slow
def test_report_without_lifetime_budget_has_null_remaining(client: TestClient) -> None:
    made = make_campaign(client)
    report = client.get(f"/v1/campaigns/{made['campaign']['id']}/report").json()
    assert report["lifetime_budget_micros"] is None
    assert report["lifetime_remaining_micros"] is None
    assert report["lifetime_billed_micros"] == 0
