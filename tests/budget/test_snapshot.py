"""The bulk snapshot a metrics scrape reads equals, campaign by campaign, what the
service's per-campaign days say: state, p, budget, billed and committed spend (with
open, expired and closed slices, spend in flight and billed spend), across local days."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import pytest

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import Served
from adfunnel.budget.metrics import CampaignSeries
from adfunnel.budget.protocol import BilledUpdate, Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.budget.snapshot import STATE_NAMES, BudgetSnapshot
from adfunnel.campaigns.model import BidType, Campaign, Objective, PacingMode
from adfunnel.clock import ManualClock
from tests.internal_token import INTERNAL_HEADERS, INTERNAL_TOKEN

START = datetime(2026, 10, 24, 21, 0, tzinfo=UTC)
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu"]


class _Direct:
    """In-memory transport straight into one service."""

    def __init__(self, svc: BudgetService) -> None:
        self.svc = svc

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        on_reply(self.svc.handle_report(report))


def _campaigns(rng: random.Random, n: int) -> list[Campaign]:
    return [Campaign(cid, 1, f"c{cid}", Objective.CLICKS, BidType.CPC,
                     rng.choice([500_000, 2_000_000]),
                     rng.choice([4_000_000, 20_000_000, 1_000_000_000]), rng.choice(ZONES),
                     date(2026, 1, 1),
                     pacing_mode=rng.choice([PacingMode.EVEN, PacingMode.ACCELERATED]))
            for cid in range(1, n + 1)]


def _one_by_one(svc: BudgetService, now: float) -> dict[int, tuple]:
    out = {}
    for cid in svc.owned().ids.tolist():
        cd = svc.current(cid, now)
        assert cd is not None
        out[cid] = (cd.state.value, cd.ctl.p, cd.daily_budget_micros, cd.billed,
                    cd.committed(now))
    return out


def _bulk(snap: BudgetSnapshot) -> dict[int, tuple]:
    return {int(c): (STATE_NAMES[int(s)], float(p), int(b), int(billed), int(committed))
            for c, s, p, b, billed, committed in zip(
                snap.campaign_id, snap.state, snap.p, snap.budget_micros,
                snap.billed_micros, snap.committed_micros, strict=True)}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_snapshot_equals_each_campaign_day(seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock(START)
    svc = BudgetService(clock, warmup_s=0.0)
    camps = _campaigns(rng, 12)
    for c in camps:
        svc.upsert_campaign(c)
    clients = [BudgetClient(f"s{i}", clock, _Direct(svc)) for i in range(3)]
    n = 0
    for _ in range(60):  # past local midnights of every zone
        clock.advance(rng.choice([1.0, 5.0, 30.0, 600.0]))
        now = clock.now()
        for client in clients:
            if rng.random() < 0.2:
                continue  # this server misses a report: its slices may expire
            for c in rng.sample(camps, 4):
                if client.admit(c, now, c.bid_micros) is None:
                    n += 1
                    day = svc.current(c.id, now.timestamp()).day
                    client.record_served(Served(c.id, day, f"i{n}", c.bid_micros, 0.0,
                                                c.bid_micros))
            client.report()
        if rng.random() < 0.3:
            c = rng.choice(camps)
            day = svc.current(c.id, now.timestamp()).day
            svc.record_billed(BilledUpdate(c.id, day.isoformat(), rng.randrange(0, 3_000_000),
                                           (now - timedelta(seconds=rng.random() * 60))
                                           .timestamp()))
        if rng.random() < 0.3:
            svc.step()
        t = now.timestamp()
        assert _bulk(svc.snapshot(t)) == _one_by_one(svc, t)


def test_the_collector_folds_a_snapshot_like_the_status_records() -> None:
    rows = [{"campaign_id": cid, "state": state, "p": p, "budget_micros": 1_000,
             "billed_micros": billed, "committed_micros": committed}
            for cid, state, p, billed, committed in [
                (7, "open", 1.0, 10, 10), (3, "metered", 0.5, 900, 1_200),
                (5, "exhausted", 0.0, 900, 900), (9, "stopped", 0.2, 0, 0)]]
    series = CampaignSeries()
    series.follow(lambda: BudgetSnapshot.from_status(rows), top=2)
    got = {(fam.name, tuple(sorted(s.labels.items()))): s.value
           for fam in series.collect() for s in fam.samples}
    # 3 and 5 tie on spend: the lower id comes first; 7 and 9 are folded
    assert got[("adfunnel_daily_spend_micros", (("campaign", "3"),))] == 900
    assert got[("adfunnel_daily_spend_micros", (("campaign", "5"),))] == 900
    assert got[("adfunnel_daily_spend_micros", (("campaign", "other"),))] == 10
    assert got[("adfunnel_overdelivery_pct", (("campaign", "3"),))] == pytest.approx(20.0)
    assert got[("adfunnel_pacing_p", (("campaign", "other"),))] == pytest.approx(0.6)
    assert got[("adfunnel_budget_state", (("campaign", "other"), ("state", "open")))] == 1
    assert got[("adfunnel_budget_state", (("campaign", "other"), ("state", "stopped")))] == 1
    assert got[("adfunnel_budget_state", (("campaign", "5"), ("state", "metered")))] == 0
    with pytest.raises(ValueError):
        BudgetSnapshot.from_status([{**rows[0], "state": "asleep"}])


def test_the_state_codes_are_the_services() -> None:
    from adfunnel.budget.rows import STATE_VALUES

    assert STATE_VALUES == STATE_NAMES


def test_a_budget_service_exports_its_campaigns_series(tmp_path) -> None:
    """``adfunnel budget-service``'s app: its ``/metrics`` carries the per-campaign series,
    read from its snapshot (the top by spend labelled, the rest folded)."""
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from adfunnel.billing.sql_ledger import SqlLedger
    from adfunnel.budget.metrics import CAMPAIGNS, OTHER
    from adfunnel.budget.process import BudgetServiceProcess
    from adfunnel.campaigns.migrate import upgrade
    from adfunnel.campaigns.sql_store import SqlCampaignStore
    from adfunnel.db import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite3'}")
    upgrade(engine)
    clock = ManualClock(START)
    store = SqlCampaignStore(engine, clock)
    adv = store.create_advertiser("a")
    made = [store.create_campaign(
        advertiser_id=adv.id, name=f"c{i}", objective=Objective.IMPRESSIONS,
        bid_type=BidType.CPM, bid_micros=2_000_000, daily_budget_micros=(i + 1) * 10**8,
        time_zone="UTC", flight_start=date(2026, 1, 1)) for i in range(3)]
    proc = BudgetServiceProcess(store, SqlLedger(engine), clock, engine=engine,
                                expected_servers={"s"})
    proc.metrics_top = 1
    proc.load()
    try:
        with TestClient(proc.app(INTERNAL_TOKEN), headers=INTERNAL_HEADERS) as client:
            text = client.get("/metrics").text
    finally:
        CAMPAIGNS.follow(None)
        engine.dispose()
    budgets = {s.labels["campaign"]: s.value for f in text_string_to_metric_families(text)
               if f.name == "adfunnel_daily_budget_micros" for s in f.samples}
    # nothing billed: the lowest id is the top one, the other two are folded
    assert budgets == {str(made[0].id): 10**8, OTHER: 5 * 10**8}
