"""A charge never exceeds the bid (issue 7 §4), checked in integers from auction to ledger.

Random bids, reserves, pCTRs, pCVRs and billing types go through the real auction and
the real ledger: per billable event the price (in the bid's unit) is ≤ the bid and ≥ the
reserve in that unit (rounded up) wherever that is ≤ the bid; for CPM the billed micros
of n impressions satisfy 1000·Σ ≤ n·price ≤ n·bid and 1000·Σ > n·price − 1000.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.auction import Candidate, run_auction
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent, Outcome
from adfunnel.campaigns.model import BidType

DAY = date(2026, 3, 14)
AT = datetime(2026, 3, 14, 12, tzinfo=UTC)
BIG_BUDGET = 10**15


def _reserve_in_unit(reserve_cpm: int, c: Candidate) -> int:
    """The reserve (micros per mille) in ``c``'s unit, rounded up, exactly."""
    if c.bid_type is BidType.CPM:
        return reserve_cpm
    per_impression = Fraction(reserve_cpm, 1000)
    return math.ceil(per_impression / Fraction(c.action_rate))


def _bill(ledger: MemoryLedger, c: Candidate, price: int, n: int) -> list[int]:
    """Bill ``n`` billable events of ``c`` at ``price`` (the token's price) as beacons do."""
    billed = []
    for k in range(n):
        imp = f"{c.ad_id}-{k}"
        cpm = c.bid_type is BidType.CPM
        first = LedgerEvent(imp, EventType.IMPRESSION, c.campaign_id, c.ad_id, "feed",
                            c.bid_type.value, price if cpm else 0, AT, DAY,
                            charge_per_mille=cpm)
        got = ledger.record(first, BIG_BUDGET)
        if not cpm:
            click = LedgerEvent(imp, EventType.CLICK, c.campaign_id, c.ad_id, "feed",
                                c.bid_type.value, price, AT, DAY)
            got = ledger.record(click, BIG_BUDGET)
        assert got.outcome is Outcome.BILLED and got.absorbed_micros == 0
        billed.append(got.billed_micros)
    return billed


candidate = st.builds(
    Candidate,
    ad_id=st.just(1),
    campaign_id=st.just(1),
    advertiser_id=st.just(1),
    bid_type=st.sampled_from(list(BidType)),
    bid_micros=st.integers(1, 50_000_000),
    pctr=st.floats(1e-5, 0.5),
    pcvr=st.floats(1e-3, 1.0),
)
rival = st.builds(
    Candidate,
    ad_id=st.just(2),
    campaign_id=st.just(2),
    advertiser_id=st.just(2),
    bid_type=st.sampled_from(list(BidType)),
    bid_micros=st.integers(0, 50_000_000),
    pctr=st.floats(1e-5, 0.5),
    pcvr=st.floats(1e-3, 1.0),
)


@settings(max_examples=400, deadline=None)
@given(
    c=candidate,
    others=st.lists(rival, max_size=1),
    reserve=st.integers(0, 5_000_000),
    n=st.integers(1, 40),
)
def test_charge_between_reserve_and_bid_in_integers(
    c: Candidate, others: list[Candidate], reserve: int, n: int
) -> None:
    result = run_auction([c, *others], ["s1"], reserve)
    wins = [w for w in result.wins if w.candidate.ad_id == c.ad_id]
    if not wins:
        return
    price = wins[0].price_micros
    assert type(price) is int
    assert price <= c.bid_micros
    floor = _reserve_in_unit(reserve, c)
    if floor <= c.bid_micros:
        assert price >= floor
    billed = _bill(MemoryLedger(), c, price, n)
    total = sum(billed)
    if c.bid_type is BidType.CPM:
        assert 1_000 * total <= n * price <= n * c.bid_micros
        assert 1_000 * total > n * price - 1_000
        assert all(b <= -(-price // 1_000) for b in billed)  # never more than price/1000 up
    else:
        assert billed == [price] * n


def test_reserve_equal_to_bid_is_charged_exactly() -> None:
    """The issue's input: CPM bid 1,500 µ, reserve 1,500 µ; each impression billed 2 µ
    before (eCPM 2,000 > bid). Now 1,000 impressions bill exactly 1,500 µ."""
    c = Candidate(1, 1, 1, BidType.CPM, 1_500, 0.01)
    [win] = run_auction([c], ["s1"], 1_500).wins
    assert win.price_micros == 1_500
    billed = _bill(MemoryLedger(), c, win.price_micros, 1_000)
    assert sum(billed) == 1_500
    assert set(billed) == {1, 2}
