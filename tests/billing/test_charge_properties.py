"""Charges from auction to ledger (issue 7 §4, issue 22 §1 and §6), in integers.

Random bids, reserves, pCTRs, pCVRs, qualities and billing types go through the real
auction; the winner's price goes into a real signed token; a real tracker turns its
beacons (impression, click, and a conversion through the click id the click revealed)
into events; :func:`~adfunnel.billing.event_rows.ledger_event` makes the ledger rows
and the real ledger bills them. Per billable event the price in the bid's unit is ≤ the
bid and ≥ the reserve in that unit (rounded up) wherever that is ≤ the bid; CPM bills
the impression (n impressions: 1000·Σ ≤ n·price ≤ n·bid and 1000·Σ > n·price − 1000),
CPC the click, CPA the conversion only — its impression and click bill nothing; a
winner with no rival (quality ≥ 0) pays exactly the reserve in its unit.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.auction import Candidate, run_auction
from adfunnel.billing.event_rows import ledger_event
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import Outcome
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import Event
from adfunnel.events.publisher import EventPublisher
from adfunnel.tracking.beacons import APPENDED, Tracker
from adfunnel.tracking.token import TokenClaims, sign

KEY = b"k" * 32
START = datetime(2026, 3, 14, 12, tzinfo=UTC)
T0 = int(START.timestamp())
BIG_BUDGET = 10**15
OBJECTIVE = {BidType.CPM: Objective.IMPRESSIONS, BidType.CPC: Objective.CLICKS,
             BidType.CPA: Objective.CONVERSIONS}


class _Landing:
    def landing_url(self, ad_id: int) -> str | None:
        return "https://shop.test/p"

    def house_landing_url(self, placement: str) -> str | None:
        return None


def _reserve_in_unit(reserve_cpm: int, c: Candidate) -> int:
    """The reserve (micros per mille) in ``c``'s unit, rounded up, exactly."""
    if c.bid_type is BidType.CPM:
        return reserve_cpm
    return math.ceil(Fraction(reserve_cpm, 1000) / Fraction(c.action_rate))


def _campaign(c: Candidate) -> Campaign:
    return Campaign(id=c.campaign_id, advertiser_id=c.advertiser_id, name="c",
                    objective=OBJECTIVE[c.bid_type], bid_type=c.bid_type,
                    bid_micros=max(c.bid_micros, 1), daily_budget_micros=BIG_BUDGET,
                    time_zone="UTC", flight_start=date(2026, 3, 1))


def _bill(c: Candidate, price: int, n: int) -> tuple[list[int], list[int]]:
    """Serve ``c`` ``n`` times at ``price`` (a signed token each), show, click and
    convert through a tracker, and record every event in a ledger as the aggregator
    does (:func:`ledger_event`). (billed micros of each billable event, billed micros
    of every other event)."""
    clock = ManualClock(START)
    tracker = Tracker(EventPublisher(MemoryEventLog(clock, partitions=1)), _Landing(), clock,
                      KEY)
    ledger, campaign = MemoryLedger(), _campaign(c)
    billable, free = [], []
    for k in range(n):
        claims = TokenClaims(f"i{k}", c.ad_id, c.campaign_id, price, c.bid_type.value, "feed",
                             T0, T0 + 3_600)
        token = sign(claims, KEY)
        shown = tracker.impression(token)
        clicked = tracker.click(token)
        assert clicked.click_id is not None
        converted = tracker.conversion(clicked.click_id)
        for result in (shown, clicked, converted):
            assert result.outcome == APPENDED and isinstance(result.event, Event)
            got = ledger.record(ledger_event(result.event, campaign), BIG_BUDGET)
            assert got.outcome is Outcome.BILLED and got.absorbed_micros == 0
            bills = result.event.event_type.value == {
                BidType.CPM: "impression", BidType.CPC: "click",
                BidType.CPA: "conversion"}[c.bid_type]
            (billable if bills else free).append(got.billed_micros)
    return billable, free


def _candidate(ad_id: int, bid_min: int) -> st.SearchStrategy[Candidate]:
    return st.builds(
        Candidate, ad_id=st.just(ad_id), campaign_id=st.just(ad_id),
        advertiser_id=st.just(ad_id), bid_type=st.sampled_from(list(BidType)),
        bid_micros=st.integers(bid_min, 50_000_000), pctr=st.floats(1e-5, 0.5),
        pcvr=st.floats(1e-3, 1.0),
        quality_micros=st.integers(-2_000, 2_000).map(float) | st.just(0.0))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(c=_candidate(1, 1), others=st.lists(_candidate(2, 0), max_size=1),
       reserve=st.integers(0, 5_000_000), n=st.integers(1, 12))
def test_charge_between_reserve_and_bid_from_auction_to_ledger(
    c: Candidate, others: list[Candidate], reserve: int, n: int
) -> None:
    result = run_auction([c, *others], ["s1"], reserve)
    wins = [w for w in result.wins if w.candidate.ad_id == c.ad_id]
    if not wins:
        return
    price = wins[0].price_micros
    assert type(price) is int and price <= c.bid_micros
    floor = _reserve_in_unit(reserve, c)
    if floor <= c.bid_micros:
        assert price >= floor
    if not others and c.quality_micros >= 0:  # alone: the reserve, exactly
        assert price == min(floor, c.bid_micros)
    billable, free = _bill(c, price, n)
    assert free == [0] * (2 * n)  # CPA: impression and click free; CPC: impression, …
    total = sum(billable)
    if c.bid_type is BidType.CPM:
        assert 1_000 * total <= n * price <= n * c.bid_micros
        assert 1_000 * total > n * price - 1_000
        assert all(b <= -(-price // 1_000) for b in billable)  # never price/1000 rounded up
    else:  # one conversion (CPA) or one click (CPC) bills the price, exactly
        assert billable == [price] * n


def test_a_cpa_campaign_alone_pays_the_reserve_per_conversion() -> None:
    """Target CPA $5, pCTR 1 %, pCVR 10 %, reserve $2 CPM: $2 per conversion."""
    c = Candidate(1, 1, 1, BidType.CPA, 5_000_000, 0.01, 0.1)
    [win] = run_auction([c], ["s1"], 2_000_000).wins
    assert win.price_micros == 2_000_000
    billable, free = _bill(c, win.price_micros, 3)
    assert billable == [2_000_000] * 3 and free == [0] * 6


def test_a_lone_winner_pays_the_reserve_not_a_rounding_micro_more() -> None:
    """Reserve $1.166688 CPM, pCTR 0.003 %, pCVR 30 %: the reserve per conversion is
    exactly 129,632,000 µ; the float quotient rounded up to 129,632,001 before."""
    c = Candidate(1, 1, 1, BidType.CPA, 200_000_000, 3e-05, 0.3)
    [win] = run_auction([c], ["s1"], 1_166_688).wins
    assert win.price_micros == _reserve_in_unit(1_166_688, c) == 129_632_000


@pytest.mark.slow
def test_reserve_equal_to_bid_is_charged_exactly() -> None:
    """The issue's input: CPM bid 1,500 µ, reserve 1,500 µ; each impression billed 2 µ
    before (eCPM 2,000 > bid). Now 1,000 impressions bill exactly 1,500 µ."""
    c = Candidate(1, 1, 1, BidType.CPM, 1_500, 0.01)
    [win] = run_auction([c], ["s1"], 1_500).wins
    assert win.price_micros == 1_500
    billable, _ = _bill(c, win.price_micros, 1_000)
    assert sum(billable) == 1_500
    assert set(billable) == {1, 2}
