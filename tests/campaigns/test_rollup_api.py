"""The rollup report routes (adfunnel.api.reports) on the embedded default: a
migrated SQLite database holding the campaigns, a SqlLedger and the SQL rollup store the
advertiser router makes of the campaign store's database; and the conversion figures of
the ledger report."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from adfunnel.api.campaigns import make_advertiser_router
from adfunnel.api.errors import install_error_handlers
from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.rollups import hours_of
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.sql_rollups import make_rollup_store
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.schedule import local_day
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import FixedClock
from adfunnel.db import make_engine
from tests.api_keys import ADMIN_HEADERS, install_test_auth

from .conftest import NOW

BUDGET = 10**12
H14 = datetime(2026, 11, 3, 14, tzinfo=UTC)  # 09:00 in New York


@dataclass
class World:
    client: TestClient
    ledger: SqlLedger
    store: SqlCampaignStore
    advertiser_id: int
    campaign_id: int

    def record(self, imp: str, kind: EventType, at: datetime, ad: int = 1,
               placement: str = "feed", charge: int = 0) -> None:
        ev = LedgerEvent(imp, kind, self.campaign_id, ad, placement, "CPM", charge, at,
                         local_day(at, "America/New_York"))
        self.ledger.record(ev, BUDGET)

    def invalid(self, imp: str, at: datetime, reason: str) -> None:
        ev = LedgerEvent(imp, EventType.IMPRESSION, self.campaign_id, 1, "feed", "CPM", 0,
                         at, local_day(at, "America/New_York"))
        assert self.ledger.record_invalid(ev, reason)


@pytest.fixture
def world() -> Iterator[World]:
    engine = make_engine("sqlite://")
    upgrade(engine)
    store = SqlCampaignStore(engine, FixedClock(NOW))
    ledger = SqlLedger(engine)
    app = FastAPI()
    install_error_handlers(app)
    install_test_auth(app)
    app.include_router(make_advertiser_router(store, ledger, FixedClock(NOW), None))
    adv = store.create_advertiser("Acme").id
    cid = store.create_campaign(
        advertiser_id=adv, name="c", objective="clicks", bid_type="CPM", bid_micros=2_000_000,
        daily_budget_micros=BUDGET, time_zone="America/New_York",
        flight_start=NOW.date() - timedelta(days=7),
    ).id
    with TestClient(app, headers=ADMIN_HEADERS) as client:
        yield World(client, ledger, store, adv, cid)
    engine.dispose()


def _fill(w: World) -> None:
    m = timedelta(minutes=1)
    w.record("p0", EventType.IMPRESSION, datetime(2026, 11, 3, 4, 30, tzinfo=UTC),
             charge=1_000)  # 23:30 on Nov 2 in New York
    for i in range(3):
        w.record(f"a{i}", EventType.IMPRESSION, H14 + i * m, charge=2_000)
    w.record("a0", EventType.CLICK, H14 + 5 * m)
    w.record("a0", EventType.CONVERSION, H14 + 9 * m, charge=9_000)
    w.record("b0", EventType.IMPRESSION, H14 + 70 * m, ad=2, placement="side", charge=3_000)
    w.invalid("x0", H14 + m, "crawler")
    w.invalid("x1", H14 + 80 * m, "datacenter")
    times = [datetime(2026, 11, 3, 4, 30, tzinfo=UTC), H14, H14 + 70 * m]
    make_rollup_store(w.store.engine).refresh(hours_of(times))


def url(w: World) -> str:
    return f"/v1/campaigns/{w.campaign_id}/report/rollups"


def test_daily_json_by_campaign(world: World) -> None:
    _fill(world)
    r = world.client.get(url(world), params={"from": "2026-11-02", "to": "2026-11-03"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert {k: got[k] for k in ("campaign_id", "from", "to", "time_zone", "granularity",
                                "group_by")} == {
        "campaign_id": world.campaign_id, "from": "2026-11-02", "to": "2026-11-03",
        "time_zone": "America/New_York", "granularity": "day", "group_by": "campaign"}
    days = got["rows"]
    assert [d["period_start"] for d in days] == ["2026-11-02T00:00:00-05:00",
                                                 "2026-11-03T00:00:00-05:00"]
    nov3 = days[1]
    assert {k: nov3[k] for k in ("campaign_id", "ad_id", "placement", "impressions", "clicks",
                                 "conversions", "billed_micros", "absorbed_micros", "ivt",
                                 "ecpm_micros", "cost_per_conversion_micros")} == {
        "campaign_id": world.campaign_id, "ad_id": None, "placement": None,
        "impressions": 4, "clicks": 1, "conversions": 1, "billed_micros": 18_000,
        "absorbed_micros": 0, "ivt": {"crawler": 1, "datacenter": 1},
        "ecpm_micros": 4_500_000, "cost_per_conversion_micros": 18_000}
    assert nov3["ctr"] == pytest.approx(0.25)
    assert days[0]["cost_per_conversion_micros"] is None and days[0]["impressions"] == 1
    totals = got["totals"]
    assert (totals["impressions"], totals["billed_micros"], totals["ivt"]) == (
        5, 19_000, {"crawler": 1, "datacenter": 1})


def test_hourly_json_by_ad_and_by_placement(world: World) -> None:
    _fill(world)
    params = {"from": "2026-11-03", "to": "2026-11-03", "granularity": "hour"}
    rows = world.client.get(url(world), params={**params, "group_by": "ad"}).json()["rows"]
    assert [(r["period_start"], r["ad_id"], r["impressions"]) for r in rows] == [
        ("2026-11-03T09:00:00-05:00", 1, 3), ("2026-11-03T10:00:00-05:00", 1, 0),
        ("2026-11-03T10:00:00-05:00", 2, 1)]  # local hours of the zone the answer names
    assert rows[1]["ivt"] == {"datacenter": 1} and rows[1]["ctr"] is None
    assert rows[1]["ecpm_micros"] is None
    got = world.client.get(url(world), params={**params, "granularity": "day",
                                               "group_by": "placement"}).json()
    assert [(r["placement"], r["impressions"], r["campaign_id"]) for r in got["rows"]] == [
        ("feed", 3, None), ("side", 1, None)]


def test_csv(world: World) -> None:
    _fill(world)
    r = world.client.get(url(world), params={"from": "2026-11-02", "to": "2026-11-03",
                                             "group_by": "ad"},
                         headers={"Accept": "text/csv"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    table = list(csv.reader(io.StringIO(r.text)))
    assert table[0] == ["period_start", "campaign_id", "ad_id", "impressions", "clicks",
                        "conversions", "billed_micros", "absorbed_micros", "ctr",
                        "ecpm_micros", "cost_per_conversion_micros", "rendered",
                        "viewable", "viewability_rate", "currency", "ivt_crawler",
                        "ivt_datacenter"]
    cid = str(world.campaign_id)
    assert table[1] == ["2026-11-02T00:00:00-05:00", cid, "1", "1", "0", "0", "1000", "0",
                        "0.0", "1000000", "", "0", "0", "", "USD", "0", "0"]
    assert table[2][:8] == ["2026-11-03T00:00:00-05:00", cid, "1", "3", "1", "1", "15000", "0"]
    assert table[2][-2:] == ["1", "1"]
    assert table[3][:4] == ["2026-11-03T00:00:00-05:00", cid, "2", "1"]
    assert len(table) == 4


def _fields(r: Any) -> dict[str, str]:
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "validation"
    return {f["field"]: f["problem"] for f in body["fields"]}


@pytest.mark.slow
def test_bad_values_answer_422_naming_the_field(world: World) -> None:
    u = url(world)
    assert "hour" in _fields(world.client.get(u, params={"granularity": "week"}))["granularity"]
    assert "ad" in _fields(world.client.get(u, params={"group_by": "country"}))["group_by"]
    assert "from" in _fields(world.client.get(u, params={"from": "soon"}))
    assert "from" in _fields(world.client.get(u, params={"from": "2026-11-05",
                                                         "to": "2026-11-01"}))
    assert "to" in _fields(world.client.get(u, params={"from": "2026-09-01",
                                                       "to": "2026-11-01",
                                                       "granularity": "hour"}))
    assert world.client.get(u, params={"from": "2026-09-01", "to": "2026-11-01"}).status_code \
        == 200
    assert world.client.get("/v1/campaigns/999/report/rollups").status_code == 404
    adv = f"/v1/advertisers/{world.advertiser_id}/report/rollups"
    assert "time_zone" in _fields(world.client.get(adv, params={"time_zone": "Mars/Base"}))
    assert world.client.get("/v1/advertisers/999/report/rollups").status_code == 404


def test_a_unix_time_or_a_timestamp_is_no_local_date(world: World) -> None:
    """Red when ``from``/``to`` take pydantic's lax dates (``1793664000`` → 2026-11-03)."""
    for day in ("1793664000", "2026-11-03T00:00:00Z"):
        assert "from" in _fields(world.client.get(url(world), params={"from": day}))
        assert "to" in _fields(world.client.get(url(world), params={"to": day}))


