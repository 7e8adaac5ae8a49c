"""Generalised second-price (and first-price) auction on total value with quality and
reserve.

DESIGN.md §The funnel, step 6:

- action rate per impression: CPM → 1/1000 (the bid buys a thousand impressions),
  CPC → pCTR, CPA → pCTR × pCVR;
- value = bid × action rate (micros per impression); total = value + quality;
- candidates whose value or total is under the reserve are dropped (``below_reserve``);
- slots are filled in position order with the best totals, at most one ad per
  campaign (and per advertiser, by default) per page;
- exactly equal totals are ordered uniformly at random by the decision's own random
  source (one random key per candidate, so ties among three or more are uniform too);
  the caller seeds it per decision, so a replay with the same seed reproduces;
- GSP price in the bid's unit = (next total − own quality) ÷ own action rate, rounded
  up to whole micros, capped at the bid and floored at the reserve in the bid's unit
  (CPM: the reserve itself; CPC/CPA: reserve ÷ (1000 × action rate), rounded up in
  exact rational arithmetic). The next total of the last winner is the next eligible
  candidate's, or the reserve: a winner with no one after it pays the reserve in its
  bid's unit (more only with a negative quality: the least bid whose total still
  reaches the reserve), computed exactly (:func:`last_price`). So a CPA conversion
  bills at most the target CPA and at least the reserve per conversion, and a CPA
  campaign that wins alone pays the reserve. The price is what the token carries: a
  CPM price is billed per impression as price ÷ 1000 with the fraction carried by the
  ledger, so no charge is rounded against the advertiser.

A placement of ``auction_type`` ``first_price`` ranks, drops and limits candidates
exactly so, and charges each winner its own bid in its unit (≥ the reserve in that unit,
as eligibility requires); ``second_price`` (the default) charges the GSP price above.

Worked example (DESIGN.md): A bids $2.00 CPC at 1.5 % with quality +$0.002, B bids
$3.00 at 0.8 % with quality −$0.001: totals 0.032 vs 0.023, A wins and pays
(0.023 − 0.002) / 0.015 = $1.40 per click.

Invariants (property-tested): price ≤ bid, and price ≥ reserve in the bid's unit
wherever that is ≤ bid, for every winner, in both auction types; second price charges
the GSP price, first price the bid; winners are distinct campaigns; a winner's
total ≥ the next winner's total.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from adfunnel.auction.draws import TIE_BREAK, unit
from adfunnel.campaigns.model import AuctionType, BidType
from adfunnel.money import MILLE, ceil_micros

BELOW_RESERVE = "below_reserve"
OUTRANKED = "outranked"
SAME_CAMPAIGN = "same_campaign_on_page"
SAME_ADVERTISER = "same_advertiser_on_page"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One ad competing for the page.

    ``bid_micros`` is per thousand impressions (CPM), per click (CPC) or per
    conversion (CPA); ``pctr``/``pcvr`` are probabilities; ``quality_micros`` is a
    money adjustment per impression (may be negative).
    """

    ad_id: int
    campaign_id: int
    advertiser_id: int
    bid_type: BidType
    bid_micros: int
    pctr: float
    pcvr: float = 1.0
    quality_micros: float = 0.0

    @property
    def action_rate(self) -> float:
        """Billable actions per impression."""
        if self.bid_type is BidType.CPM:
            return 1.0 / MILLE
        if self.bid_type is BidType.CPC:
            return self.pctr
        return self.pctr * self.pcvr

    @property
    def value(self) -> float:
        """Expected bid value per impression, micros."""
        return self.bid_micros * self.action_rate

    @property
    def total(self) -> float:
        """Total value per impression (value + quality), micros."""
        return self.value + self.quality_micros


@dataclass(frozen=True, slots=True)
class Win:
    """A filled slot. ``price_micros`` is in the bid's unit (per mille / click / conversion)."""

    slot_id: str
    candidate: Candidate
    price_micros: int


@dataclass(frozen=True, slots=True)
class Rejection:
    ad_id: int
    campaign_id: int
    reason: str
    detail: str | None = None  # e.g. the frequency cap that bound


@dataclass(frozen=True, slots=True)
class AuctionResult:
    wins: list[Win]
    rejections: list[Rejection]


def reserve_in_unit(reserve_per_impression: float, candidate: Candidate) -> float:
    """The reserve (micros per impression) expressed in the candidate's bid unit."""
    rate = candidate.action_rate
    return reserve_per_impression / rate if rate > 0 else float("inf")


