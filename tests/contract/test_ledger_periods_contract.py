"""Budget periods' limits in the Ledger contract (MemoryLedger, SqlLedger on SQLite and
PostgreSQL): nothing above a flight's money, an average-day's 2× day or 30.4× month or
a goal's event count is billed; the excess is absorbed; billed + absorbed == charge.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adfunnel.billing.ledger import LedgerWrite
from adfunnel.billing.limits import (
    GOAL_OVER_DELIVERY,
    NO_DAY_CAP,
    PeriodLimits,
    write_budgets,
)
from adfunnel.billing.model import EventType, LedgerEvent, Outcome
from adfunnel.campaigns.model import (
    BidType,
    BudgetPeriod,
    Campaign,
    Goal,
    GoalMetric,
    Objective,
    Priority,
)

from .conftest import LedgerBackend

START = date(2026, 3, 1)
_RUNS = itertools.count(1)


def _event(n: int | str, day: date, charge: int, *, cid: int = 7, per_mille: bool = False,
           etype: EventType = EventType.IMPRESSION) -> LedgerEvent:
    return LedgerEvent(f"p{cid}-{n}", etype, cid, cid * 10, "feed", "CPM" if per_mille else "CPC",
                       charge, datetime(day.year, day.month, day.day, 12, tzinfo=UTC), day,
                       charge_per_mille=per_mille)


def test_a_flight_bills_nothing_above_its_budget(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    c = Campaign(7, 1, "f", Objective.CLICKS, BidType.CPC, 400_000, 0, "UTC", START,
                 date(2026, 3, 7), budget_period=BudgetPeriod.FLIGHT,
                 flight_budget_micros=1_000_000)
    daily, life, limits = write_budgets(c)
    assert (daily, life, limits) == (NO_DAY_CAP, 1_000_000, None)
    got = [ledger.record_many([LedgerWrite(_event(i, START + timedelta(days=i % 3), 300_000),
                                           daily, life, period=limits)]).recorded[0]
           for i in range(5)]
    assert sum(r.billed_micros for r in got) == 1_000_000
    assert [r.absorbed_micros for r in got] == [0, 0, 0, 200_000, 300_000]
    assert got[-1].lifetime_remaining_micros == 0


def test_an_average_day_stops_at_2x_a_day_and_30_4x_a_month(
        ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    c = Campaign(7, 1, "a", Objective.CLICKS, BidType.CPC, 500_000, 1_000_000, "UTC", START,
                 budget_period=BudgetPeriod.AVERAGE_DAY)
    daily, life, limits = write_budgets(c)
    assert daily == 2_000_000 and limits == PeriodLimits(30_400_000, None, None, START, None)
    billed_by_day: dict[date, int] = {}
    n = 0
    for d in range(31):  # 5 charges of 500k a day: 2.5M wanted, 2M a day allowed
        day = START + timedelta(days=d)
        writes = [LedgerWrite(_event(n + k, day, 500_000), daily, life, period=limits)
                  for k in range(5)]
        n += 5
        plan = ledger.record_many(writes)
        for r in plan.recorded:
            assert r.billed_micros + r.absorbed_micros == 500_000
        billed_by_day[day] = sum(r.billed_micros for r in plan.recorded)
    assert max(billed_by_day.values()) == 2_000_000
    assert sum(billed_by_day.values()) == 30_400_000
    # the next month starts again
    april = ledger.record_many([LedgerWrite(_event(999, date(2026, 4, 1), 500_000), daily,
                                            life, period=limits)]).recorded[0]
    assert april.billed_micros == 500_000


def test_a_goal_bills_no_event_past_it(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    # 1,000 impressions at a 1,500-micro CPM: costs 1,500 micros; per-mille charges
    c = Campaign(7, 1, "g", Objective.IMPRESSIONS, BidType.CPM, 1_500, 0, "UTC", START,
                 date(2026, 3, 3), priority=Priority.GUARANTEED,
                 goal=Goal(GoalMetric.IMPRESSIONS, total=1_000),
                 budget_period=BudgetPeriod.FLIGHT)
    daily, life, limits = write_budgets(c)
    assert life == 1_500 and limits is not None and limits.goal_total == 1_000
    writes = [LedgerWrite(_event(i, START + timedelta(days=i // 400), 1_500, per_mille=True),
                          daily, life, period=limits) for i in range(1_100)]
    plan = ledger.record_many(writes[:700])
    plan2 = ledger.record_many(writes[700:])
    rec = plan.recorded + plan2.recorded
    assert all(r.outcome is Outcome.BILLED for r in rec)
    assert sum(r.billed_micros for r in rec) <= 1_500
    assert all(r.billed_micros == 0 for r in rec[1_000:])
    assert ledger.counters()[GOAL_OVER_DELIVERY] == 100
    totals = ledger.day_totals(7, START, date(2026, 3, 3))
    assert sum(t.impressions for t in totals) == 1_100  # over-delivery is recorded


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(charges=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2_000_000),
                                  st.sampled_from(list(BudgetPeriod)),
                                  st.integers(0, 3)), min_size=1, max_size=40),
       daily=st.integers(0, 3_000_000), flight=st.integers(0, 20_000_000),
       goal=st.integers(1, 30))
def test_whatever_the_charges_nothing_billed_exceeds_any_limit(
        ledger_backend: LedgerBackend, charges: list[tuple[int, int, BudgetPeriod, int]],
        daily: int, flight: int, goal: int) -> None:
    # the backend lives across examples: fresh campaign ids and impression ids each time
    ledger = ledger_backend.open()
    run = next(_RUNS)
    cpc = (Objective.CLICKS, BidType.CPC, 1, daily, "UTC", START)
    camps = {
        BudgetPeriod.DAY: Campaign(run * 3 + 1, 1, "d", *cpc),
        BudgetPeriod.AVERAGE_DAY: Campaign(run * 3 + 2, 1, "a", *cpc,
                                           budget_period=BudgetPeriod.AVERAGE_DAY),
        BudgetPeriod.FLIGHT: Campaign(run * 3 + 3, 1, "g", *cpc, date(2026, 4, 30),
                                      priority=Priority.GUARANTEED,
                                      goal=Goal(GoalMetric.IMPRESSIONS, total=goal),
                                      budget_period=BudgetPeriod.FLIGHT,
                                      flight_budget_micros=flight),
    }
    writes = []
    for i, (d, charge, period, _) in enumerate(charges):
        c = camps[period]
        dl, life, limits = write_budgets(c)
        ev = _event(f"{run}-{i}", START + timedelta(days=d), charge, cid=c.id)
        writes.append(LedgerWrite(ev, dl, life, period=limits))
    cut = {0}
    for _, _, _, k in charges:
        cut.add(min(len(writes), len(cut) * k))
    bounds = sorted(cut | {len(writes)})
    recorded = []
    for a, b in itertools.pairwise(bounds):
        recorded += ledger.record_many(writes[a:b]).recorded
    by_day: dict[tuple[int, date], int] = {}
    by_month: dict[tuple[int, int], int] = {}
    life_total: dict[int, int] = {}
    goal_billed = 0
    for w, r in zip(writes, recorded, strict=True):
        assert r.billed_micros + r.absorbed_micros == w.event.charge_micros
        e = w.event
        by_day[(e.campaign_id, e.day)] = by_day.get((e.campaign_id, e.day), 0) + r.billed_micros
        mk = (e.campaign_id, e.day.month)
        by_month[mk] = by_month.get(mk, 0) + r.billed_micros
        life_total[e.campaign_id] = life_total.get(e.campaign_id, 0) + r.billed_micros
        if e.campaign_id == run * 3 + 3 and r.billed_micros:
            goal_billed += 1
    for (cid, _), billed in by_day.items():
        kind = cid - run * 3
        assert billed <= (daily if kind == 1 else 2 * daily if kind == 2 else
                          (daily if daily > 0 else NO_DAY_CAP))
    for (cid, _), billed in by_month.items():
        if cid == run * 3 + 2:
            assert billed <= daily * 304 // 10
    assert life_total.get(run * 3 + 3, 0) <= flight
    assert goal_billed <= goal


def test_a_held_click_released_by_its_impression_keeps_the_month_limit(
        ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    c = Campaign(8, 1, "a", Objective.CLICKS, BidType.CPC, 1_000, 1_000, "UTC", START,
                 budget_period=BudgetPeriod.AVERAGE_DAY)
    daily, life, limits = write_budgets(c)

    def w(n: str, day: date, etype: EventType, charge: int) -> LedgerWrite:
        return LedgerWrite(_event(n, day, charge, cid=8, etype=etype), daily, life,
                           period=limits)

    for d in range(15):  # 2,000 a day (2x): 30,000 of the month's 30,400
        day = START + timedelta(days=d)
        for k in range(2):
            ledger.record_many([w(f"{d}-{k}", day, EventType.IMPRESSION, 0),
                                w(f"{d}-{k}", day, EventType.CLICK, 1_000)])
    day = START + timedelta(days=15)
    held = ledger.record_many([w("late", day, EventType.CLICK, 1_000)]).recorded[0]
    assert held.outcome is Outcome.HELD
    plan = ledger.record_many([w("late", day, EventType.IMPRESSION, 0)])
    (_, released), = plan.released
    assert (released.billed_micros, released.absorbed_micros) == (400, 600)
