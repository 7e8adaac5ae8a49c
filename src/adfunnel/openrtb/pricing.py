"""Our bid for each imp an internal winner fills, and its token: money in integer micros.

**Price** (CPM micros in our currency), from the winner's candidate:

- the winner's *value* per thousand impressions: its bid × action rate × 1000, rounded
  down (CPM: the bid itself; CPC: bid × pCTR × 1000; CPA: bid × pCTR × pCVR × 1000),
  where the bid is the campaign's (after λ for automatic strategies, the
  :mod:`adfunnel.bidding.strategy` bid = value ÷ λ) and never the first-price-shaded
  one. Quality is the operator's rank adjustment, not money: it is left out. A CPM
  campaign thus never bids above its own CPM bid;
- ``at=2`` (second price, the default): that value — the exchange charges less;
- ``at=1`` (first price): an automatic campaign shades it with the win curve of the
  slot's segment (:mod:`adfunnel.serving.bid_shading`, as on our own first-price
  placements: the decider's shading release); no curve, or a manual bid: the value;
- a price under the imp's floor (rounded up to micros), or zero: no bid.

**Token** (the bid's own claims, same impression id; signed once, when the answer reads
it — the internal winner's claims are never signed): ``billing_type`` ``CPM``,
``price_micros`` = our bid (the ceiling of any clearing price a notice may bill),
``expected_micros`` = ⌈bid ÷ 1000⌉ (the worst cost of one impression: the budget counts
it in flight, so the serve's :class:`~adfunnel.budget.gate.Served` is rewritten to it),
``billable_event`` ``notice`` (the billing notice bills) or ``exchange_beacon`` (the
impression beacon in ``adm`` bills the clearing price it carries: ``openrtb_bills_on =
beacon``; :mod:`adfunnel.tracking.notice_desk`).

At the spec's boundary a price becomes a float in currency units, rounded DOWN to the
micro (:func:`spec_price`): never above what the token lets us be billed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal

import numpy as np

from adfunnel.auction.gsp import Candidate
from adfunnel.bidding.shade_arrays import shade_unit_bids
from adfunnel.bidding.shading import WinCurve
from adfunnel.budget.gate import BUDGET_EXHAUSTED
from adfunnel.campaigns.bidding_terms import is_automatic
from adfunnel.campaigns.model import AuctionType, BidType, Campaign
from adfunnel.money import MICROS_PER_UNIT, MILLE, impression_charge_bound
from adfunnel.openrtb.mapping import Mapped
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.serving.bid_shading import run_curve
from adfunnel.serving.decision import Decision, Placed
from adfunnel.serving.tiers import AUCTION
from adfunnel.tracking.token import TokenClaims
from adfunnel.tracking.token_claims import EXCHANGE_BEACON

#: No-bid reason of an imp whose internal winner's bid is under the imp's floor (a
#: first-price shade or a CPC/CPA value under it; the auction's reserve is the floor).
BELOW_FLOOR = "below_floor"
#: No-bid reason of an imp a sponsorship or guaranteed line filled inside: a direct line
#: is sold on the operator's own slots at its contract rate (CPM per mille, CPC per
#: click), which a CPM bid billed at an exchange's clearing price would not honour (a
#: clicks goal paid per impression), so it never bids on an exchange. A safety net: the
#: funnel leaves direct lines out of an exchange's request already
#: (:class:`~adfunnel.serving.request.ExchangeSelect`), so the auction fills the slot.
DIRECT_LINE = "direct_line"
#: ``billable_event`` of a bid's token, by ``openrtb_bills_on``.
BILLABLE_EVENT = {"burl": "notice", "beacon": EXCHANGE_BEACON}
_MICRO = Decimal(1).scaleb(-6)
_CPM = BidType.CPM.value


def value_cpm_micros(c: Candidate, bid_micros: int) -> int:
    """The candidate's value per thousand impressions bidding ``bid_micros`` in its
    unit, micros, rounded down."""
    if c.bid_type is BidType.CPM:
        return bid_micros
    return int(np.floor(bid_micros * c.action_rate * MILLE))


def bid_price(p: Placed, unshaded: int | None, first_price: bool,
              curve: Callable[[], WinCurve | None], floor_micros: int) -> int:
    """Our CPM bid (micros) for the winner ``p`` (module doc); ``unshaded``: its bid
    before the decision's own first-price shading (None: not shaded); ``curve``: the
    slot's win curve (called only for an automatic campaign at first price)."""
    c = p.win.candidate
    bid = c.bid_micros if unshaded is None else unshaded
    if first_price and is_automatic(p.campaign.bid_strategy):
        found = curve()
        if found is not None:
            bid = int(shade_unit_bids(np.array([bid]), np.array([c.action_rate]),
                                      np.array([float(c.quality_micros)]), found,
                                      floor_micros / MILLE)[0])
    return value_cpm_micros(c, bid)