def run_auction(
    candidates: Sequence[Candidate],
    slot_ids: Sequence[str],
    reserve_cpm_micros: int = 0,
    *,
    one_per_advertiser: bool = True,
    rng: random.Random | None = None,
    tie_seed: int | None = None,
    auction_type: AuctionType = AuctionType.SECOND_PRICE,
) -> AuctionResult:
    """Fill ``slot_ids`` (already in position order) from ``candidates``, priced by
    ``auction_type`` (second price: GSP; first price: each winner's bid).

    ``reserve_cpm_micros`` is the floor per thousand impressions for this placement.
    Exact ties of total value are broken uniformly at random by a key per ad drawn from
    ``tie_seed`` (``adfunnel.auction.draws``: independent of the candidates' order),
    else from a seed drawn from ``rng``, else from a fresh unseeded source. Pass the
    decision's seed to make the decision reproducible.
    Returns winners with prices and every loser with its reason.
    """
    reserve_imp = reserve_cpm_micros / MILLE
    rejections: list[Rejection] = []
    eligible: list[Candidate] = []
    for c in candidates:
        ok = c.action_rate > 0 and c.bid_micros >= reserve_in_unit(reserve_imp, c)
        if ok and c.total >= reserve_imp:
            eligible.append(c)
        else:
            rejections.append(Rejection(c.ad_id, c.campaign_id, BELOW_RESERVE))
    if tie_seed is None:
        tie_seed = (rng or random.Random()).getrandbits(64)
    eligible = _rank(eligible, tie_seed)

    ranked: list[Candidate] = []
    campaigns: set[int] = set()
    advertisers: set[int] = set()
    for c in eligible:
        if c.campaign_id in campaigns:
            rejections.append(Rejection(c.ad_id, c.campaign_id, SAME_CAMPAIGN))
        elif one_per_advertiser and c.advertiser_id in advertisers:
            rejections.append(Rejection(c.ad_id, c.campaign_id, SAME_ADVERTISER))
        else:
            ranked.append(c)
            campaigns.add(c.campaign_id)
            advertisers.add(c.advertiser_id)

    wins: list[Win] = []
    for i, c in enumerate(ranked):
        if i >= len(slot_ids):
            rejections.append(Rejection(c.ad_id, c.campaign_id, OUTRANKED))
            continue
        if auction_type is AuctionType.FIRST_PRICE:
            price = c.bid_micros  # eligible: the bid is at least the reserve in its unit
        elif i + 1 < len(ranked):
            price = gsp_price(c, ranked[i + 1].total, reserve_cpm_micros)
        else:  # the last winner: its next total is the reserve
            price = last_price(c, reserve_cpm_micros)
        wins.append(Win(slot_ids[i], c, price))
    return AuctionResult(wins, rejections)


def _rank(eligible: list[Candidate], tie_seed: int) -> list[Candidate]:
    """By total value, best first; exact ties in a uniformly random order."""
    keyed = [(-c.total, unit(tie_seed, c.ad_id, TIE_BREAK), c) for c in eligible]
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [c for _, _, c in keyed]


def gsp_price(c: Candidate, next_total: float, reserve_cpm_micros: int) -> int:
    """Price in ``c``'s bid unit: (next total − own quality) ÷ action rate, in [reserve, bid]."""
    raw = max(0.0, (next_total - c.quality_micros) / c.action_rate)
    return min(c.bid_micros, max(ceil_micros(raw), reserve_price(reserve_cpm_micros, c)))


def last_price(c: Candidate, reserve_cpm_micros: int) -> int:
    """The price of a winner with no one after it (alone, or in the last slot filled):
    (reserve per impression − own quality) ÷ action rate in exact rational arithmetic,
    in [reserve in the bid's unit, bid]. With no quality (or a positive one) it is
    exactly the reserve in the bid's unit: a CPA campaign that wins alone pays the
    reserve per conversion, never a rounding micro more."""
    raw = (Fraction(reserve_cpm_micros, MILLE) - Fraction(c.quality_micros)) / Fraction(
        c.action_rate)
    floor = reserve_price(reserve_cpm_micros, c)
    return min(c.bid_micros, max(math.ceil(raw), floor))


def reserve_price(reserve_cpm_micros: int, c: Candidate) -> int:
    """The reserve in ``c``'s bid unit, whole micros rounded up, computed exactly.

    CPM: the reserve (micros per mille) itself; CPC/CPA: ceil(reserve ÷ (1000 × action
    rate)) in rational arithmetic, so a price at this floor is never below the reserve.
    ``c.action_rate`` must be > 0.
    """
    if c.bid_type is BidType.CPM:
        return reserve_cpm_micros
    return math.ceil(Fraction(reserve_cpm_micros) / (MILLE * Fraction(c.action_rate)))
