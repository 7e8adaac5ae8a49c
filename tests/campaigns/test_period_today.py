"""The campaign report's ``period.today``: the budget service's current day of a flight
(allotment, plan, spend) to the line's owner, through the public API.

Input: an embedded server on a manual clock at 2026-11-04T10:00Z, a guaranteed line of
700,000 impressions at CPM 5.00 over 2..8 Nov (UTC) and an auction campaign with a day
budget; each with an ad.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from adfunnel.api.period_today import period_today
from adfunnel.budget.days import day_view
from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from adfunnel.ui.budget_reads import LocalBudgetReads, RemoteBudgetReads
from tests.api_keys import ADMIN_HEADERS
from tests.internal_token import INTERNAL_TOKEN

NOW = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)
GOAL = 700_000
RATE = 5_000_000  # micros per mille
#: Seconds to wait for the budget service to hold a new campaign (its change feed).
HOLD_S = 10.0


def _campaign(http: TestClient, adv: int, **sale: Any) -> int:
    r = http.post("/v1/campaigns", json={
        "advertiser_id": adv, "name": "line", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": RATE, "time_zone": "UTC",
        "flight_start": "2026-11-02", "flight_end": "2026-11-08", **sale})
    assert r.status_code == 201, r.text
    ad = http.post(f"/v1/campaigns/{r.json()['id']}/ads", json={
        "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
        "width": 300, "height": 250})
    assert ad.status_code == 201, ad.text
    return int(r.json()["id"])


@pytest.fixture
def server() -> Iterator[tuple[TestClient, Runtime]]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32)
    rt = build_runtime(settings, ManualClock(), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as http:
            assert http.put("/v1/admin/clock", json={"now": NOW.isoformat()}).status_code == 200
            yield http, rt
    finally:
        rt.close()


def _service_day(rt: Runtime, campaign_id: int) -> dict[str, Any] | None:
    """The budget service's day of the campaign, read under its lock, once it holds it."""
    process = rt.gate.process  # the embedded (in_process) budget service
    deadline = time.monotonic() + HOLD_S
    while True:
        with process.lock:
            found = day_view(process.service, campaign_id, rt.clock.now().timestamp())
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_flight_line_reports_todays_allotment_from_the_budget_service(
        server: tuple[TestClient, Runtime]) -> None:
    """In flight, ``period.today`` is the budget service's day: its local day, a
    positive allotment and the plan and spend it holds now; a day campaign's is null.
    Mutation that turns it red: the report reading another campaign's day (the auction
    one's, whose period is null)."""
    http, rt = server
    adv = http.post("/v1/advertisers", json={"name": "a"}).json()["id"]
    line = _campaign(http, adv, priority="guaranteed",
                     goal={"metric": "impressions", "total": GOAL})
    daily = _campaign(http, adv, daily_budget_micros=50_000_000)
    held = _service_day(rt, line)
    assert held is not None and held["period"] is not None
    r = http.get(f"/v1/campaigns/{line}/report")
    assert r.status_code == 200, r.text
    today = r.json()["period"]["today"]
    assert today is not None
    assert today["day"] == "2026-11-04"
    assert today["allotment_micros"] > 0
    period = held["period"]
    assert (today["allotment_micros"], today["planned_micros"], today["spent_micros"]) == (
        period["allotment_micros"], period["planned_micros"], period["spent_micros"])
    assert r.json()["period"]["budget_period"] == "flight"
    assert http.get(f"/v1/campaigns/{daily}/report").json()["period"]["today"] is None


def test_a_fleets_budget_shard_answers_the_same_today(
        server: tuple[TestClient, Runtime]) -> None:
    """``period.today`` read from a budget shard over HTTP (``GET /v1/days``, the fleet's
    deployment) equals the embedded read. Mutation that turns it red: the remote reads
    dropping the ``period`` field."""
    http, rt = server
    adv = http.post("/v1/advertisers", json={"name": "a"}).json()["id"]
    line = _campaign(http, adv, priority="guaranteed",
                     goal={"metric": "impressions", "total": GOAL})
    assert _service_day(rt, line) is not None
    campaign = rt.store.get_campaign(line)
    process = rt.gate.process

    async def both() -> tuple[Any, Any]:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(
            app=process.app(INTERNAL_TOKEN)), base_url="http://shard")
        remote = RemoteBudgetReads([], token=INTERNAL_TOKEN, clients=[client])
        try:
            return (await period_today(remote, campaign),
                    await period_today(LocalBudgetReads(process, rt.clock), campaign))
        finally:
            await remote.aclose()

    remote_today, local_today = asyncio.run(both())
    assert remote_today is not None and remote_today["allotment_micros"] > 0
    assert remote_today == local_today
