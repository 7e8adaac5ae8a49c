"""Both auction types on generated candidates (hypothesis, #27): the same winners in the
same slots; no winner charged above its bid; second price charges exactly the GSP price
(the next ranked total's, or the reserve's for the last), first price the bid."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.auction import Candidate, run_auction
from adfunnel.auction.draws import TIE_BREAK, unit
from adfunnel.auction.gsp import BELOW_RESERVE, gsp_price, last_price
from adfunnel.campaigns.model import AuctionType
from tests.auction.test_gsp_properties import candidate

SLOTS = st.integers(1, 3)
RESERVES = st.integers(0, 5_000_000)


def _ranked(cands: list[Candidate], below: set[int], tie_seed: int) -> list[Candidate]:
    """The auction's order, rebuilt from its rules: eligible candidates by total, ties by
    the seeded key, one per campaign and per advertiser."""
    keyed = sorted((c for c in cands if c.ad_id not in below),
                   key=lambda c: (-c.total, unit(tie_seed, c.ad_id, TIE_BREAK)))
    out: list[Candidate] = []
    for c in keyed:
        if all(c.campaign_id != x.campaign_id and c.advertiser_id != x.advertiser_id
               for x in out):
            out.append(c)
    return out


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(cands=st.lists(candidate, max_size=25, unique_by=lambda c: c.ad_id), slots=SLOTS,
       reserve=RESERVES, tie_seed=st.integers(0, 2**64 - 1))
def test_no_charge_above_the_bid_nor_above_gsp(cands: list[Candidate], slots: int,
                                               reserve: int, tie_seed: int) -> None:
    """Red when first price charges the GSP price, or second price charges the bid."""
    slot_ids = [f"s{i}" for i in range(slots)]
    second = run_auction(cands, slot_ids, reserve, tie_seed=tie_seed)
    first = run_auction(cands, slot_ids, reserve, tie_seed=tie_seed,
                        auction_type=AuctionType.FIRST_PRICE)
    assert [(w.slot_id, w.candidate) for w in first.wins] == [
        (w.slot_id, w.candidate) for w in second.wins]
    assert sorted((r.ad_id, r.reason) for r in first.rejections) == sorted(
        (r.ad_id, r.reason) for r in second.rejections)
    below = {r.ad_id for r in second.rejections if r.reason == BELOW_RESERVE}
    ranked = _ranked(cands, below, tie_seed)
    for i, (sp, fp) in enumerate(zip(second.wins, first.wins, strict=True)):
        c = sp.candidate
        assert ranked[i] == c
        gsp = (gsp_price(c, ranked[i + 1].total, reserve) if i + 1 < len(ranked)
               else last_price(c, reserve))
        assert sp.price_micros == gsp <= c.bid_micros
        assert fp.price_micros == c.bid_micros >= sp.price_micros
