"""The rollup refresh runs on the injected clock: on a manual clock (a replay) the hours
the aggregator touched are refreshed when domain time reaches the next refresh, so the
rollup report shows what ``/report`` shows, whatever the machine's clock does."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.periodic import Periodic
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import ROLLUP_REFRESH_S, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS

START = datetime(2013, 10, 19, 10, 0, tzinfo=UTC)  # a replay's past
REQUEST = {
    "user": {"key": "u1", "attributes": {}},
    "placement": {"id": "feed", "reserve_cpm_micros": 1_000_000},
    "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
}


def test_a_periodic_job_runs_on_the_manual_clocks_moves_only() -> None:
    clock = ManualClock(START)
    runs: list[datetime] = []
    job = Periodic(lambda: runs.append(clock.now()), 5.0, "job", clock, run_on_move=True)
    clock.advance(4.9)
    assert runs == []  # not due: 4.9 s of domain time
    clock.advance(0.1)
    assert runs == [START + timedelta(seconds=5)]  # due, run in the mover's thread
    job.stop()
    clock.advance(60)
    assert len(runs) == 1  # a stopped job stays stopped


def _campaign(http: TestClient) -> int:
    adv = http.post("/v1/advertisers", json={"name": "a"}).json()
    r = http.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 10**9,
        "time_zone": "UTC", "flight_start": "2013-10-18", "pacing_mode": "accelerated",
        "billable_event": "rendered"})  # fires /i as the billed impression
    assert r.status_code == 201, r.text
    cid = int(r.json()["id"])
    ad = http.post(f"/v1/campaigns/{cid}/ads", json={
        "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
        "width": 300, "height": 250})
    assert ad.status_code == 201, ad.text
    return cid


def _ledger_impressions(http: TestClient, cid: int) -> int:
    days = http.get(f"/v1/campaigns/{cid}/report",
                    params={"from": "2013-10-19", "to": "2013-10-19"}).json()["days"]
    return sum(d["impressions"] for d in days)


@pytest.mark.slow
def test_a_replay_reads_in_the_rollups_what_the_ledger_report_has() -> None:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             ivt=False)  # the filter's lists: seconds to load, not needed
    rt = build_runtime(settings, ManualClock(), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as http:
            http.put("/v1/admin/clock", json={"now": START.isoformat()})
            cid = _campaign(http)
            for i in range(3):
                at = START + timedelta(seconds=i)
                assert http.put("/v1/admin/clock", json={"now": at.isoformat()}).status_code \
                    == 200
                r = http.post("/v1/ads:select", json=REQUEST)
                assert r.status_code == 200, r.text
                assert http.get(r.json()["ads"][0]["impression_url"]).status_code == 204
            deadline = time.monotonic() + 10
            while _ledger_impressions(http, cid) < 3:  # the aggregator has billed them
                assert time.monotonic() < deadline, "the ledger never billed the beacons"
                time.sleep(0.01)
            later = START + timedelta(seconds=2 + ROLLUP_REFRESH_S)
            assert http.put("/v1/admin/clock", json={"now": later.isoformat()}).status_code \
                == 200
            rows = http.get(f"/v1/campaigns/{cid}/report/rollups",
                            params={"from": "2013-10-19", "to": "2013-10-19"}).json()["rows"]
            assert [r["impressions"] for r in rows] == [3]
    finally:
        rt.close()
