"""A guaranteed line's progress against its plan (issue #26): the campaign report's
``period.progress`` and the campaign page's progress card, on a line really served
through the app.

Input: an embedded server (SQLite in memory, the in-process budget service) on a manual
clock; a guaranteed line of 700 impressions at CPM 5.00 over 2..8 Nov 2026 (UTC),
billed on render; requests sent through ``POST /v1/ads:select`` on 3 Nov at noon and on
4 Nov at 10:00, every served ad's ``/i`` beacon fired, the events settled into the
ledger. Expected: ``delivered`` is the ledger's impressions over the flight; the
``planned_to_date`` is the budget service's plan's cumulative target now in impressions
(``planned_micros × goal ÷ goal cost``, floored); the projection follows the rule of
:mod:`adfunnel.pacing.progress` from those figures; the page shows the same numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.api.period_progress import RecentDelivery, period_progress, recent_delivery
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.budget.days import day_view
from adfunnel.campaigns.model import (
    BidType,
    BudgetPeriod,
    Campaign,
    Goal,
    GoalMetric,
    Objective,
    Priority,
)
from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from adfunnel.ui.session import COOKIE
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

YESTERDAY = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)
GOAL = 700
RATE = 5_000_000  # micros per mille
GOAL_COST = GOAL * RATE // 1000
#: Seconds to wait for the budget service to hold a new campaign (its change feed).
HOLD_S = 10.0
REQUESTS = 30  # per serving moment


@pytest.fixture
def server() -> Iterator[tuple[TestClient, Runtime]]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32)
    rt = build_runtime(settings, ManualClock(), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as http:
            _set_clock(http, YESTERDAY.replace(hour=0))
            yield http, rt
    finally:
        rt.close()


def _set_clock(http: TestClient, at: datetime) -> None:
    assert http.put("/v1/admin/clock", json={"now": at.isoformat()}).status_code == 200


def _line(http: TestClient) -> int:
    adv = http.post("/v1/advertisers", json={"name": "a"}).json()["id"]
    r = http.post("/v1/campaigns", json={
        "advertiser_id": adv, "name": "line", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": RATE, "time_zone": "UTC",
        "flight_start": "2026-11-02", "flight_end": "2026-11-08",
        "billable_event": "rendered", "priority": "guaranteed",
        "goal": {"metric": "impressions", "total": GOAL}})
    assert r.status_code == 201, r.text
    ad = http.post(f"/v1/campaigns/{r.json()['id']}/ads", json={
        "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
        "width": 300, "height": 250})
    assert ad.status_code == 201, ad.text
    return int(r.json()["id"])


def _serve(http: TestClient, tag: str) -> int:
    """Send :data:`REQUESTS` requests; fire each served ad's render beacon; settle."""
    served = 0
    for k in range(REQUESTS):
        r = http.post("/v1/ads:select", json={
            "user": {"key": f"{tag}-{k}", "attributes": {"geo.country": "US"}},
            "placement": {"id": "feed"},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
            "deadline_ms": 2000})
        assert r.status_code in (200, 204), r.text
        if r.status_code == 200:
            for ad in r.json()["ads"]:
                assert http.get(ad["impression_url"]).status_code == 204
                served += 1
    assert http.post("/v1/admin/events:settle").status_code == 200
    return served


def _service_period(rt: Runtime, campaign_id: int) -> dict[str, Any]:
    """The budget service's period of the campaign now, once it holds it with a plan."""
    process = rt.gate.process
    deadline = time.monotonic() + HOLD_S
    while True:
        with process.lock:
            found = day_view(process.service, campaign_id, rt.clock.now().timestamp())
        period = None if found is None else found["period"]
        if period is not None and period.get("planned_micros") is not None:
            return period
        assert time.monotonic() < deadline, "the budget service never planned the line"
        time.sleep(0.05)


def _ledger_impressions(rt: Runtime, campaign_id: int, first: date, last: date) -> int:
    return sum(r.impressions for r in rt.ledger.day_totals(campaign_id, first, last))


def test_progress_is_the_ledgers_delivery_against_the_services_plan(
        server: tuple[TestClient, Runtime]) -> None:
    """Mutations that turn it red: ``delivered`` read from another metric (clicks: 0);
    ``planned_to_date`` converted at the goal's total instead of the goal's cost (or
    left in micros); the recent days' delivered counted from another day (today only);
    the budget service's ``planned_days`` naming each day by the next one's plan; the
    page's card reading ``plan_total`` as planned to date."""
    http, rt = server
    line = _line(http)
    _service_period(rt, line)
    _set_clock(http, YESTERDAY)
    served_yesterday = _serve(http, "y")
    _set_clock(http, NOW)
    served_today = _serve(http, "t")
    assert served_yesterday > 0 and served_today > 0
    body = http.get(f"/v1/campaigns/{line}/report").json()
    period = _service_period(rt, line)  # the clock is still: the same plan, the same now
    progress = body["period"]["progress"]
    delivered = _ledger_impressions(rt, line, date(2026, 11, 2), date(2026, 11, 8))
    assert delivered == served_yesterday + served_today
    planned = period["planned_micros"] * GOAL // GOAL_COST
    assert 0 < planned < GOAL
    assert (progress["delivered"], progress["planned_to_date"], progress["goal"],
            progress["plan_total"]) == (delivered, planned, GOAL, GOAL)
    # the recent ratio: yesterday's and today's impressions over what the plan gave them
    days = {d["day"]: d["planned_micros"] for d in period["planned_days"]}
    assert list(days) == ["2026-11-03", "2026-11-04"]
    # a whole day yesterday, ten hours today; the flight's first day (2 Nov) is planned
    # too, though the line was made on the second (the plan's hours start with the flight)
    assert days["2026-11-03"] > days["2026-11-04"] > 0
    assert sum(days.values()) < period["planned_micros"]
    recent_planned = sum(days.values()) * GOAL // GOAL_COST
    ratio = delivered / recent_planned  # every impression fell on those two days
    assert progress["recent_ratio"] == pytest.approx(ratio)
    assert progress["projected_final"] == min(
        GOAL, delivered + math.floor((GOAL - planned) * ratio))
    assert progress["pace"] == pytest.approx(delivered / planned)
    assert progress["state"] == ("behind" if delivered < 0.95 * planned else
                                 "ahead" if delivered > 1.05 * planned else "on_track")
    assert body["period"]["today"]["planned_days"] == period["planned_days"]

    login = http.post("/ui/login", data={"api_key": ADMIN_KEY}, follow_redirects=False)
    assert login.status_code == 303, login.text
    http.cookies.set(COOKIE, login.cookies[COOKIE], path="/ui")
    page = http.get(f"/ui/campaigns/{line}").text
    assert f'id="line-delivered">{delivered:,}<' in page
    assert f'id="line-planned">{planned:,}<' in page
    assert f'id="line-projected">{progress["projected_final"]:,}<' in page
    assert f'data-state="{progress["state"]}"' in page


