"""The serving tiers (issue #25, "Priorities"): which line fills a slot, before the auction.

One rule, called by both deciders (:mod:`adfunnel.serving.reference` and the columnar
:mod:`adfunnel.serving.decider`), so a differential test holds them to the same winners:

1. **Sponsorship** lines first. Each eligible sponsorship (status, flight, daypart,
   targeting, shape, placement rules, budget gate and frequency caps passed) is *drawn*
   for the request with probability ``goal.share``: ``unit(seed, campaign id, SHARE_DRAW)
   < share`` (:mod:`adfunnel.auction.draws`), ``seed`` being the decision's own draw from
   its decider's source (the operating system's entropy, or the runtime's ``seed`` for a
   replay), so both paths draw the same way for one decision and a seeded replay again.
   Never from the request id: the caller chooses it, and with it whether a sponsorship is
   served (and billed) — the ids that drew it once drew it every time. Not drawn: reason
   ``share_not_drawn``. A sponsorship never takes the pacing coin. Drawn sponsorships
   take slots in campaign id order (booking order).
2. **Guaranteed** lines next, in High Water Mark allocation order (least eligible supply
   first: :mod:`adfunnel.pacing.allocation`; the order the decider's supply sample gives,
   then campaign id). Each has passed its pacing coin (p from the budget service, whose
   controller follows the line's flight plan); the coin said no: ``ahead_of_plan``.
3. The **auction** on the slots left, among auction campaigns only (a direct line never
   bids in it), unchanged but for the slots taken and the campaigns and advertisers now
   on the page.
4. The placement's **house** ad in what is still empty.

An exchange's request (OpenRTB, :class:`~adfunnel.serving.request.ExchangeSelect`) has no
direct tiers: its sponsorship and guaranteed lines are left out before the draws, as
``direct_line``, counting no eligible traffic or supply, and the auction fills its slots.

A sponsorship or guaranteed line whose budget of the period (its goal's cost, a flight
budget or a day) is spent is turned away by the budget gate with ``goal_met`` instead of
``budget_exhausted``. One ad per campaign and per advertiser per page, slot shape, caps,
filters and the budget gate apply to every tier; the reserve does not apply to direct
lines (a contract rate is agreed, not bid). A direct line takes a slot with its best
creative of the slot's shape by the auction's ranking (total value, then the decision's
tie key), and is charged its contract rate: the win's price is ``bid_micros`` (CPM per
mille, CPC per click), never a GSP price.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from adfunnel.auction.draws import PACING_COIN, TIE_BREAK, unit, unit_array
from adfunnel.auction.gsp import (
    OUTRANKED,
    SAME_ADVERTISER,
    SAME_CAMPAIGN,
    Candidate,
    Rejection,
    Win,
    run_auction,
)
from adfunnel.budget.gate import BUDGET_EXHAUSTED, PACED_OUT
from adfunnel.campaigns.model import AuctionType, Campaign, Priority

SPONSORSHIP = "sponsorship"
GUARANTEED = "guaranteed"
AUCTION = "auction"
HOUSE = "house"
#: Tier names in serving order.
TIERS = (SPONSORSHIP, GUARANTEED, AUCTION, HOUSE)

#: A sponsorship or guaranteed line whose budget of the period is spent (gate refused).
GOAL_MET = "goal_met"
#: A guaranteed line whose pacing coin said no (its plan does not need this request).
AHEAD_OF_PLAN = "ahead_of_plan"
#: A sponsorship not drawn for this request (its share of the matching requests).
SHARE_NOT_DRAWN = "share_not_drawn"
#: A sponsorship or guaranteed line on an exchange's request (OpenRTB): a contract is
#: sold on the operator's own slots at its rate, never as a bid billed at an exchange's
#: clearing price; left out before the tiers, so the auction fills the slot.
DIRECT_LINE = "direct_line"

#: Salt of the sponsorship draw (:mod:`adfunnel.auction.draws`).
SHARE_DRAW = 0x5EED_0005

#: Tier codes of :class:`~adfunnel.serving.direct_book.DirectBook` (0: auction).
KIND_AUCTION, KIND_GUARANTEED, KIND_SPONSORSHIP = 0, 1, 2
KIND_OF = {Priority.AUCTION: KIND_AUCTION, Priority.GUARANTEED: KIND_GUARANTEED,
           Priority.SPONSORSHIP: KIND_SPONSORSHIP}


def tier_of(c: Campaign) -> str:
    """The tier ``c`` sells in (its ``priority``)."""
    return c.priority.value


def share_of(c: Campaign) -> float:
    """A sponsorship's share of the matching requests (1.0 without a share goal)."""
    share = c.goal.share if c.goal is not None else None
    return 1.0 if share is None else float(share)


def share_drawn(seed: int, campaign_id: int, share: float) -> bool:
    """Whether the sponsorship ``campaign_id`` of ``share`` is drawn by the decision of
    ``seed`` (its 64-bit draw, never anything the caller sent)."""
    return unit(seed, campaign_id, SHARE_DRAW) < share


