"""Invariants of the GSP auction, on generated candidates (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.auction import Candidate, run_auction
from adfunnel.auction.gsp import reserve_in_unit
from adfunnel.campaigns.model import BidType

candidate = st.builds(
    Candidate,
    ad_id=st.integers(1, 10_000),
    campaign_id=st.integers(1, 30),
    advertiser_id=st.integers(1, 15),
    bid_type=st.sampled_from(list(BidType)),
    bid_micros=st.integers(1, 50_000_000),
    pctr=st.floats(1e-5, 0.5),
    pcvr=st.floats(1e-3, 1.0),
    quality_micros=st.floats(-50.0, 50.0),
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    cands=st.lists(candidate, max_size=25, unique_by=lambda c: c.ad_id),
    slots=st.integers(1, 3),
    reserve=st.integers(0, 5_000_000),
)
def test_price_between_reserve_and_bid(cands: list[Candidate], slots: int, reserve: int) -> None:
    result = run_auction(cands, [f"s{i}" for i in range(slots)], reserve)
    for w in result.wins:
        assert isinstance(w.price_micros, int)
        assert w.price_micros <= w.candidate.bid_micros
        assert w.price_micros >= reserve_in_unit(reserve / 1000, w.candidate) - 1e-6


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(cands=st.lists(candidate, max_size=25, unique_by=lambda c: c.ad_id), slots=st.integers(1, 3))
def test_one_ad_per_campaign_and_order(cands: list[Candidate], slots: int) -> None:
    result = run_auction(cands, [f"s{i}" for i in range(slots)], 0)
    campaigns = [w.candidate.campaign_id for w in result.wins]
    advertisers = [w.candidate.advertiser_id for w in result.wins]
    assert len(set(campaigns)) == len(campaigns)
    assert len(set(advertisers)) == len(advertisers)
    totals = [w.candidate.total for w in result.wins]
    assert totals == sorted(totals, reverse=True)
    assert len(result.wins) + len(result.rejections) == len(cands)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(cands=st.lists(candidate, min_size=2, max_size=10, unique_by=lambda c: c.ad_id))
def test_winner_keeps_rank_at_its_price(cands: list[Candidate]) -> None:
    """Paying its GSP price, the winner's total would still be >= the runner-up's."""
    result = run_auction(cands, ["s"], 0)
    if not result.wins:
        return
    w = result.wins[0]
    if w.price_micros == w.candidate.bid_micros:
        return  # capped at the bid
    c = w.candidate
    at_price = w.price_micros * c.action_rate + c.quality_micros
    others = [
        x.total for x in cands
        if x.campaign_id != c.campaign_id and x.advertiser_id != c.advertiser_id and x.total >= 0
    ]
    assert at_price >= max(others, default=0) - 1e-6