def test_an_auction_campaign_has_no_progress(server: tuple[TestClient, Runtime]) -> None:
    """A flight-budget auction campaign has a period but no goal: ``progress`` null.
    Mutation that turns it red: :func:`recent_delivery` without its ``is_line`` check
    (the report fails on a campaign without a goal)."""
    http, _ = server
    adv = http.post("/v1/advertisers", json={"name": "b"}).json()["id"]
    r = http.post("/v1/campaigns", json={
        "advertiser_id": adv, "name": "flight", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": RATE, "time_zone": "UTC",
        "flight_start": "2026-11-02", "flight_end": "2026-11-08",
        "budget_period": "flight", "flight_budget_micros": 1_000_000})
    assert r.status_code == 201, r.text
    body = http.get(f"/v1/campaigns/{r.json()['id']}/report").json()
    assert body["period"]["budget_period"] == "flight"
    assert body["period"]["progress"] is None


def _guaranteed(**fields: Any) -> Campaign:
    values: dict[str, Any] = {
        "id": 9, "advertiser_id": 1, "name": "g", "objective": Objective.IMPRESSIONS,
        "bid_type": BidType.CPM, "bid_micros": RATE, "daily_budget_micros": 0,
        "time_zone": "UTC", "flight_start": date(2026, 11, 2),
        "flight_end": date(2026, 11, 8), "priority": Priority.GUARANTEED,
        "goal": Goal(GoalMetric.IMPRESSIONS, total=GOAL),
        "budget_period": BudgetPeriod.FLIGHT, **fields}
    return Campaign(**values)


def _recent(day: date, **events: int) -> RecentDelivery:
    return RecentDelivery(day, {date.fromisoformat(k[1:].replace("_", "-")): v
                                for k, v in events.items()})


def test_before_and_after_the_flight_no_service_is_needed() -> None:
    """Before the flight nothing is planned (``not_started``, the whole plan projected);
    after it the whole plan is planned and the projection is what was delivered.
    Mutation that turns it red: the ended test ``>=`` instead of ``>`` (the last day of
    the flight read as ended), or the ended flight asking the budget service."""
    line = _guaranteed()
    before = period_progress(line, 0, None, _recent(date(2026, 11, 1)))
    assert before is not None
    assert (before["planned_to_date"], before["projected_final"], before["state"]) == (
        0, GOAL, "not_started")
    after = period_progress(line, 650, None, _recent(date(2026, 11, 9)))
    assert after is not None
    assert (after["planned_to_date"], after["projected_final"], after["state"]) == (
        GOAL, 650, "missed")
    assert period_progress(line, 650, None, _recent(date(2026, 11, 8))) is None


def test_a_flight_budget_below_the_goals_cost_plans_fewer_events() -> None:
    """The plan spends the flight's money (here half the goal's cost): it plans half
    the goal, and the projection follows that plan. Mutation that turns it red:
    ``plan_total`` taken as the goal."""
    line = _guaranteed(flight_budget_micros=GOAL_COST // 2)
    view = {"planned_micros": GOAL_COST // 4, "planned_days": [
        {"day": "2026-11-04", "planned_micros": GOAL_COST // 20}]}
    got = period_progress(line, 175, view, _recent(date(2026, 11, 4), d2026_11_04=35))
    assert got is not None
    assert (got["plan_total"], got["planned_to_date"], got["goal"]) == (350, 175, 700)
    assert got["recent_ratio"] == 1.0 and got["projected_final"] == 350
    assert got["state"] == "on_track"


def test_a_click_line_counts_its_clicks() -> None:
    """Mutation that turns it red: :func:`recent_delivery` counting impressions for a
    clicks goal."""
    ledger = MemoryLedger()
    line = _guaranteed(bid_type=BidType.CPC, bid_micros=100_000,
                       goal=Goal(GoalMetric.CLICKS, total=50))
    at = datetime(2026, 11, 4, 9, tzinfo=UTC)
    for i in (1, 2):
        ledger.record(LedgerEvent(f"i{i}", EventType.IMPRESSION, line.id, 1, "feed", "CPC", 0,
                                  at, at.date()), 10**12)
    ledger.record(LedgerEvent("i1", EventType.CLICK, line.id, 1, "feed", "CPC", 100_000, at,
                              at.date()), 10**12)
    recent = recent_delivery(ledger, line, at)
    assert recent is not None and recent.events == {date(2026, 11, 4): 1}