def test_defaults_and_the_advertiser_scope(world: World) -> None:
    _fill(world)
    got = world.client.get(url(world)).json()  # today in New York, by the fixed clock
    assert (got["from"], got["to"], len(got["rows"])) == ("2026-11-03", "2026-11-03", 1)
    adv = world.client.get(f"/v1/advertisers/{world.advertiser_id}/report/rollups",
                           params={"from": "2026-11-03", "time_zone": "UTC",
                                   "to": "2026-11-03"}).json()
    assert adv["advertiser_id"] == world.advertiser_id and adv["campaign_id"] is None
    assert [(r["period_start"], r["impressions"]) for r in adv["rows"]] == [
        ("2026-11-03T00:00:00Z", 5)]  # 04:30 UTC is Nov 3 in UTC


@pytest.mark.slow
def test_ledger_report_has_conversions(world: World) -> None:
    _fill(world)
    r = world.client.get(f"/v1/campaigns/{world.campaign_id}/report",
                         params={"from": "2026-11-02", "to": "2026-11-03"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["conversions"], got["cost_per_conversion_micros"]) == (1, 19_000)
    assert [(d["conversions"], d["cost_per_conversion_micros"]) for d in got["days"]] == [
        (0, None), (1, 18_000)]
    assert (got["impressions"], got["clicks"], got["billed_micros"]) == (5, 1, 19_000)


def test_ledger_report_shows_invalid_traffic_per_reason_beside_billed(world: World) -> None:
    """Flagged events are never billed, and the report names them per reason and day (the
    ledger's invalid-traffic table, through the rollups), so billed figures that look
    low can be explained."""
    _fill(world)
    world.invalid("x2", datetime(2026, 11, 3, 4, 40, tzinfo=UTC), "crawler")  # Nov 2 local
    make_rollup_store(world.store.engine).refresh(
        hours_of([datetime(2026, 11, 3, 4, 40, tzinfo=UTC)]))
    got = world.client.get(f"/v1/campaigns/{world.campaign_id}/report",
                           params={"from": "2026-11-02", "to": "2026-11-03"}).json()
    assert got["ivt"] == {"crawler": 2, "datacenter": 1}
    assert [(d["day"], d["ivt"]) for d in got["days"]] == [
        ("2026-11-02", {"crawler": 1}), ("2026-11-03", {"crawler": 1, "datacenter": 1})]
    assert got["billed_micros"] == 19_000  # none of them billed


def test_a_half_hour_zone_buckets_each_event_in_its_own_local_day_and_hour(
    world: World,
) -> None:
    """Adelaide (+10:30): 23:50 on 3 March and 00:10 on 4 March are a day apart in the
    ledger report, the rollups (JSON and CSV) and their local hours alike."""
    cid = world.store.create_campaign(
        advertiser_id=world.advertiser_id, name="adl", objective="clicks", bid_type="CPM",
        bid_micros=2_000_000, daily_budget_micros=BUDGET, time_zone="Australia/Adelaide",
        flight_start=datetime(2026, 3, 1).date(),
    ).id
    times = [datetime(2026, 3, 3, 13, 20, tzinfo=UTC),  # 23:50 on 3 March in Adelaide
             datetime(2026, 3, 3, 13, 40, tzinfo=UTC)]  # 00:10 on 4 March
    for i, at in enumerate(times):
        world.ledger.record(LedgerEvent(f"adl{i}", EventType.IMPRESSION, cid, 1, "feed", "CPM",
                                        1_000, at, local_day(at, "Australia/Adelaide")), BUDGET)
    make_rollup_store(world.store.engine).refresh(hours_of(times))
    span = {"from": "2026-03-03", "to": "2026-03-04"}
    ledger = world.client.get(f"/v1/campaigns/{cid}/report", params=span).json()
    assert [(d["day"], d["impressions"]) for d in ledger["days"]] == [
        ("2026-03-03", 1), ("2026-03-04", 1)]
    u = f"/v1/campaigns/{cid}/report/rollups"
    days = world.client.get(u, params=span).json()
    assert days["time_zone"] == "Australia/Adelaide"
    assert [(r["period_start"], r["impressions"]) for r in days["rows"]] == [
        ("2026-03-03T00:00:00+10:30", 1), ("2026-03-04T00:00:00+10:30", 1)]
    hours = world.client.get(u, params={**span, "granularity": "hour"}).json()
    assert [(r["period_start"], r["impressions"]) for r in hours["rows"]] == [
        ("2026-03-03T23:00:00+10:30", 1), ("2026-03-04T00:00:00+10:30", 1)]
    table = list(csv.reader(io.StringIO(world.client.get(
        u, params={**span, "granularity": "hour"}, headers={"Accept": "text/csv"}).text)))
    assert [row[:3] for row in table[1:]] == [
        ["2026-03-03T23:00:00+10:30", str(cid), "1"], ["2026-03-04T00:00:00+10:30", str(cid), "1"]]