def bid_token(p: Placed, price_micros: int, placement: str, token_ttl_s: int,
              billable_event: str, key: bytes) -> Placed:
    """``p`` with the claims of a bid of ``price_micros`` (CPM), signed under ``key`` when
    its token is first read (:attr:`~adfunnel.serving.decision.Placed.token`: once per
    bid): its token, expected cost and charge bound are the bid's (module doc); the
    impression id and expiry are kept."""
    expected = impression_charge_bound(price_micros)
    expires = int(p.served.expires_at)
    claims = TokenClaims(
        impression_id=p.served.impression_id, ad_id=p.ad.id, campaign_id=p.campaign.id,
        price_micros=price_micros, billing_type=_CPM, placement=placement,
        issued_at=max(0, expires - token_ttl_s), expires_at=expires,
        expected_micros=expected, billable_event=billable_event)
    served = replace(p.served, expected_micros=expected, max_charge_micros=expected)
    # the new Placed holds no token (replace keeps none): signed once, at this price
    return replace(p, charge_micros=expected, claims=claims, token_key=key, served=served)


def reprice(decision: Decision, mapped: Mapped, *, key: bytes, token_ttl_s: int,
            release: ShadingRelease | None, now: datetime, billable_event: str,
            room: Callable[[Campaign, int], bool] = lambda *_: True,
            reasons: dict[str, str] | None = None) -> dict[str, int]:
    """Rewrite ``decision`` for the exchange, in place: each winner given its bid's claims
    (its token signed once, when first read), the winners under their floor dropped,
    house fills dropped (never bid). Returns slot id -> our bid (CPM micros), for the
    winners kept (also ``decision.bids``, with the auction type in
    ``decision.openrtb_at``: the served log's price).

    A winner under its floor is dropped with ``below_floor`` in ``reasons``, a
    sponsorship or guaranteed line's with ``direct_line`` (:data:`DIRECT_LINE`).
    ``room(campaign, micros)``: whether the campaign's budget (or slice) has room now
    for that worst cost (:func:`adfunnel.budget.gate.fits`): each bid's worst cost
    ⌈bid ÷ 1000⌉, with its campaign's other bids of the decision, is what the commit
    puts in flight, so a winner without room is dropped (``budget_exhausted`` in
    ``reasons``, by imp id).

    A dropped winner commits no spend; the endpoint gives back the frequency-cap counts
    its decision made (:meth:`~adfunnel.serving.decider.ColumnarDecider.abandon` with
    its ad id), the kept winners keep theirs."""
    select = mapped.select
    assert select is not None
    placement = select.placement.id
    slots = {s.id: s for s in select.slots}
    kept: list[Placed] = []
    prices: dict[str, int] = {}
    held: dict[int, int] = {}  # campaign id -> worst cost of its bids kept, micros
    for p in decision.placed:
        terms = mapped.imps.get(p.win.slot_id)
        if terms is None:
            continue
        if p.tier != AUCTION:  # a contract is not sold at an exchange's clearing price
            if reasons is not None:
                reasons[terms.imp_id] = DIRECT_LINE
            continue
        slot = slots[p.win.slot_id]

        def curve(slot_=slot) -> WinCurve | None:
            return run_curve(release, AuctionType.FIRST_PRICE, placement, slot_, now, None)

        price = bid_price(p, decision.unshaded.get(p.win.slot_id), mapped.first_price,
                          curve, terms.floor_micros)
        if price <= 0 or price < terms.floor_micros:
            if reasons is not None and price > 0:  # won inside, under the exchange's floor
                reasons[terms.imp_id] = BELOW_FLOOR
            continue
        worst = held.get(p.campaign.id, 0) + impression_charge_bound(price)
        if not room(p.campaign, worst):
            if reasons is not None:
                reasons[terms.imp_id] = BUDGET_EXHAUSTED
            continue
        held[p.campaign.id] = worst
        kept.append(bid_token(p, price, placement, token_ttl_s, billable_event, key))
        prices[p.win.slot_id] = price
    decision.placed = kept
    decision.house = []
    decision.openrtb_at = 1 if mapped.first_price else 2
    decision.bids = prices
    return prices


def spec_price(micros: int, rate: Decimal = Decimal(1)) -> float:
    """``micros`` of our currency as the spec's price, in units of a currency worth
    ``rate`` of ours, rounded DOWN to the micro (1_234_567 → 1.234567)."""
    if rate == 1:  # our own currency: nothing to round, and int ÷ int is the nearest float
        return micros / MICROS_PER_UNIT  # of the exact quotient, as float(Decimal) is
    units = (Decimal(micros) / MICROS_PER_UNIT / rate).quantize(_MICRO, rounding=ROUND_FLOOR)
    return float(units)
