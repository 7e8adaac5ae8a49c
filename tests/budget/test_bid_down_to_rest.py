"""The last charges of an automatic campaign: with less than one charge (its value per
click, v) left, the budget service raises λ to v ÷ what is left, grants slices of that
bid and the ad server asks room for it, so the campaign keeps bidding for the rest of
its budget instead of stopping (issue #27: 80.6 % of the budget on the replay's 20 Oct,
when a click could cost a quarter of it).

The budget: 100 M a day; v = 25 M (a quarter); 80 M billed, so 20 M is left to grant."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.bidding.strategy import auto_bid_micros
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import NO_SLICE, admit_charge
from adfunnel.budget.protocol import BilledUpdate, Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidStrategy, BidType, Campaign, Objective, PacingMode
from adfunnel.clock import ManualClock
from adfunnel.pacing.bid_multiplier import LAMBDA_MAX

NOW = datetime(2026, 10, 20, 20, 0, tzinfo=UTC)
DAY = NOW.date()
BUDGET = 100_000_000
V = 25_000_000
CAMP = Campaign(1, 1, "c", Objective.CLICKS, BidType.CPC, V, BUDGET, "UTC",
                date(2026, 1, 1), bid_strategy=BidStrategy.MAX_CLICKS, bid_cap_micros=V,
                bid_strategy_since=NOW)


class _Direct:
    """In-memory transport straight into one service instance."""

    def __init__(self, svc: BudgetService) -> None:
        self.svc = svc

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        on_reply(self.svc.handle_report(report))


def _setup(billed: int, camp: Campaign = CAMP, steps: int = 0
           ) -> tuple[BudgetClient, BudgetService]:
    """A warm service at 20:00 (the campaign's plan from midnight: ~83 M planned, so
    80 M billed is behind and λ falls by its controller), ``billed`` on the day, then
    ``steps`` 10 s control steps with nothing served, the ad server reporting after
    each."""
    clock = ManualClock(NOW)
    svc = BudgetService(clock, warmup_s=0.0)
    svc.upsert_campaign(camp, created_at=NOW.timestamp() - 20 * 3600)
    svc.record_billed(BilledUpdate(1, DAY.isoformat(), billed, NOW.timestamp()))
    client = BudgetClient("ads-1", clock, _Direct(svc))
    client.report()
    for _ in range(steps):
        clock.advance(10)
        svc.step()
        client.report()
    return client, svc


def _now(client: BudgetClient) -> datetime:
    return client.clock.now()


def test_less_than_one_charge_left_bids_down_to_it_and_keeps_bidding() -> None:
    """20 M left, v = 25 M, the campaign behind plan (its controller would take λ to 1):
    λ stops at 1.25 = v ÷ what is left, published; the campaign is metered (not
    exhausted), the ad server's admit asks room for ⌊v ÷ λ⌋ = 20 M and is served from
    a slice of it. Red without ``_bid_down_to_rest`` (exhausted: grants stop below one
    charge), or when the admit asks room for v (no slice fits 25 M)."""
    client, svc = _setup(80_000_000, steps=60)
    assert client.bid_multiplier(1) == 1.25
    bid = admit_charge(client, CAMP)
    assert bid == auto_bid_micros(V, 1.25) == 20_000_000
    assert client.state(1, DAY) is BudgetState.METERED
    now = _now(client)
    assert client.admit(CAMP, now, bid) in (None, NO_SLICE)
    client.report()  # the slice asked for
    assert client.admit(CAMP, now, bid) is None
    row = svc._current_row(svc._slot_of[1], now.timestamp())
    assert int(svc._rows.sl_open[row]) == 20_000_000


def test_the_campaign_value_is_not_admitted_below_one_charge() -> None:
    """The admit for v itself (a manual reading of the charge) finds no slice that
    fits: the room granted is the lowered bid's, never v's."""
    client, _ = _setup(80_000_000, steps=60)
    now = _now(client)
    client.admit(CAMP, now, admit_charge(client, CAMP))
    client.report()
    assert client.admit(CAMP, now, admit_charge(client, CAMP)) is None
    assert client.admit(CAMP, now, V) == NO_SLICE


def test_a_manual_campaign_still_stops_below_one_charge() -> None:
    """The floor is automatic bidding's: a manual bid of 25 M with 20 M left is
    exhausted, as DESIGN.md's rule says. Red when the floor ignores the strategy."""
    manual = replace(CAMP, bid_strategy=BidStrategy.MANUAL, bid_cap_micros=None)
    client, _ = _setup(80_000_000, manual)
    assert client.state(1, DAY) is BudgetState.EXHAUSTED
    assert admit_charge(client, manual) == V


def test_an_unpaced_campaign_is_not_lowered() -> None:
    """An accelerated automatic campaign bids its value (λ = 1, no plan to follow):
    below one charge it stops, as before."""
    accel = replace(CAMP, pacing_mode=PacingMode.ACCELERATED)
    client, _ = _setup(80_000_000, accel)
    assert client.bid_multiplier(1) == 1.0
    assert client.state(1, DAY) is BudgetState.EXHAUSTED


def test_a_click_of_the_lowered_bid_bills_within_the_budget_and_the_next_bid_is_lower() -> None:
    """A click at the lowered bid, billed: what is left shrinks and λ rises again, so
    the next bid fits the new rest. Red when λ is not floored anew on the billed update."""
    client, svc = _setup(80_000_000, steps=60)
    click = 7_000_000  # a second price below the bid
    svc.record_billed(BilledUpdate(1, DAY.isoformat(), 80_000_000 + click,
                                   _now(client).timestamp()))
    client.report()
    assert admit_charge(client, CAMP) == BUDGET - 80_000_000 - click
    assert client.bid_multiplier(1) == V / 13_000_000


def test_below_the_least_bid_the_day_is_exhausted() -> None:
    """Less left than v ÷ LAMBDA_MAX: no bid that small, the day is exhausted."""
    client, _ = _setup(BUDGET - int(V / LAMBDA_MAX) + 1)
    assert client.state(1, DAY) is BudgetState.EXHAUSTED


@settings(max_examples=40, deadline=None)
@given(billed=st.integers(60_000_000, BUDGET), v=st.integers(1_000, 60_000_000))
def test_a_granted_slice_never_needs_more_than_is_left(billed: int, v: int) -> None:
    """Property: whatever is billed and whatever the value, with λ at its controller's
    low after 60 behind steps, the bid an admit asks room for never exceeds what is
    left when less than v is left, a slice granted then fits what is left, and the
    serve it admits fits the slice."""
    camp = replace(CAMP, bid_micros=v, bid_cap_micros=v)
    client, svc = _setup(billed, camp, steps=60)
    now = _now(client)
    bid = admit_charge(client, camp)
    left = BUDGET - billed
    exhausted = client.state(1, DAY) is BudgetState.EXHAUSTED
    if left < v and not exhausted:
        assert bid <= left
    if exhausted:  # below v ÷ LAMBDA_MAX left, or nothing
        assert left < max(v, 1) / LAMBDA_MAX + 1 or left < bid
        return
    if client.admit(camp, now, bid) is not None:
        client.report()
        if client.admit(camp, now, bid) is not None:
            assert left < v or left < bid
            return
    row = svc._current_row(svc._slot_of[1], now.timestamp())
    granted = int(svc._rows.sl_open[row])
    if granted and left < v:
        assert bid <= granted <= left
    assert client.fits(camp, now, bid)
