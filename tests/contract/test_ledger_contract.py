"""The Ledger contract, run against MemoryLedger, SqlLedger on SQLite and on PostgreSQL.

Money rules under test (DESIGN.md §Events and billing, §Money and budgets): one row per
(impression id, event type); a click bills only after its impression; nothing above a
campaign's daily budget is billed, the excess is absorbed; billed + absorbed == charge.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.billing.ledger import Ledger, LedgerWrite, MemoryLedger
from adfunnel.billing.model import DayTotals, EventType, LedgerEvent, Outcome, Recorded
from adfunnel.money import MoneyError

from .conftest import LedgerBackend

DAY = date(2026, 3, 14)
BIG_BUDGET = 10**12


def event(
    impression_id: str,
    event_type: EventType = EventType.IMPRESSION,
    *,
    charge: int = 2_000,
    campaign_id: int = 1,
    day: date = DAY,
    billing_type: str = "CPM",
    at: datetime | None = None,
    per_mille: bool = False,
    served: datetime | None = None,
    expected: int | None = None,
) -> LedgerEvent:
    return LedgerEvent(
        impression_id=impression_id,
        event_type=event_type,
        campaign_id=campaign_id,
        ad_id=campaign_id * 10,
        placement="feed_top",
        billing_type=billing_type,
        charge_micros=charge,
        occurred_at=at or datetime(day.year, day.month, day.day, 12, tzinfo=UTC),
        day=day,
        charge_per_mille=per_mille,
        served_at=served,
        expected_micros=expected,
    )


def click(impression_id: str, charge: int = 1_400_000, **kw: object) -> LedgerEvent:
    return event(impression_id, EventType.CLICK, charge=charge, billing_type="CPC", **kw)  # type: ignore[arg-type]


def race(n_threads: int, work: Callable[[int], list[Recorded]]) -> list[Recorded]:
    """Run ``work(thread_index)`` on ``n_threads`` threads released together."""
    barrier = threading.Barrier(n_threads)

    def run(i: int) -> list[Recorded]:
        barrier.wait(timeout=30)
        return work(i)

    with ThreadPoolExecutor(n_threads) as pool:
        results = list(pool.map(run, range(n_threads)))
    return [r for rs in results for r in rs]


def test_same_beacon_twice_bills_once(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    assert ledger.record(event("imp-1"), BIG_BUDGET) == Recorded(Outcome.BILLED, 2_000, 0)
    assert ledger.record(event("imp-1"), BIG_BUDGET) == Recorded(Outcome.DUPLICATE)
    # A replay with a different charge still cannot bill twice.
    assert ledger.record(event("imp-1", charge=9_999), BIG_BUDGET).outcome is Outcome.DUPLICATE
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 0, 2_000, 0)]
    stats = ledger.stats()
    assert (stats.rows, stats.duplicates_rejected) == (1, 2)
    assert ledger.counters().get("duplicates_rejected") == 2


@pytest.mark.slow
def test_racing_threads_bill_each_beacon_once(ledger_backend: LedgerBackend) -> None:
    n_threads, n_impressions = 8, 10
    ledgers = [ledger_backend.open() for _ in range(n_threads)]  # as separate processes would

    def work(i: int) -> list[Recorded]:
        return [ledgers[i].record(event(f"imp-{k}"), BIG_BUDGET) for k in range(n_impressions)]

    outcomes = Counter(r.outcome for r in race(n_threads, work))
    assert outcomes == {
        Outcome.BILLED: n_impressions,
        Outcome.DUPLICATE: n_impressions * (n_threads - 1),
    }
    ledger = ledger_backend.open()
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, n_impressions, 0, 20_000, 0)]
    assert ledger.stats().rows == n_impressions
    assert ledger.stats().duplicates_rejected == n_impressions * (n_threads - 1)


def test_click_before_its_impression_is_held_once_and_bills_when_it_comes(
        ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    assert ledger.record(click("imp-1"), BIG_BUDGET) == Recorded(Outcome.HELD)
    assert ledger.record(click("imp-1"), BIG_BUDGET) == Recorded(Outcome.HELD)  # redelivered
    assert ledger.day_totals(1, DAY, DAY) == []
    assert ledger.billed_on(DAY) == {}
    assert ledger.stats().rows == 0
    assert ledger.counters().get("clicks_without_impression") == 1  # once per event
    assert ledger.counters().get("duplicates_rejected", 0) == 0
    # its impression comes: the held click bills with it, in the same transaction
    done = ledger.record_many([LedgerWrite(event("imp-1", charge=0), BIG_BUDGET)])
    assert done.recorded == [Recorded(Outcome.BILLED, 0, 0, None)]
    assert [(e.impression_id, e.event_type, r) for e, r in done.released] == [
        ("imp-1", EventType.CLICK, Recorded(Outcome.BILLED, 1_400_000, 0))]
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 1, 1_400_000, 0)]
    assert ledger.record(click("imp-1"), BIG_BUDGET) == Recorded(Outcome.DUPLICATE)
    assert ledger.counters()["held_released"] == 1


def test_a_batch_bills_a_click_that_comes_before_its_impression_in_it(
        ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    done = ledger.record_many([LedgerWrite(click("imp-1"), BIG_BUDGET),
                               LedgerWrite(event("imp-1", charge=0), BIG_BUDGET),
                               LedgerWrite(click("imp-1"), BIG_BUDGET)])
    assert [r.outcome for r in done.recorded] == [
        Outcome.HELD, Outcome.BILLED, Outcome.DUPLICATE]
    assert len(done.released) == 1
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 1, 1_400_000, 0)]
    assert ledger.stats().rows == 2


@pytest.mark.slow
def test_a_batch_equals_the_same_writes_one_by_one(ledger_backend: LedgerBackend) -> None:
    """Random impressions, clicks, conversions, invalid traffic and redeliveries over two
    campaigns and two days, recorded in batches of random sizes on this backend and one
    by one on a memory ledger: the same outcomes, totals and counters."""
    rng = random.Random(11)
    kinds = [EventType.IMPRESSION, EventType.CLICK, EventType.CONVERSION]
    writes = []
    for _ in range(300):
        imp = f"i{rng.randrange(40)}"
        kind = rng.choice(kinds)
        cid = 1 + int(imp[1:]) % 2  # one impression id, one campaign
        ev = event(imp, kind, charge=rng.randrange(0, 900_000), campaign_id=cid,
                   day=DAY + timedelta(days=int(imp[1:]) % 3 // 2),
                   per_mille=kind is EventType.IMPRESSION)
        ivt = "crawler_ua" if rng.random() < 0.1 else None
        writes.append(LedgerWrite(ev, 3_000_000, 20_000_000 if cid == 2 else None, ivt))
    one_by_one = MemoryLedger()
    expected = [one_by_one.record_many([w]).recorded[0] for w in writes]
    ledger = ledger_backend.open()
    got: list[Recorded] = []
    k = 0
    while k < len(writes):
        n = rng.randrange(1, 60)
        got.extend(ledger.record_many(writes[k:k + n]).recorded)
        k += n
    assert got == expected
    for cid in (1, 2):
        assert (ledger.day_totals(cid, DAY, DAY + timedelta(days=1))
                == one_by_one.day_totals(cid, DAY, DAY + timedelta(days=1)))
    assert ledger.lifetime_billed() == one_by_one.lifetime_billed()
    assert ledger.counters() == one_by_one.counters()
    assert ledger.stats() == one_by_one.stats()


def test_click_after_impression_bills_once(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    # CPC: the impression costs nothing, the first click costs the click price.
    assert ledger.record(event("imp-1", charge=0, billing_type="CPC"), BIG_BUDGET) == Recorded(
        Outcome.BILLED, 0, 0
    )
    assert ledger.record(click("imp-1"), BIG_BUDGET) == Recorded(Outcome.BILLED, 1_400_000, 0)
    assert ledger.record(click("imp-1"), BIG_BUDGET) == Recorded(Outcome.DUPLICATE)
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 1, 1_400_000, 0)]
    assert ledger.billed_on(DAY) == {1: 1_400_000}
    assert ledger.stats().rows == 2


@pytest.mark.slow
def test_clicks_racing_their_impression_bill_at_most_once(ledger_backend: LedgerBackend) -> None:
    ledgers = [ledger_backend.open() for _ in range(8)]

    def work(i: int) -> list[Recorded]:
        if i == 0:
            return [ledgers[i].record(event("imp-1", charge=0), BIG_BUDGET)]
        return [ledgers[i].record(click("imp-1"), BIG_BUDGET) for _ in range(3)]

    clicks = Counter(r.outcome for r in race(8, work)[1:])
    assert clicks[Outcome.BILLED] <= 1
    # billed by itself, or held and billed with its impression: exactly once either way
    totals = ledger_backend.open().day_totals(1, DAY, DAY)
    assert totals == [DayTotals(DAY, 1, 1, 1_400_000, 0)]


def test_charges_above_the_daily_budget_are_absorbed(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    got = [ledger.record(event(f"imp-{k}", charge=400), 1_000) for k in range(4)]
    assert got == [
        Recorded(Outcome.BILLED, 400, 0),
        Recorded(Outcome.BILLED, 400, 0),
        Recorded(Outcome.BILLED, 200, 200),
        Recorded(Outcome.BILLED, 0, 400),
    ]
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 4, 0, 1_000, 600)]
    assert ledger.billed_on(DAY) == {1: 1_000}


def test_zero_budget_absorbs_everything(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    assert ledger.record(event("imp-1", charge=5), 0) == Recorded(Outcome.BILLED, 0, 5)
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 0, 0, 5)]


def test_negative_or_fractional_money_is_refused(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    with pytest.raises(MoneyError):
        ledger.record(event("imp-1", charge=-1), BIG_BUDGET)
    with pytest.raises(MoneyError):
        ledger.record(event("imp-1"), -1)
    with pytest.raises(MoneyError):
        ledger.record(event("imp-1", charge=1.5), BIG_BUDGET)  # type: ignore[arg-type]
    assert ledger.stats().rows == 0
    assert ledger.record(event("imp-1"), BIG_BUDGET).outcome is Outcome.BILLED


@pytest.mark.slow
def test_concurrent_burst_never_bills_above_budget(ledger_backend: LedgerBackend) -> None:
    n_threads, per_thread, charge, budget = 8, 26, 7_000, 1_000_000
    ledgers = [ledger_backend.open() for _ in range(n_threads)]

    def burst(prefix: str, campaigns: tuple[int, ...]) -> list[Recorded]:
        def work(i: int) -> list[Recorded]:
            return [
                ledgers[i].record(
                    event(
                        f"{prefix}-{i}-{k}",
                        charge=charge,
                        campaign_id=campaigns[k % len(campaigns)],
                    ),
                    budget,
                )
                for k in range(per_thread)
            ]

        results = race(n_threads, work)
        assert all(r.outcome is Outcome.BILLED for r in results)
        assert all(r.billed_micros + r.absorbed_micros == charge for r in results)
        return results

    # Two campaigns, each with its own budget, each under it: 104 × 7,000 = 728,000.
    first = n_threads * per_thread // 2 * charge
    results = burst("imp", (1, 2))
    assert sum(r.absorbed_micros for r in results) == 0
    ledger = ledger_backend.open()
    assert ledger.billed_on(DAY) == {1: first, 2: first}

    # A second burst on campaign 1 overshoots: exactly the remainder is billed.
    results = burst("more", (1,))
    offered = n_threads * per_thread * charge
    assert sum(r.billed_micros for r in results) == budget - first
    assert sum(r.absorbed_micros for r in results) == offered - (budget - first)
    assert ledger.billed_on(DAY) == {1: budget, 2: first}
    assert ledger.day_totals(1, DAY, DAY) == [
        DayTotals(DAY, n_threads * per_thread * 3 // 2, 0, budget, first + offered - budget)
    ]


def test_totals_are_per_campaign_and_local_day(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    d1, d2, d3 = DAY, DAY + timedelta(days=1), DAY + timedelta(days=2)
    # Each local day has its own budget: day 1 is capped, day 2 starts afresh.
    assert ledger.record(event("a", charge=800, day=d1), 1_000).billed_micros == 800
    assert ledger.record(event("b", charge=800, day=d1), 1_000) == Recorded(
        Outcome.BILLED, 200, 600
    )
    assert ledger.record(event("c", charge=800, day=d2), 1_000).billed_micros == 800
    assert ledger.record(click("c", charge=300, day=d2), 1_000) == Recorded(
        Outcome.BILLED, 200, 100
    )
    assert ledger.record(event("d", charge=50, day=d3), 1_000).billed_micros == 50
    assert ledger.record(event("e", charge=70, day=d1, campaign_id=2), 1_000).billed_micros == 70

    assert ledger.day_totals(1, d1, d3) == [
        DayTotals(d1, 2, 0, 1_000, 600),
        DayTotals(d2, 1, 1, 1_000, 100),
        DayTotals(d3, 1, 0, 50, 0),
    ]
    assert ledger.day_totals(1, d2, d2) == [DayTotals(d2, 1, 1, 1_000, 100)]
    assert ledger.day_totals(1, d3 + timedelta(days=1), d3 + timedelta(days=9)) == []
    assert ledger.day_totals(2, d1, d3) == [DayTotals(d1, 1, 0, 70, 0)]
    assert ledger.day_totals(3, d1, d3) == []
    assert ledger.billed_on(d1) == {1: 1_000, 2: 70}
    assert ledger.billed_on(d2) == {1: 1_000}
    assert ledger.billed_on(d1 - timedelta(days=1)) == {}


def test_settled_since_counts_later_serves_of_the_day(ledger_backend: LedgerBackend) -> None:
    """Without an expected cost a row settles what it billed, by event time."""
    ledger = ledger_backend.open()
    noon = datetime(DAY.year, DAY.month, DAY.day, 12, tzinfo=UTC)
    ledger.record(event("a", charge=100, at=noon), BIG_BUDGET)
    ledger.record(event("b", charge=200, at=noon + timedelta(minutes=5)), BIG_BUDGET)
    ledger.record(event("c", charge=400, at=noon + timedelta(minutes=9), campaign_id=2),
                  BIG_BUDGET)
    ledger.record(event("d", charge=800, at=noon + timedelta(minutes=9),
                        day=DAY + timedelta(days=1)), BIG_BUDGET)
    assert ledger.settled_since(DAY, noon) == {1: 300, 2: 400}
    assert ledger.settled_since(DAY, noon + timedelta(minutes=1)) == {1: 200, 2: 400}
    assert ledger.settled_since(DAY, noon + timedelta(hours=1)) == {}


def test_settled_since_is_each_serves_expected_cost_by_serve_time(
        ledger_backend: LedgerBackend) -> None:
    """A click settles its serve's expected cost (not its price), counted at the serve's
    time; a CPC impression settles nothing; an absorbed event settles all the same."""
    ledger = ledger_backend.open()
    noon = datetime(DAY.year, DAY.month, DAY.day, 12, tzinfo=UTC)
    later = noon + timedelta(minutes=40)
    for imp, served in (("s1", noon), ("s2", noon + timedelta(minutes=20))):
        ledger.record(event(imp, charge=0, billing_type="CPC", at=later, served=served,
                            expected=0), BIG_BUDGET)
        ledger.record(click(imp, charge=1_400_000, at=later, served=served, expected=28_000),
                      BIG_BUDGET)
    ledger.record(click("s3", charge=1_400_000, at=later, served=noon, expected=9_000), 0)
    assert ledger.settled_since(DAY, noon) == {1: 28_000 + 28_000}  # s3 had no impression
    assert ledger.settled_since(DAY, noon + timedelta(minutes=10)) == {1: 28_000}
    ledger.record(event("s3", charge=0, billing_type="CPC", at=later, served=noon,
                        expected=0), BIG_BUDGET)
    ledger.record(click("s3", charge=1_400_000, at=later, served=noon, expected=9_000), 0)
    assert ledger.settled_since(DAY, noon) == {1: 28_000 + 28_000 + 9_000}


@pytest.mark.slow
def test_counters_survive_a_new_ledger_on_the_same_storage(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    assert ledger.counters() == {}
    ledger.record(event("imp-1"), BIG_BUDGET)
    ledger.record(event("imp-1"), BIG_BUDGET)
    ledger.record(click("nope"), BIG_BUDGET)
    ledger.count("invalid_tokens")
    ledger.count("invalid_tokens", 4)
    expected = {"duplicates_rejected": 1, "clicks_without_impression": 1, "invalid_tokens": 5}
    assert ledger.counters() == expected

    reopened = ledger_backend.open()
    assert reopened.counters() == expected
    assert reopened.stats() == ledger.stats()
    assert reopened.record(event("imp-1"), BIG_BUDGET).outcome is Outcome.DUPLICATE
    assert reopened.counters()["duplicates_rejected"] == 2
    assert reopened.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 0, 2_000, 0)]


@pytest.mark.slow
def test_concurrent_counts_are_not_lost(ledger_backend: LedgerBackend) -> None:
    ledgers = [ledger_backend.open() for _ in range(8)]

    def work(i: int) -> list[Recorded]:
        for _ in range(20):
            ledgers[i].count("invalid_tokens")
        return []

    race(8, work)
    assert ledger_backend.open().counters() == {"invalid_tokens": 160}


@pytest.mark.slow
def test_cpm_price_is_billed_exactly_with_the_fraction_carried(
    ledger_backend: LedgerBackend,
) -> None:
    """CPM 1,500 µ per mille (issue 7 §4): impressions bill 1, 2, 1, 2 … µ, so 1,001
    impressions bill 1,501 µ (exact 1,501.5), never 2 µ each (2,002 µ)."""
    ledger = ledger_backend.open()
    got = [
        ledger.record(event(f"imp-{k}", charge=1_500, per_mille=True), BIG_BUDGET)
        for k in range(1_001)
    ]
    assert [r.billed_micros for r in got[:4]] == [1, 2, 1, 2]
    assert all(r.absorbed_micros == 0 for r in got)
    assert ledger.billed_on(DAY) == {1: 1_501}
    # a reopened ledger (another process) continues from the carried half micro
    reopened = ledger_backend.open()
    assert reopened.record(event("imp-x", charge=1_500, per_mille=True), BIG_BUDGET) == (
        Recorded(Outcome.BILLED, 2, 0)
    )
    assert reopened.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1_002, 0, 1_503, 0)]


def test_carry_is_per_campaign_and_day_and_whole_micro_charges_keep_it(
    ledger_backend: LedgerBackend,
) -> None:
    ledger = ledger_backend.open()
    d2 = DAY + timedelta(days=1)
    half = {"charge": 500, "per_mille": True}
    assert ledger.record(event("a", **half), BIG_BUDGET).billed_micros == 0  # type: ignore[arg-type]
    # other campaigns and days start from their own (zero) carry
    assert ledger.record(event("b", campaign_id=2, **half), BIG_BUDGET).billed_micros == 0  # type: ignore[arg-type]
    assert ledger.record(event("c", day=d2, **half), BIG_BUDGET).billed_micros == 0  # type: ignore[arg-type]
    # a CPC click (whole micros) bills its price and leaves the carry alone
    ledger.record(event("d", charge=0, billing_type="CPC"), BIG_BUDGET)
    assert ledger.record(click("d", charge=7), BIG_BUDGET).billed_micros == 7
    assert ledger.record(event("e", **half), BIG_BUDGET).billed_micros == 1  # type: ignore[arg-type]
    assert ledger.billed_on(DAY) == {1: 8, 2: 0}
    assert ledger.billed_on(d2) == {1: 0}


def test_carried_charges_above_the_budget_are_absorbed(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    got = [
        ledger.record(event(f"imp-{k}", charge=1_500, per_mille=True), 4) for k in range(4)
    ]
    assert got == [
        Recorded(Outcome.BILLED, 1, 0),
        Recorded(Outcome.BILLED, 2, 0),
        Recorded(Outcome.BILLED, 1, 0),
        Recorded(Outcome.BILLED, 0, 2),
    ]
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 4, 0, 4, 2)]


@pytest.mark.slow
def test_lifetime_budget_caps_billing_across_days(ledger_backend: LedgerBackend) -> None:
    """Issue 7 §10: lifetime 10,000 µ, daily 100,000 µ, 2,000 µ per impression over
    three days billed 60,000 µ. Now 10,000 µ are billed and the rest is absorbed."""
    ledger = ledger_backend.open()
    got = []
    for d in range(3):
        day = DAY + timedelta(days=d)
        for k in range(10):
            ev = event(f"imp-{d}-{k}", charge=2_000_000, day=day, per_mille=True)
            got.append(ledger.record(ev, 100_000, 10_000))
    assert sum(r.billed_micros for r in got) == 10_000
    assert sum(r.absorbed_micros for r in got) == 50_000
    assert [r.lifetime_remaining_micros for r in got[:6]] == [8_000, 6_000, 4_000, 2_000, 0, 0]
    assert ledger.lifetime_billed() == {1: 10_000}
    assert ledger.lifetime_billed(1) == {1: 10_000}
    assert ledger.lifetime_billed(2) == {}
    assert ledger.day_totals(1, DAY, DAY + timedelta(days=2)) == [
        DayTotals(DAY, 10, 0, 10_000, 10_000),
        DayTotals(DAY + timedelta(days=1), 10, 0, 0, 20_000),
        DayTotals(DAY + timedelta(days=2), 10, 0, 0, 20_000),
    ]
    # without a lifetime budget nothing is reported as remaining
    other = ledger.record(event("other", campaign_id=2), BIG_BUDGET)
    assert other.lifetime_remaining_micros is None
    # a raised lifetime budget bills again, from what was billed before
    raised = ledger_backend.open().record(event("later", charge=3_000, day=DAY), 100_000, 12_000)
    assert raised == Recorded(Outcome.BILLED, 2_000, 1_000, 0)


@pytest.mark.slow
def test_two_days_racing_at_midnight_never_bill_above_the_lifetime_budget(
    ledger_backend: LedgerBackend,
) -> None:
    n_threads, per_thread, charge, lifetime = 8, 15, 1_000, 50_000
    ledgers = [ledger_backend.open() for _ in range(n_threads)]

    def work(i: int) -> list[Recorded]:
        day = DAY + timedelta(days=i % 2)  # half the threads bill the next local day
        return [
            ledgers[i].record(event(f"imp-{i}-{k}", charge=charge, day=day), BIG_BUDGET, lifetime)
            for k in range(per_thread)
        ]

    results = race(n_threads, work)
    assert sum(r.billed_micros for r in results) == lifetime
    assert sum(r.absorbed_micros for r in results) == n_threads * per_thread * charge - lifetime
    ledger = ledger_backend.open()
    assert ledger.lifetime_billed() == {1: lifetime}
    days = ledger.day_totals(1, DAY, DAY + timedelta(days=1))
    assert sum(t.billed_micros for t in days) == lifetime


# --- properties of the budget split (MemoryLedger, the reference implementation) ---

charges = st.lists(st.integers(0, 5_000_000), max_size=60)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(charges=charges, budget=st.integers(0, 20_000_000))
def test_billed_never_exceeds_budget_and_charges_are_conserved(
    charges: list[int], budget: int
) -> None:
    ledger: Ledger = MemoryLedger()
    billed_total = 0
    for k, charge in enumerate(charges):
        got = ledger.record(event(f"imp-{k}", charge=charge), budget)
        assert got.outcome is Outcome.BILLED
        assert got.billed_micros >= 0 and got.absorbed_micros >= 0
        assert got.billed_micros + got.absorbed_micros == charge
        billed_total += got.billed_micros
        assert billed_total <= budget
    # Greedy in arrival order: the budget is used up exactly when charges allow.
    assert billed_total == min(budget, sum(charges))
    assert ledger.billed_on(DAY) == ({1: billed_total} if charges else {})


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 5),  # impression id
            st.sampled_from([EventType.IMPRESSION, EventType.CLICK]),
            st.integers(0, 3_000),  # charge
            st.integers(0, 1),  # day offset
        ),
        max_size=40,
    ),
    budget=st.integers(0, 10_000),
)
def test_memory_ledger_totals_match_its_recorded_outcomes(
    steps: list[tuple[int, EventType, int, int]], budget: int
) -> None:
    ledger = MemoryLedger()
    seen: set[tuple[int, EventType]] = set()
    held: dict[int, tuple[int, date]] = {}  # impression -> its held click's charge, day
    billed_by_day: Counter[date] = Counter()
    for imp, kind, charge, offset in steps:
        day = DAY + timedelta(days=offset)
        write = LedgerWrite(event(f"i{imp}", kind, charge=charge, day=day), budget)
        done = ledger.record_many([write])
        got = done.recorded[0]
        if (imp, kind) in seen:
            assert got.outcome is Outcome.DUPLICATE
        elif kind is EventType.CLICK and (imp, EventType.IMPRESSION) not in seen:
            assert got.outcome is Outcome.HELD
            held.setdefault(imp, (charge, day))
        else:
            assert got.outcome is Outcome.BILLED
            assert got.billed_micros + got.absorbed_micros == charge
            seen.add((imp, kind))
            billed_by_day[day] += got.billed_micros
            assert billed_by_day[day] <= budget
        if got.outcome is Outcome.BILLED and kind is EventType.IMPRESSION and imp in held:
            click_charge, click_day = held.pop(imp)
            [(released, rec)] = done.released
            assert released.impression_id == f"i{imp}" and released.day == click_day
            assert rec.billed_micros + rec.absorbed_micros == click_charge
            seen.add((imp, EventType.CLICK))
            billed_by_day[click_day] += rec.billed_micros
            assert billed_by_day[click_day] <= budget
        else:
            assert done.released == []
    assert ledger.stats().rows == len(seen)
    for day, billed in billed_by_day.items():
        assert ledger.billed_on(day) == {1: billed}


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(prices=st.lists(st.integers(0, 3_000_000), max_size=80))
def test_per_mille_billing_stays_within_one_micro_of_exact(prices: list[int]) -> None:
    """Over any number of CPM impressions: Σ billed ≤ Σ price / 1000 < Σ billed + 1."""
    ledger = MemoryLedger()
    for k, price in enumerate(prices):
        got = ledger.record(event(f"imp-{k}", charge=price, per_mille=True), BIG_BUDGET)
        assert got.billed_micros <= -(-price // 1_000)  # never rounded up
    billed = ledger.billed_on(DAY).get(1, 0)
    assert 1_000 * billed <= sum(prices) < 1_000 * (billed + 1)


def conversion(impression_id: str, charge: int = 5_000_000, **kw: object) -> LedgerEvent:
    return event(impression_id, EventType.CONVERSION, charge=charge, billing_type="CPA",  # type: ignore[arg-type]
                 **kw)


def test_conversion_bills_once_and_only_after_its_click(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    assert ledger.record(event("imp-c", charge=0), BIG_BUDGET).outcome is Outcome.BILLED
    # no click yet: held, counted
    assert ledger.record(conversion("imp-c"), BIG_BUDGET) == Recorded(Outcome.HELD)
    assert ledger.counters()["conversions_without_click"] == 1
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 0, 0, 0)]
    # the click comes: it bills, and the held conversion with it
    assert ledger.record(click("imp-c", charge=0), BIG_BUDGET).outcome is Outcome.BILLED
    assert ledger.record(conversion("imp-c"), BIG_BUDGET) == Recorded(Outcome.DUPLICATE)
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 1, 5_000_000, 0, conversions=1)]


def test_a_conversion_of_a_reversed_click_is_never_billed(ledger_backend: LedgerBackend) -> None:
    """Reversed by tier 2: the click attributes nothing, once counted, and a redelivery
    counts nothing again (issue 22 §1)."""
    ledger = ledger_backend.open()
    at = datetime(2026, 3, 14, 12, tzinfo=UTC)
    ledger.record(event("imp-t", charge=0, at=at), BIG_BUDGET)
    ledger.record(click("imp-t", charge=0, at=at), BIG_BUDGET)
    assert ledger.reverse("imp-t", EventType.CLICK, "click_rate",
                          at + timedelta(seconds=60), 600) is not None
    assert ledger.record(conversion("imp-t"), BIG_BUDGET) == Recorded(Outcome.NOT_BILLABLE)
    assert ledger.record(conversion("imp-t"), BIG_BUDGET) == Recorded(Outcome.NOT_BILLABLE)
    assert ledger.counters()["conversions_of_invalid_click"] == 1
    assert "conversions_without_click" not in ledger.counters()
    assert [t.conversions for t in ledger.day_totals(1, DAY, DAY)] == [0]
    assert ledger.billed_on(DAY).get(1, 0) == 0


def test_a_conversion_after_a_flagged_click_waits_for_the_valid_one(
        ledger_backend: LedgerBackend) -> None:
    """A bot's flagged click leaves the slot to the viewer's (issue 22 §8): a conversion
    (its click id came from the valid click's redirect) waits for that click, and bills
    once it arrives; the flagged click alone bills nothing."""
    ledger = ledger_backend.open()
    at = datetime(2026, 3, 14, 12, tzinfo=UTC)
    ledger.record(event("imp-f", charge=0, at=at), BIG_BUDGET)
    assert ledger.record_invalid(click("imp-f", charge=0, at=at), "crawler_ua") is True
    assert ledger.record(conversion("imp-f"), BIG_BUDGET) == Recorded(Outcome.HELD)
    assert ledger.billed_on(DAY).get(1, 0) == 0
    assert ledger.record(click("imp-f", charge=0, at=at), BIG_BUDGET).outcome is Outcome.BILLED
    assert [t.conversions for t in ledger.day_totals(1, DAY, DAY)] == [1]
    assert ledger.billed_on(DAY).get(1, 0) == 5_000_000
    assert "conversions_of_invalid_click" not in ledger.counters()


def test_invalid_traffic_is_recorded_once_never_billed(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    assert ledger.record_invalid(event("imp-bot"), "crawler_ua") is True
    assert ledger.record_invalid(event("imp-bot"), "crawler_ua") is False  # redelivered
    assert ledger.record_invalid(click("imp-bot"), "crawler_ua") is True
    counters = ledger.counters()
    assert counters["ivt_impression"] == 1 and counters["ivt_impression_crawler_ua"] == 1
    assert counters["ivt_click"] == 1 and counters["ivt_click_crawler_ua"] == 1
    # the invalid impression has no ledger row: a click of it waits, never bills
    assert ledger.record(click("imp-bot2"), BIG_BUDGET) == Recorded(Outcome.HELD)
    assert ledger.day_totals(1, DAY, DAY) == []
    assert ledger.stats().rows == 0
    # a valid row already there is never turned into invalid traffic
    ledger.record(event("imp-ok"), BIG_BUDGET)
    assert ledger.record_invalid(event("imp-ok"), "datacenter_ip") is False
    assert "ivt_impression_datacenter_ip" not in ledger.counters()


def test_a_flagged_event_does_not_take_the_slot_of_the_valid_one(
        ledger_backend: LedgerBackend) -> None:
    """A link-preview bot fetches the beacon first (flagged), then the viewer's browser:
    the viewer's impression bills, once; the bot's stays counted as invalid traffic."""
    ledger = ledger_backend.open()
    assert ledger.record_invalid(event("imp-p"), "crawler_ua") is True
    assert ledger.record(event("imp-p"), BIG_BUDGET).outcome is Outcome.BILLED
    assert ledger.record(event("imp-p"), BIG_BUDGET) == Recorded(Outcome.DUPLICATE)
    assert ledger.record_invalid(event("imp-p"), "crawler_ua") is False
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 0, 2_000, 0)]
    assert ledger.counters()["ivt_impression_crawler_ua"] == 1
    assert ledger.stats().rows == 1
    # in one batch alike
    plan = ledger.record_many([LedgerWrite(click("imp-p"), ivt_reason="crawler_ua"),
                               LedgerWrite(click("imp-p"), BIG_BUDGET),
                               LedgerWrite(click("imp-p"), BIG_BUDGET)])
    assert [r.outcome for r in plan.recorded] == [Outcome.INVALID, Outcome.BILLED,
                                                  Outcome.DUPLICATE]
    assert ledger.stats().rows == 2


def test_a_reversed_event_keeps_its_slot_after_a_flagged_one(
        ledger_backend: LedgerBackend) -> None:
    """Flagged, then billed, then reversed by tier 2: it never bills again."""
    ledger = ledger_backend.open()
    at = datetime(2026, 3, 14, 12, tzinfo=UTC)
    ledger.record_invalid(event("imp-f", at=at), "crawler_ua")
    assert ledger.record(event("imp-f", at=at), BIG_BUDGET).outcome is Outcome.BILLED
    taken = ledger.reverse("imp-f", EventType.IMPRESSION, "impression_rate",
                           at + timedelta(seconds=60), 600)
    assert taken == Recorded(Outcome.INVALID, 2_000, 0)
    assert ledger.record(event("imp-f", at=at), BIG_BUDGET) == Recorded(Outcome.DUPLICATE)
    assert ledger.stats().rows == 0


def test_a_pending_event_is_reversed_and_never_bills_again(ledger_backend: LedgerBackend) -> None:
    ledger = ledger_backend.open()
    at = datetime(2026, 3, 14, 12, tzinfo=UTC)
    ledger.record(event("imp-r", at=at), BIG_BUDGET)
    ledger.record(click("imp-r", at=at + timedelta(seconds=5)), BIG_BUDGET)
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 1, 1_402_000, 0)]
    # inside the 600 s hold: the click is taken back, its spend leaves the totals
    taken = ledger.reverse("imp-r", EventType.CLICK, "click_rate",
                           at + timedelta(seconds=60), 600)
    assert taken == Recorded(Outcome.INVALID, 1_400_000, 0)
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 0, 2_000, 0)]
    assert ledger.lifetime_billed(1) == {1: 2_000}
    counters = ledger.counters()
    assert counters["ivt_click_click_rate"] == 1 and counters["ivt_reversed"] == 1
    # twice, or redelivered later: nothing more
    assert ledger.reverse("imp-r", EventType.CLICK, "click_rate", at, 600) is None
    assert ledger.record(click("imp-r", at=at), BIG_BUDGET) == Recorded(Outcome.DUPLICATE)
    assert ledger.day_totals(1, DAY, DAY) == [DayTotals(DAY, 1, 0, 2_000, 0)]
    # a final event (past the hold) stays billed
    assert ledger.reverse("imp-r", EventType.IMPRESSION, "timing",
                          at + timedelta(seconds=600), 600) is None
    assert ledger.stats().rows == 1
