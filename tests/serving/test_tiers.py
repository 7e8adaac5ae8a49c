"""The tiers' rule (serving/tiers.py) on its own: the sponsorship draw, the reasons, and
the prices: a direct winner pays exactly its contract rate, an auction winner never more
than its bid."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.auction.draws import PACING_COIN, unit
from adfunnel.auction.gsp import OUTRANKED, SAME_ADVERTISER, SAME_CAMPAIGN, Candidate
from adfunnel.budget.gate import BUDGET_EXHAUSTED, NO_SLICE, PACED_OUT
from adfunnel.campaigns.model import BidType
from adfunnel.serving.direct_book import GuaranteedSupply
from adfunnel.serving.tiers import (
    AHEAD_OF_PLAN,
    AUCTION,
    GOAL_MET,
    GUARANTEED,
    KIND_AUCTION,
    KIND_GUARANTEED,
    KIND_SPONSORSHIP,
    SHARE_DRAW,
    SHARE_NOT_DRAWN,
    SPONSORSHIP,
    DirectLine,
    coin_masks,
    coin_reason,
    fill_direct,
    fill_run,
    gate_reason,
    share_drawn,
    share_drawn_mask,
)


def test_the_share_draw_is_the_decisions_seed_and_the_campaign_id() -> None:
    """The draw is ``unit(seed, campaign id, SHARE_DRAW)``: pinned here, so a replay of the
    same seed draws the same way; no request id enters it (the caller chooses that)."""
    assert [s for s in range(20) if share_drawn(s, 1, 0.5)] == [
        i for i in range(20) if unit(i, 1, SHARE_DRAW) < 0.5]
    assert [s for s in range(12) if share_drawn(s, 1, 0.5)] == [2, 4, 6, 7, 8, 9, 10]


def test_a_sponsorship_is_drawn_for_its_share_of_the_requests() -> None:
    n = 40_000
    rng = random.Random(5)  # a decider's source: one 64-bit draw per decision
    seeds = [rng.getrandbits(64) for _ in range(n)]
    for share in (0.05, 0.3, 0.5, 0.97):
        drawn = sum(share_drawn(s, 7, share) for s in seeds)
        assert abs(drawn / n - share) < 4 * (share * (1 - share) / n) ** 0.5 + 1e-9
    assert all(share_drawn(s, 7, 1.0) for s in seeds[:1000])  # a takeover


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([0, 1, 2]),
                          st.floats(0, 1), st.floats(0.01, 1), st.integers(0, 2**64 - 1)),
                min_size=1, max_size=20))
def test_the_columnar_draws_equal_the_per_campaign_ones(rows: list) -> None:
    seed = rows[0][4]
    cids = np.array([r[0] for r in rows], dtype=np.int64)
    kinds = np.array([r[1] for r in rows], dtype=np.int8)
    p = np.array([r[2] for r in rows])
    shares = np.array([r[3] for r in rows])
    paced = np.array([unit(seed, int(c), PACING_COIN) >= q for c, q in zip(cids, p,
                                                                           strict=True)])
    auction, ahead, not_drawn = coin_masks(kinds, cids, paced, shares, seed)
    for i, (cid, kind, q, share, _) in enumerate(rows):
        want = coin_reason(kind, cid, seed, q, share)
        got = (PACED_OUT if auction[i] else AHEAD_OF_PLAN if ahead[i]
               else SHARE_NOT_DRAWN if not_drawn[i] else None)
        assert got == want
    spons = kinds == KIND_SPONSORSHIP
    assert (share_drawn_mask(seed, cids[spons], shares[spons]) == ~not_drawn[spons]).all()


def test_a_spent_direct_line_reports_goal_met() -> None:
    assert gate_reason(KIND_GUARANTEED, BUDGET_EXHAUSTED) == GOAL_MET
    assert gate_reason(KIND_SPONSORSHIP, BUDGET_EXHAUSTED) == GOAL_MET
    assert gate_reason(KIND_AUCTION, BUDGET_EXHAUSTED) == BUDGET_EXHAUSTED
    assert gate_reason(KIND_GUARANTEED, NO_SLICE) == NO_SLICE


def test_a_sponsorship_never_takes_the_pacing_coin() -> None:
    assert coin_reason(KIND_SPONSORSHIP, 3, 1, 0.0, 1.0) is None  # p = 0: still in
    assert coin_reason(KIND_GUARANTEED, 3, 1, 0.0, 1.0) == AHEAD_OF_PLAN
    assert coin_reason(KIND_AUCTION, 3, 1, 0.0, 1.0) == PACED_OUT


def _cand(ad: int, camp: int, adv: int, bid: int, bid_type: BidType = BidType.CPM,
          pctr: float = 0.01, quality: float = 0.0) -> Candidate:
    return Candidate(ad, camp, adv, bid_type, bid, pctr, quality_micros=quality)


def test_sponsorships_then_guaranteed_in_their_order_then_the_auction() -> None:
    lines = [
        DirectLine(KIND_GUARANTEED, 1, [_cand(30, 3, 3, 1_000_000)]),
        DirectLine(KIND_GUARANTEED, 0, [_cand(40, 4, 4, 900_000)]),  # less supply: first
        DirectLine(KIND_SPONSORSHIP, 0, [_cand(20, 2, 2, 500_000),
                                         _cand(21, 2, 2, 500_000, quality=10)]),
    ]
    auction = [_cand(50, 5, 5, 9_000_000), _cand(60, 6, 6, 8_000_000),
               _cand(70, 7, 4, 7_000_000)]  # advertiser 4 is on the page already
    fill = fill_run(["a", "b", "c", "d"], lines, auction, 0, tie_seed=1)
    assert [(w.slot_id, w.candidate.ad_id, w.price_micros) for w in fill.wins] == [
        ("a", 21, 500_000), ("b", 40, 900_000), ("c", 30, 1_000_000), ("d", 50, 8_000_000)]
    assert fill.tiers == {"a": SPONSORSHIP, "b": GUARANTEED, "c": GUARANTEED, "d": AUCTION}
    assert {r.ad_id: r.reason for r in fill.rejections} == {
        20: SAME_CAMPAIGN, 60: OUTRANKED, 70: SAME_ADVERTISER}


def test_direct_lines_beyond_the_slots_are_outranked_and_one_per_advertiser() -> None:
    lines = [DirectLine(KIND_SPONSORSHIP, 0, [_cand(1, 1, 9, 100)]),
             DirectLine(KIND_SPONSORSHIP, 0, [_cand(2, 2, 9, 100)]),  # same advertiser
             DirectLine(KIND_GUARANTEED, 0, [_cand(3, 3, 3, 100)])]
    fill = fill_direct(["a"], lines, tie_seed=0)
    assert [w.candidate.ad_id for w in fill.wins] == [1] and fill.rest == []
    assert {r.ad_id: r.reason for r in fill.rejections} == {2: SAME_ADVERTISER, 3: OUTRANKED}


_BIDS = st.integers(1, 20_000_000)
_CANDS = st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6), _BIDS,
                            st.sampled_from([BidType.CPM, BidType.CPC, BidType.CPA]),
                            st.floats(0.0001, 0.2), st.sampled_from([0.0, 0.0, 500.0, -300.0])),
                  max_size=14)


@settings(max_examples=400, deadline=None)
@given(_CANDS, _CANDS, st.integers(1, 5), st.sampled_from([0, 500_000, 2_000_000]),
       st.integers(0, 2**64 - 1))
def test_direct_winners_pay_their_contract_rate_and_auction_winners_at_most_their_bid(
        direct_rows, auction_rows, n_slots, reserve, seed) -> None:
    by_campaign: dict[int, list[Candidate]] = {}
    kinds: dict[int, int] = {}
    for k, (camp, adv, bid, bid_type, pctr, q) in enumerate(direct_rows):
        c = camp  # campaigns 1..12 direct, 101.. auction: one tier per campaign
        kinds.setdefault(c, KIND_SPONSORSHIP if c % 2 else KIND_GUARANTEED)
        adv_of = by_campaign[c][0].advertiser_id if c in by_campaign else adv
        by_campaign.setdefault(c, []).append(_cand(1000 + k, c, adv_of, bid, bid_type, pctr, q))
    lines = [DirectLine(kinds[c], c % 5, cands) for c, cands in by_campaign.items()]
    auction = [_cand(2000 + k, 100 + camp, adv, bid, bid_type, pctr, q)
               for k, (camp, adv, bid, bid_type, pctr, q) in enumerate(auction_rows)]
    slots = [f"s{i}" for i in range(n_slots)]
    fill = fill_run(slots, lines, auction, reserve, seed)
    direct_ids = {c.ad_id for line in lines for c in line.candidates}
    for w in fill.wins:
        if w.candidate.ad_id in direct_ids:
            assert w.price_micros == w.candidate.bid_micros
            assert fill.tiers[w.slot_id] in (SPONSORSHIP, GUARANTEED)
        else:
            assert w.price_micros <= w.candidate.bid_micros
            assert fill.tiers[w.slot_id] == AUCTION
    # one ad per campaign and per advertiser on the page; direct lines fill first
    assert len({w.candidate.campaign_id for w in fill.wins}) == len(fill.wins)
    assert len({w.candidate.advertiser_id for w in fill.wins}) == len(fill.wins)
    order = [fill.tiers[w.slot_id] for w in fill.wins]
    assert order == sorted(order, key=[SPONSORSHIP, GUARANTEED, AUCTION].index)
    assert [w.slot_id for w in fill.wins] == slots[: len(fill.wins)]
    # every candidate not placed carries a reason
    placed = {w.candidate.ad_id for w in fill.wins}
    assert {r.ad_id for r in fill.rejections} == (direct_ids | {c.ad_id for c in auction}) - placed


def test_the_supply_sample_orders_by_recent_eligible_requests() -> None:
    supply = GuaranteedSupply(sample_size=4, half_life=10)
    for _ in range(3):
        supply.observe([1, 2])
    supply.observe([2])
    assert supply.order([2, 1, 9]) == [9, 1, 2]  # never seen: 0, first; then by count, id
    for _ in range(6):
        supply.observe([])  # no guaranteed line eligible: not a request of theirs
        supply.observe([1])
    assert supply.requests == 10 and supply.counts == {1: 4, 2: 2}  # halved at 10
    plan = supply.plan({1: 5.0, 2: 2.0})
    assert plan.order == (2, 1) and sum(plan.eligible.values()) > 0
