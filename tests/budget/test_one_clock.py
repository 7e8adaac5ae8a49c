"""One clock: every schedule of the embedded budget service follows the injected clock,
budget state is kept per campaign and local day, and its work runs off the request path.

Issue input: ``serve --clock manual``, the clock put to 2019-06-03T10:00Z, one UTC
campaign with a daily budget of three impressions, accelerated; six requests a minute
apart, each with its beacon, fill three — and so again on every later day.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from adfunnel.sim.invalid import PERSON_UA
from adfunnel.sim.server_proc import ServerProcess
from tests.api_keys import ADMIN_HEADERS

CHARGE = 2_000  # micros per impression of a 2.00 CPM price
REQUEST = {
    "user": {"key": "u1", "attributes": {"geo.country": "US"}},
    "placement": {"id": "feed", "reserve_cpm_micros": 2_000_000},
    "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
}


def _campaign(http: Any, flight_start: str) -> int:
    adv = http.post("/v1/advertisers", json={"name": "a"}).json()
    r = http.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": "three a day", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 3 * CHARGE,
        "time_zone": "UTC", "flight_start": flight_start, "pacing_mode": "accelerated",
        "billable_event": "rendered"})  # fires /i as the billed impression
    assert r.status_code == 201, r.text
    ad = http.post(f"/v1/campaigns/{r.json()['id']}/ads", json={
        "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
        "width": 300, "height": 250})
    assert ad.status_code == 201, ad.text
    return int(r.json()["id"])


def _day_of_requests(http: Any, start: datetime, day: int) -> int:
    """Six requests a minute apart from 10:00 of ``start`` + ``day``; filled slots."""
    filled = 0
    for i in range(6):
        at = start + timedelta(days=day, minutes=i)
        assert http.put("/v1/admin/clock", json={"now": at.isoformat()}).status_code == 200
        r = http.post("/v1/ads:select", json=REQUEST)
        assert r.status_code in (200, 204), r.text
        if r.status_code == 200:
            filled += 1
            (ad,) = r.json()["ads"]
            assert http.get(ad["impression_url"]).status_code == 204
    return filled


@pytest.mark.slow
@pytest.mark.parametrize("start", [
    datetime(2013, 10, 19, 10, 0, tzinfo=UTC),  # the replay's week
    datetime(2019, 6, 3, 10, 0, tzinfo=UTC),  # the input
    datetime(2031, 3, 3, 10, 0, tzinfo=UTC),  # after the machine's clock
])
def test_daily_budget_refills_every_local_day_on_a_manual_clock(start: datetime) -> None:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32)
    rt = build_runtime(settings, ManualClock(), seed=1)  # unset: reads the machine's clock
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as http:
            http.put("/v1/admin/clock", json={"now": start.isoformat()})
            _campaign(http, (start - timedelta(days=1)).date().isoformat())
            assert [_day_of_requests(http, start, d) for d in range(3)] == [3, 3, 3]
            report = http.get(f"/v1/campaigns/{1}/report", params={
                "from": start.date().isoformat(),
                "to": (start + timedelta(days=2)).date().isoformat()}).json()
            assert [d["billed_micros"] for d in report["days"]] == [3 * CHARGE] * 3
    finally:
        rt.close()


@pytest.mark.e2e
def test_a_real_server_on_a_2019_manual_clock_refills_each_day(tmp_path) -> None:
    start = datetime(2019, 6, 3, 10, 0, tzinfo=UTC)
    url = f"sqlite:///{tmp_path / 'clock.sqlite3'}"
    with ServerProcess(url, clock="manual", log_path=tmp_path / "server.log") as proc, \
            httpx.Client(base_url=proc.url, timeout=10,
                         headers={**ADMIN_HEADERS, "user-agent": PERSON_UA}) as http:
        http.put("/v1/admin/clock", json={"now": start.isoformat()})
        _campaign(http, "2019-06-01")
        assert [_day_of_requests(http, start, d) for d in range(2)] == [3, 3]


@pytest.mark.slow
def test_select_answers_while_the_budget_service_is_blocked_on_the_store() -> None:
    """The embedded service's periodic work (change log, ledger, traffic log) runs on
    its own thread: a store that hangs holds that thread, never a decision."""
    settings = load_settings(database_url="sqlite://", clock="system", token_secret="k" * 32,
                             budget="service")
    rt = build_runtime(settings, seed=1, feed=False)
    entered, release = threading.Event(), threading.Event()
    real = rt.store.changes_since

    def held_changes_since(position: int, limit: int) -> Any:
        entered.set()
        release.wait(30)
        return real(position, limit)

    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as http:
            _campaign(http, "2020-01-01")
            rt.store.changes_since = held_changes_since  # type: ignore[method-assign]
            assert entered.wait(10), "the budget service's ticker never polled the store"
            t0 = time.monotonic()
            r = http.post("/v1/ads:select", json=REQUEST)
            assert r.status_code in (200, 204)
            assert time.monotonic() - t0 < 5.0
            assert not release.is_set()  # the store was still held while select answered
    finally:
        release.set()
        rt.close()
