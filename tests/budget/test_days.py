"""A shard's ``GET /v1/days`` answers what the embedded dashboard reads under the lock
(:func:`adfunnel.budget.days.day_view`), routed by campaign id over HTTP by the
dashboard's remote reads; bad parameters are 422 naming the field."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, date, datetime

import httpx
import pytest
from fastapi.testclient import TestClient

from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget.days import DAY_S, MAX_DAYS, day_view
from adfunnel.budget.metrics import CAMPAIGNS
from adfunnel.budget.process import BudgetServiceProcess
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, Objective
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.ui.budget_reads import LocalBudgetReads, RemoteBudgetReads
from tests.internal_token import INTERNAL_HEADERS, INTERNAL_TOKEN

NOW = datetime(2026, 7, 15, 9, 30, tzinfo=UTC)


@pytest.fixture
def proc(tmp_path) -> Iterator[BudgetServiceProcess]:
    engine = make_engine(f"sqlite:///{tmp_path / 'd.sqlite3'}")
    upgrade(engine)
    clock = ManualClock(NOW)
    store = SqlCampaignStore(engine, clock)
    adv = store.create_advertiser("a")
    for i, tz in enumerate(["UTC", "Asia/Kathmandu", "America/New_York"]):
        store.create_campaign(advertiser_id=adv.id, name=f"c{i}", objective=Objective.CLICKS,
                              bid_type=BidType.CPC, bid_micros=500_000,
                              daily_budget_micros=(i + 1) * 10_000_000, time_zone=tz,
                              flight_start=date(2026, 7, 1))
    p = BudgetServiceProcess(store, SqlLedger(engine), clock, engine=engine,
                             expected_servers={"s"})
    p.load()
    clock.advance(30)
    p.step()
    yield p
    CAMPAIGNS.follow(None)
    engine.dispose()


def test_the_days_route_answers_the_day_view(proc: BudgetServiceProcess) -> None:
    now = proc.clock.now().timestamp()
    with TestClient(proc.app(INTERNAL_TOKEN), headers=INTERNAL_HEADERS) as http:
        days = http.get("/v1/days", params={"campaign_ids": "1,2,3,99"}).json()["days"]
        assert days == [day_view(proc.service, cid, now) for cid in (1, 2, 3)]
        assert {d["day"] for d in days} == {"2026-07-15"}  # 15:15 in Kathmandu, 05:30 NY
        plan = http.get("/v1/days/2", params={"plan_step_s": "900"}).json()
        assert plan == day_view(proc.service, 2, now, 900)
        assert len(plan["target_micros"]) == DAY_S // 900 + 1
        assert plan["target_micros"][-1] == pytest.approx(20_000_000)
        assert "target_micros" not in http.get("/v1/days/2").json()
        for path, params, field in [
                ("/v1/days", {"campaign_ids": "1,x"}, "campaign_ids"),
                ("/v1/days", {"campaign_ids": ",".join(["1"] * (MAX_DAYS + 1))},
                 "campaign_ids"),
                ("/v1/days/abc", {}, "campaign_id"),
                ("/v1/days/1", {"plan_step_s": "5"}, "plan_step_s"),
                ("/v1/days/1", {"plan_step_s": "soon"}, "plan_step_s")]:
            r = http.get(path, params=params)
            assert r.status_code == 422, (path, params)
            assert r.json()["fields"][0]["field"] == field
        missing = http.get("/v1/days/99")
        assert missing.status_code == 404
        assert missing.json()["fields"][0]["field"] == "campaign_id"


def test_remote_reads_over_http_equal_the_local_ones(proc: BudgetServiceProcess) -> None:
    local = LocalBudgetReads(proc, proc.clock)

    async def both() -> tuple:
        # the shard's real app over HTTP (ASGI transport), two "shards" of one process:
        # campaign 2 goes to the second (2 % 2 = 0 goes to the first, 1 and 3 the second)
        app = proc.app(INTERNAL_TOKEN)
        clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url=f"http://shard{i}") for i in range(2)]
        remote = RemoteBudgetReads([], token=INTERNAL_TOKEN, clients=clients)
        try:
            return (await remote.days([1, 2, 3, 99]), await local.days([1, 2, 3, 99]),
                    await remote.plan(3, 900), await local.plan(3, 900),
                    await remote.plan(99, 900))
        finally:
            await remote.aclose()

    r_days, l_days, r_plan, l_plan, missing = asyncio.run(both())
    assert r_days == l_days and sorted(r_days) == [1, 2, 3]
    assert r_plan == l_plan and r_plan is not None
    assert missing is None


def test_a_shard_that_does_not_answer_leaves_its_campaigns_out() -> None:
    async def read() -> tuple:
        remote = RemoteBudgetReads(["http://127.0.0.1:9"], token=INTERNAL_TOKEN,
                                   timeout_s=0.5)  # nobody there
        try:
            return await remote.days([1, 2]), await remote.plan(1, 900)
        finally:
            await remote.aclose()

    assert asyncio.run(read()) == ({}, None)
