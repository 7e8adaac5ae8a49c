"""The last charges of a budget (issue 25, *Flight pacing and budget periods*): a
campaign whose GSP price is far below its bid delivers its budget, not all but the
last bid's worth of it, and absorbs at most one charge."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.gate import Served
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, Objective, PacingMode
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine

T0 = datetime(2026, 7, 15, 0, 0, tzinfo=UTC)
BID = 4_000_000  # CPM: 4,000 µ per impression at most
PRICE = 1_000  # the GSP price of every impression: a quarter of the bid
BUDGET = 20 * PRICE  # a lifetime budget of 20 prices


def _run(tmp_path, *, prices: tuple[int, ...] = (PRICE,),
         budget: int = BUDGET) -> tuple[int, int, int]:
    """One request every 2 s for 100 minutes, the i-th won at ``prices[i % len]`` and
    billed on render; returns (impressions billed, billed, absorbed) micros from the
    ledger's answers."""
    engine = make_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}")
    upgrade(engine)
    clock = ManualClock(T0)
    store, ledger = SqlCampaignStore(engine, clock), SqlLedger(engine)
    adv = store.create_advertiser("a")
    camp = store.create_campaign(
        advertiser_id=adv.id, name="c", objective=Objective.IMPRESSIONS, bid_type=BidType.CPM,
        bid_micros=BID, daily_budget_micros=10**9, lifetime_budget_micros=budget,
        time_zone="UTC", flight_start=date(2026, 1, 1), pacing_mode=PacingMode.ACCELERATED)
    gate = InProcessBudget(store, ledger, clock, engine=engine, background=False)
    n = billed = absorbed = 0
    for i in range(3_000):
        now = clock.advance(2.0)
        price = prices[i % len(prices)]
        if gate.admit(camp, now, camp.max_charge_micros) is not None:
            continue
        gate.record_served(Served(camp.id, now.date(), f"i{i}", price,
                                  now.timestamp() + 3600, max_charge_micros=price))
        rec = ledger.record(LedgerEvent(f"i{i}", EventType.IMPRESSION, camp.id, 1, "p", "CPM",
                                        price, now, now.date()), camp.daily_budget_micros,
                            budget)
        n += rec.billed_micros > 0
        billed += rec.billed_micros
        absorbed += rec.absorbed_micros
    return n, billed, absorbed


@pytest.mark.slow
def test_a_price_far_below_the_bid_delivers_the_whole_budget(tmp_path) -> None:
    """Grants used to stop when less than one bid remained: 16 of 20 prices."""
    n, billed, absorbed = _run(tmp_path)
    assert billed >= 0.98 * BUDGET, (n, billed)
    assert absorbed <= BID // 1000


@pytest.mark.slow
def test_last_grants_absorb_less_than_one_charge_when_prices_vary(tmp_path) -> None:
    """Prices of 0.3 to 1.9 of the mean: a last serve may bill above what remains; the
    ledger absorbs it, never more than one charge (the bid), and the budget is spent."""
    prices = (300, 1900, 700, 1500, 1100, 500)  # mean 1,000 µ
    n, billed, absorbed = _run(tmp_path, prices=prices)
    assert billed + absorbed >= 0.98 * BUDGET, (n, billed, absorbed)
    assert absorbed < BID // 1000
