"""The server facts the dashboard reads, on a real embedded runtime (SQLite in memory,
manual clock, the in-process budget service), with real decisions over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.campaigns.model import CapLevel, CapWindow, FrequencyCap
from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from adfunnel.ui.delivery import DeliveryStatus, delivery_status
from adfunnel.ui.facts import CHART_STEP_S, ServerFacts, _cumulative_spend, _p_steps
from adfunnel.ui.views import servable

START = datetime(2026, 7, 15, 9, 0, tzinfo=UTC)


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32)
    runtime = build_runtime(settings, ManualClock(START), seed=1)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    """The runtime's app; its shutdown closes the runtime, so tests read facts inside."""
    with TestClient(build_app(rt)) as c:
        yield c


def make_campaign(rt: Runtime, **overrides: Any) -> int:
    adv = rt.store.create_advertiser("Acme")
    values: dict[str, Any] = {
        "advertiser_id": adv.id, "name": "c", "objective": "clicks", "bid_type": "CPM",
        "bid_micros": 3_000_000, "daily_budget_micros": 10_000_000, "time_zone": "UTC",
        "flight_start": date(2026, 7, 1),
        "billable_event": "rendered",  # these tests fire /i as the billed impression
        **overrides}
    c = rt.store.create_campaign(**values)
    rt.store.create_ad(campaign_id=c.id, landing_url="https://a.example/", creative_ref="x",
                       format="banner", width=300, height=250)
    return c.id


def select(client: TestClient, user: str, country: str = "US") -> dict[str, Any] | None:
    r = client.post("/v1/ads:select", json={
        "user": {"key": user, "attributes": {"geo.country": country}},
        "placement": {"id": "feed", "reserve_cpm_micros": 500_000},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
        "deadline_ms": 2000})
    return r.json() if r.status_code == 200 else None


def status_of(rt: Runtime, campaign_id: int) -> DeliveryStatus:
    facts = ServerFacts(rt)
    c = rt.store.get_campaign(campaign_id)
    record = {"id": c.id, "status": c.status.value, "time_zone": c.time_zone,
              "flight_start": c.flight_start.isoformat(),
              "flight_end": c.flight_end.isoformat() if c.flight_end else None}
    ads = [{"review_state": a.review_state.value, "status": a.status.value}
           for a in rt.store.list_ads(campaign_id)]
    since = START.replace(hour=0)
    billed = facts.billed_today([{"id": c.id, "time_zone": c.time_zone}])[c.id]
    budget = asyncio.run(facts.budget_rows([c.id])).get(c.id)
    f = facts.delivery_facts(record, servable(ads), budget,
                             facts.matched_requests([c.id], since)[c.id],
                             facts.capped_requests([c.id], since)[c.id], billed)
    return delivery_status(f)


def test_matched_and_capped_requests_follow_the_decisions(rt: Runtime,
                                                          client: TestClient) -> None:
    capped = make_campaign(rt, frequency_caps=(
        FrequencyCap.counter(1, CapWindow.DAY, CapLevel.CAMPAIGN),))
    elsewhere = make_campaign(rt, targeting='{"attr": "geo.country", "in": ["FR"]}')
    won = [select(client, "same-user") for _ in range(4)]
    assert won[0] is not None and won[0]["ads"][0]["campaign_id"] == capped
    assert all(w is None for w in won[1:])  # one serve a day for this user
    facts = ServerFacts(rt)
    since = START.replace(hour=0)
    assert facts.matched_requests([capped, elsewhere], since) == {capped: 4, elsewhere: 0}
    assert facts.capped_requests([capped, elsewhere], since) == {capped: 3, elsewhere: 0}
    assert status_of(rt, capped) is DeliveryStatus.CAPPED
    assert status_of(rt, elsewhere) is DeliveryStatus.LIMITED_BY_TARGETING
    # flushed to the traffic log by the budget service's shape job, still counted
    rt.clock.set(START + timedelta(hours=1, minutes=1))
    assert facts.matched_requests([capped], since) == {capped: 4}


