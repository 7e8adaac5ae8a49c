"""Instants and days the domain cannot represent are refused where they come in (422
naming the field), never found later as an ``OverflowError`` (a 500): the manual
clock's ``now``, campaign flights and report ranges. The edges of the range work."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import EARLIEST_DAY, LATEST_DAY, LATEST_INSTANT
from adfunnel.runtime.embedded import Runtime
from tests.serving.helpers import ad_request, make_campaign


def _fields(r) -> dict[str, str]:
    assert r.status_code == 422, r.text
    return {f["field"]: f["problem"] for f in r.json()["fields"]}


@pytest.mark.slow
@pytest.mark.parametrize("now", ["9999-12-31T00:00:00Z", "9000-01-01T00:00:00Z",
                                 "9999-12-31T23:59:59-01:00", "1969-12-31T23:59:59Z"])
def test_clock_refuses_instants_outside_the_domain(client: TestClient, runtime: Runtime,
                                                   now: str) -> None:
    make_campaign(client)
    before = runtime.clock.now()
    assert "must be from" in _fields(client.put("/v1/admin/clock", json={"now": now}))["now"]
    assert runtime.clock.now() == before
    assert client.post("/v1/ads:select", json=ad_request()).status_code == 200


def test_the_last_instant_serves_campaigns_of_every_zone(client: TestClient) -> None:
    for zone in ("Pacific/Kiritimati", "Etc/GMT+12"):  # UTC+14 and UTC-12
        make_campaign(client, time_zone=zone, flight_end=LATEST_DAY.isoformat())
    last = (LATEST_INSTANT.replace(microsecond=0)).isoformat().replace("+00:00", "Z")
    almost = last.replace("9000-01-01T00:00:00", "8999-12-31T23:59:59")
    assert client.put("/v1/admin/clock", json={"now": almost}).status_code == 200
    r = client.post("/v1/ads:select", json=ad_request(deadline_ms=5_000))
    assert r.status_code == 200, r.text


@pytest.mark.slow
@pytest.mark.parametrize("field", ["flight_start", "flight_end"])
def test_flights_outside_the_domain_are_refused(client: TestClient, field: str) -> None:
    for day in ("9999-12-31", "0001-01-01", "1969-12-31", "9000-01-01"):
        adv = client.post("/v1/advertisers", json={"name": "a"}).json()
        body = {"advertiser_id": adv["id"], "name": "c", "objective": "clicks",
                "bid_type": "CPM", "bid_micros": 1_000_000, "daily_budget_micros": 10**8,
                "time_zone": "UTC", "flight_start": "2026-07-01", field: day}
        if field == "flight_start":
            body["flight_end"] = "2026-12-31"
        assert "must be from" in _fields(client.post("/v1/campaigns", json=body))[field]
    made = make_campaign(client)["campaign"]
    r = client.patch(f"/v1/campaigns/{made['id']}", json={field: "9999-12-31"})
    assert field in _fields(r)


@pytest.mark.parametrize("path", ["/report", "/report/rollups"])
def test_report_ranges_outside_the_domain_are_refused(client: TestClient, path: str) -> None:
    cid = make_campaign(client)["campaign"]["id"]
    url = f"/v1/campaigns/{cid}{path}"
    for name, day in (("to", "9999-12-31"), ("from", "0001-01-01")):
        query = {"from": "2026-07-01", "to": "2026-07-02", name: day}
        assert name in _fields(client.get(url, params=query))
    edges = {"from": LATEST_DAY.isoformat(), "to": LATEST_DAY.isoformat()}
    assert client.get(url, params=edges).status_code == 200
    edges = {"from": EARLIEST_DAY.isoformat(), "to": EARLIEST_DAY.isoformat()}
    assert client.get(url, params=edges).status_code == 200
