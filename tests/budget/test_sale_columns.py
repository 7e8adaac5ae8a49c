"""The budget service's campaign columns carry how each campaign is sold (#25): priority,
budget period, flight budget, a goal's total and the frontloaded pacing mode, read in
SQL at start-up exactly as from the records (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest

from adfunnel.budget.campaign_table import read_campaign_columns
from adfunnel.budget.columns import PERIOD_CODE, PRIORITY_CODE, CampaignColumns
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BudgetPeriod, Priority
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine

BASE = {"objective": "impressions", "bid_type": "CPM", "bid_micros": 5_000_000,
        "daily_budget_micros": 10_000_000, "time_zone": "UTC",
        "flight_start": date(2026, 11, 2)}
KINDS = [
    {},  # an auction campaign by the day, as before #25
    {"priority": "guaranteed", "goal": {"metric": "impressions", "total": 2_000_000},
     "budget_period": "flight", "flight_end": date(2026, 11, 29), "daily_budget_micros": 0},
    {"priority": "guaranteed", "goal": {"metric": "clicks", "total": 9_000}, "bid_type": "CPC",
     "budget_period": "flight", "flight_end": date(2026, 11, 29), "pacing_mode": "frontloaded",
     "flight_budget_micros": 7_000_000_000},
    {"priority": "sponsorship", "goal": {"metric": "share", "share": 0.5},
     "flight_end": date(2026, 11, 3)},
    {"budget_period": "flight", "flight_end": date(2026, 11, 29),
     "flight_budget_micros": 300_000_000, "pacing_mode": "accelerated"},
    {"budget_period": "average_day", "pacing_mode": "frontloaded"},
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_url(request: pytest.FixtureRequest, tmp_path) -> str:
    return (f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite"
            else request.getfixturevalue("pg_schema_url"))


def test_sale_columns_read_in_sql_equal_those_of_the_records(engine_url: str) -> None:
    engine = make_engine(engine_url)
    try:
        upgrade(engine)
        store = SqlCampaignStore(engine, ManualClock(datetime(2026, 11, 1, tzinfo=UTC)))
        adv = store.create_advertiser("a")
        for i, kind in enumerate(KINDS):
            store.create_campaign(advertiser_id=adv.id, name=f"c{i}", **{**BASE, **kind})
        got = read_campaign_columns(engine)
        want = CampaignColumns.of(store.list_campaigns())
        order_got, order_want = np.argsort(got.ids), np.argsort(want.ids)
        for name in ("priority", "period", "flight_budget", "goal_total", "front", "even",
                     "accel", "special"):
            assert (getattr(got, name)[order_got].tolist()
                    == getattr(want, name)[order_want].tolist()), name
        assert want.priority[order_want].tolist() == [
            PRIORITY_CODE[p] for p in (Priority.AUCTION, Priority.GUARANTEED,
                                       Priority.GUARANTEED, Priority.SPONSORSHIP,
                                       Priority.AUCTION, Priority.AUCTION)]
        assert want.period[order_want].tolist() == [
            PERIOD_CODE[p] for p in (BudgetPeriod.DAY, BudgetPeriod.FLIGHT, BudgetPeriod.FLIGHT,
                                     BudgetPeriod.DAY, BudgetPeriod.FLIGHT,
                                     BudgetPeriod.AVERAGE_DAY)]
        assert want.goal_total[order_want].tolist() == [-1, 2_000_000, 9_000, -1, -1, -1]
        assert want.flight_budget[order_want].tolist() == [-1, -1, 7_000_000_000, -1,
                                                           300_000_000, -1]
        assert want.front[order_want].tolist() == [False, False, True, False, False, True]
        # frontloaded is paced (its plan's shape is the budget periods' business)
        assert want.even[order_want].tolist() == [True, True, True, True, False, True]
        # the service reads the records of campaigns with a period, dayparts or frontloading
        assert want.special[order_want].tolist() == [False, True, True, False, True, True]
    finally:
        engine.dispose()