def test_delivering_then_paused_and_no_ads(rt: Runtime, client: TestClient) -> None:
    # not paced: five serves in a minute whose billed price (the runner-up's) is far
    # below the bid they were committed at read to the controller as a campaign behind
    # its curve at p = 1 ("limited by bid"), which is not what this test is about
    cid = make_campaign(rt, pacing_mode="accelerated")
    for i in range(5):
        answer = select(client, f"u{i}")
        assert answer is not None
        assert client.get(answer["ads"][0]["impression_url"]).status_code == 204
    rt.clock.set(START + timedelta(minutes=1))  # settles the beacons into the ledger
    assert status_of(rt, cid) is DeliveryStatus.DELIVERING
    rt.store.update_campaign(cid, {"status": "paused"})
    assert status_of(rt, cid) is DeliveryStatus.PAUSED
    pending = make_campaign(rt)
    ad = rt.store.list_ads(pending)[0]
    rt.store.update_ad(ad.id, {"review_state": "rejected"})
    assert status_of(rt, pending) is DeliveryStatus.NO_APPROVED_ADS


def test_exhausted_budget_is_limited_by_budget(rt: Runtime, client: TestClient) -> None:
    cid = make_campaign(rt, daily_budget_micros=10_000, pacing_mode="accelerated")
    for i in range(40):
        rt.clock.set(START + timedelta(seconds=20 * i))
        answer = select(client, f"u{i}")
        if answer is not None:
            client.get(answer["ads"][0]["impression_url"])
    rt.clock.set(START + timedelta(minutes=15))
    billed = rt.ledger.billed_on(START.date())[cid]
    assert billed > 0  # 500 micros an impression (the reserve); 3,000 held for each serve
    assert status_of(rt, cid) is DeliveryStatus.LIMITED_BY_BUDGET


@pytest.mark.slow
def test_pacing_chart_has_spend_target_and_p(rt: Runtime, client: TestClient) -> None:
    cid = make_campaign(rt, daily_budget_micros=1_000_000)
    for i in range(30):
        rt.clock.set(START + timedelta(minutes=2 * i))
        answer = select(client, f"u{i}")
        if answer is not None:
            client.get(answer["ads"][0]["impression_url"])
    rt.clock.set(START + timedelta(hours=1))
    facts = ServerFacts(rt)
    c = rt.store.get_campaign(cid)
    billed = rt.ledger.billed_on(START.date())[cid]
    chart = asyncio.run(facts.pacing_chart({"id": cid, "time_zone": "UTC",
                                            "daily_budget_micros": c.daily_budget_micros}, {}))
    assert chart["hours"][0] == 0 and chart["hours"][-1] == 24
    assert chart["now_hours"] == 10.0
    spend = chart["spend_micros"]
    assert spend[0] == 0 and spend[40] == billed > 0 and all(v is None for v in spend[41:])
    assert chart["target_micros"][-1] == pytest.approx(1_000_000)
    target_now = chart["target_micros"][40]
    assert 0 < target_now < 1_000_000
    assert all(p is not None and 0 < p <= 1 for p in chart["p"][:41])
    assert all(p is None for p in chart["p"][41:])


def test_cumulative_spend_places_hours_at_their_end() -> None:
    start = datetime(2026, 7, 15, tzinfo=UTC)
    grid = list(range(0, 86_400 + 1, CHART_STEP_S))
    hourly = {start + timedelta(hours=1): 100, start + timedelta(hours=2): 50}
    out = _cumulative_spend(grid, start, hourly, elapsed_now=2.6 * 3600, billed_now=190)
    assert out[0] == 0 and out[4] == 0  # 01:00: nothing billed in the first hour
    assert out[8] == 100  # 02:00: the end of the 01:00 hour
    assert out[10] == 190  # 02:30, the last point before now: the ledger's total
    assert out[6] is None and all(v is None for v in out[11:])


def test_p_steps_hold_the_last_step() -> None:
    grid = [0, 900, 1800, 2700, 3600]
    out = _p_steps(grid, {0: 1.0, 20: 0.5, 40: 0.25}, p_now=0.3, elapsed_now=2800)
    assert out == [1.0, 1.0, 0.5, 0.3, None]
