"""A campaign's time zone is fixed once its flight has started: its budget days, slices,
ledger days and reports are kept in it. A tester changed a serving campaign's zone from
UTC to Pacific/Kiritimati: the budget service kept the UTC day's row while the gate
asked slices for the Kiritimati day, and the campaign answered ``no_slice`` for 14 hours
(until UTC midnight); the hours it had billed on the UTC day also fell on a fresh
Kiritimati day's budget, and the report's billed and measured figures split across days.
The embedded app (in-memory SQLite, manual clock)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.campaigns.delivered import deliver


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    rt = build_runtime(settings, ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC)), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def admin(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(runtime), headers=ADMIN_HEADERS) as client:
        yield client


def _campaign(admin: TestClient, flight_start: str) -> int:
    adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
    r = admin.post("/v1/campaigns", json={
        "advertiser_id": adv, "name": "c", "objective": "impressions", "bid_type": "CPM",
        "bid_micros": 2_000_000, "daily_budget_micros": 10_000_000, "time_zone": "UTC",
        "flight_start": flight_start})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_a_time_zone_is_fixed_once_the_flight_has_started(admin: TestClient) -> None:
    """Mutation seen red: ``zone_after_start`` returning None (200 for the started one)."""
    started = _campaign(admin, "2026-11-02")
    r = admin.patch(f"/v1/campaigns/{started}",
                    json={"time_zone": "Pacific/Kiritimati", "version": 1})
    assert r.status_code == 422, r.text
    (problem,) = r.json()["fields"]
    assert problem["field"] == "time_zone" and "2026-11-02" in problem["problem"]
    r = admin.patch(f"/v1/campaigns/{started}", json={"time_zone": "UTC", "version": 1})
    assert r.status_code == 200, r.text  # the same zone again changes nothing
    later = _campaign(admin, "2026-11-09")  # not started: its zone may still change
    r = admin.patch(f"/v1/campaigns/{later}",
                    json={"time_zone": "Pacific/Kiritimati", "version": 1})
    assert r.status_code == 200 and r.json()["time_zone"] == "Pacific/Kiritimati", r.text


def test_a_start_moved_past_delivered_days_cannot_reopen_the_zone(
        admin: TestClient, runtime: Runtime) -> None:
    """A tester moved a day campaign's start past today (allowed then for day budgets),
    changed its zone, and moved the start back: the campaign went dark (``no_slice``).
    A start never moves past a day any campaign delivered on now, so its zone stays
    fixed. Mutation seen red: the rule for flight-period and goal lines only (200)."""
    from datetime import date


    cid = _campaign(admin, "2026-11-01")
    deliver(runtime.ledger, cid, day=date(2026, 11, 1))
    r = admin.patch(f"/v1/campaigns/{cid}", json={"flight_start": "2026-11-20",
                                                  "version": 1})
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "flight_start", r.text
    r = admin.patch(f"/v1/campaigns/{cid}", json={"flight_start": "2026-11-20",
                                                  "time_zone": "America/Los_Angeles",
                                                  "version": 1})
    assert r.status_code == 422, r.text
    assert {f["field"] for f in r.json()["fields"]} == {"flight_start", "time_zone"}