def share_drawn_mask(seed: int, campaign_ids: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """:func:`share_drawn` for each of ``campaign_ids`` (bit for bit the same draws)."""
    return unit_array(seed, campaign_ids, SHARE_DRAW) < shares


def gate_reason(kind: int, reason: str) -> str:
    """The budget gate's ``reason`` as a line of tier ``kind`` reports it: ``goal_met``
    for a direct line's spent budget."""
    if reason == BUDGET_EXHAUSTED and kind != KIND_AUCTION:
        return GOAL_MET
    return reason


def coin_reason(kind: int, c_id: int, seed: int, p: float, share: float) -> str | None:
    """The per-request draw of an admitted line of tier ``kind``, from the decision's
    ``seed``: a sponsorship's share draw, else the pacing coin (probability ``p``); its
    reason or None."""
    if kind == KIND_SPONSORSHIP:
        return None if share_drawn(seed, c_id, share) else SHARE_NOT_DRAWN
    if unit(seed, c_id, PACING_COIN) >= p:
        return AHEAD_OF_PLAN if kind == KIND_GUARANTEED else PACED_OUT
    return None


def coin_masks(kinds: np.ndarray, campaign_ids: np.ndarray, paced: np.ndarray,
               shares: np.ndarray, seed: int,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`coin_reason` over arrays: given each admitted campaign's tier code, id,
    pacing coin (``paced``: True where ``unit(seed, id, PACING_COIN) ≥ p``) and share,
    and the decision's ``seed``, the masks (``paced_out``, ``ahead_of_plan``,
    ``share_not_drawn``)."""
    spons = kinds == KIND_SPONSORSHIP
    not_drawn = np.zeros(len(campaign_ids), dtype=bool)
    if spons.any():
        not_drawn[spons] = ~share_drawn_mask(seed, campaign_ids[spons], shares[spons])
    return paced & (kinds == KIND_AUCTION), paced & (kinds == KIND_GUARANTEED), not_drawn


@dataclass(frozen=True, slots=True)
class DirectLine:
    """A sponsorship or guaranteed line eligible for a slot run: its ``kind``, its place
    in the guaranteed order (``rank``; sponsorships ignore it: they go by campaign id)
    and its candidates (its ads of the run's shape; the win's price is the candidate's
    ``bid_micros``)."""

    kind: int
    rank: int
    candidates: Sequence[Candidate]

    @property
    def campaign_id(self) -> int:
        return self.candidates[0].campaign_id

    @property
    def advertiser_id(self) -> int:
        return self.candidates[0].advertiser_id


@dataclass(slots=True)
class RunFill:
    """What one slot run's tiers decided: wins (slot order), the tier of each filled slot,
    the rejections, and the slots left for the auction."""

    wins: list[Win] = field(default_factory=list)
    tiers: dict[str, str] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)


def fill_direct(slot_ids: Sequence[str], lines: Sequence[DirectLine],
                tie_seed: int) -> RunFill:
    """Fill ``slot_ids`` (position order) from the direct ``lines`` (campaigns and
    advertisers already on the page left out by the caller): sponsorships by campaign id,
    then guaranteed lines by ``rank``; each line takes the next slot with its best
    creative (total, then tie key), at its contract rate. One line per advertiser."""
    out = RunFill()
    free = list(slot_ids)
    advertisers: set[int] = set()
    ordered = sorted(lines, key=lambda ln: (
        -ln.kind, ln.rank if ln.kind == KIND_GUARANTEED else 0, ln.campaign_id))
    for line in ordered:
        ranked = sorted(line.candidates,
                        key=lambda c: (-c.total, unit(tie_seed, c.ad_id, TIE_BREAK)))
        if line.advertiser_id in advertisers:
            out.rejections += [Rejection(c.ad_id, c.campaign_id, SAME_ADVERTISER)
                               for c in ranked]
            continue
        if not free:
            out.rejections += [Rejection(c.ad_id, c.campaign_id, OUTRANKED) for c in ranked]
            continue
        best, slot = ranked[0], free.pop(0)
        advertisers.add(line.advertiser_id)
        out.wins.append(Win(slot, best, best.bid_micros))
        out.tiers[slot] = SPONSORSHIP if line.kind == KIND_SPONSORSHIP else GUARANTEED
        out.rejections += [Rejection(c.ad_id, c.campaign_id, SAME_CAMPAIGN)
                           for c in ranked[1:]]
    out.rest = free
    return out


def fill_run(slot_ids: Sequence[str], lines: Sequence[DirectLine],
             auction: Sequence[Candidate], reserve_cpm_micros: int, tie_seed: int,
             auction_type: AuctionType = AuctionType.SECOND_PRICE) -> RunFill:
    """One slot run, every tier: :func:`fill_direct`, then the GSP auction
    (:func:`~adfunnel.auction.gsp.run_auction`) among ``auction`` candidates whose campaign
    and advertiser no direct winner holds (the others: ``same_advertiser_on_page``), on
    the slots left, priced by the placement's ``auction_type``."""
    out = fill_direct(slot_ids, lines, tie_seed)
    taken_c = {w.candidate.campaign_id for w in out.wins}
    taken_a = {w.candidate.advertiser_id for w in out.wins}
    pool = [c for c in auction
            if c.campaign_id not in taken_c and c.advertiser_id not in taken_a]
    # an auction campaign shares no campaign with a direct line: only its advertiser
    out.rejections += [Rejection(c.ad_id, c.campaign_id, SAME_ADVERTISER) for c in auction
                       if c.campaign_id in taken_c or c.advertiser_id in taken_a]
    result = run_auction(pool, out.rest, reserve_cpm_micros, tie_seed=tie_seed,
                         auction_type=auction_type)
    for w in result.wins:
        out.tiers[w.slot_id] = AUCTION
    by_slot = {w.slot_id: w for w in [*out.wins, *result.wins]}
    out.wins = [by_slot[s] for s in slot_ids if s in by_slot]
    out.rejections += result.rejections
    out.rest = [s for s in out.rest if s not in out.tiers]
    return out


def guaranteed_rank(order: Sequence[int], line_ids: Collection[int]) -> dict[int, int]:
    """Position of each of ``line_ids`` in the allocation ``order`` (lines it lacks after
    it, by id)."""
    pos = {j: i for i, j in enumerate(order)}
    missing = sorted(j for j in line_ids if j not in pos)
    pos.update({j: len(order) + k for k, j in enumerate(missing)})
    return {j: pos[j] for j in line_ids}
