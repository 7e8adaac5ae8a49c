"""The reference decider's auction stage, one slot run at a time: creatives rotated
(:func:`rotate_creatives`), automatic bids shaded, sponsorships and guaranteed lines
placed ahead of the auction (:func:`direct_lines`, :mod:`adfunnel.serving.tiers`), the
auction on the rest, and with frequency caps the capped winners counted and the auction
run again without those refused.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from adfunnel.auction.gsp import Candidate, Rejection, run_auction
from adfunnel.campaigns.bidding_terms import is_automatic
from adfunnel.campaigns.model import Ad, AuctionType, Campaign, Priority
from adfunnel.frequency.windows import CapPlan
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.bid_shading import record_reference_run, shade_reference_run
from adfunnel.serving.caps import CapGate, add_counts
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.decision import (
    COUNTED_FIRST,
    MAX_CAP_ROUNDS,
    Decision,
    applied_reserve,
    place,
    slot_runs,
)
from adfunnel.serving.direct_book import GuaranteedSupply
from adfunnel.serving.request import SelectRequest
from adfunnel.serving.tiers import (
    AUCTION,
    KIND_GUARANTEED,
    KIND_OF,
    DirectLine,
    fill_run,
    guaranteed_rank,
)


class ReferenceAuction:
    """The auction stage of :class:`~adfunnel.serving.reference.ReferenceDecider` (a part
    of it: the decider holds the catalogue, the model and the state below)."""

    catalog: Catalog
    ctr: SmoothedCtr
    token_key: bytes
    token_ttl_s: int
    caps: CapGate | None
    supply: GuaranteedSupply
    shading: ShadingRelease | None

    def _auction_capped(self, req: SelectRequest,
                        candidates: list[tuple[Candidate, Ad, Campaign]], now: datetime,
                        decision: Decision, seed: int, plans: dict[int, CapPlan]) -> None:
        """The auction, then the capped winners counted (:meth:`CapGate.count`); a
        winner refused there loses its slot, and the auction runs again without it, up
        to ``MAX_CAP_ROUNDS`` times (then its slot stays empty). A winner counted in one
        round is not counted again."""
        gate = self.caps
        assert gate is not None and req.user.key
        held = len(decision.rejections)
        counted: set[int] = set()
        refused: list[Rejection] = []
        for round_ in range(MAX_CAP_ROUNDS):
            decision.placed = []
            del decision.rejections[held:]
            self._auction(req, candidates, now, decision, seed)
            todo = [p for p in decision.placed if p.ad.id in plans and p.ad.id not in counted]
            answers = gate.count(req.user.key, [plans[p.ad.id] for p in todo], now)
            lost = {p.ad.id for p, a in zip(todo, answers, strict=True) if a is not None}
            counted.update(p.ad.id for p, a in zip(todo, answers, strict=True) if a is None)
            decision.cap_counts = add_counts(decision.cap_counts, req.user.key, now,
                                           [(p.ad.id, plans[p.ad.id]) for p, a
                                            in zip(todo, answers, strict=True) if a is None])
            refused += [Rejection(p.ad.id, p.campaign.id, a, COUNTED_FIRST.get(a))
                        for p, a in zip(todo, answers, strict=True) if a is not None]
            if not lost:
                break
            decision.placed = [p for p in decision.placed if p.ad.id not in lost]
            if round_ + 1 < MAX_CAP_ROUNDS:
                candidates = [x for x in candidates if x[1].id not in lost]
        decision.rejections[held:held] = refused

    def _auction(
        self,
        req: SelectRequest,
        candidates: list[tuple[Candidate, Ad, Campaign]],
        now: datetime,
        decision: Decision,
        seed: int,
    ) -> None:
        candidates = rotate_creatives(candidates, self.ctr, req.placement.id)
        by_ad = {cand.ad_id: (ad, c) for cand, ad, c in candidates}
        auto = {c.id for _, _, c in candidates if is_automatic(c.bid_strategy)}
        placed_campaigns: set[int] = set()
        placed_advertisers: set[int] = set()
        direct = {c.id: KIND_OF[c.priority] for _, _, c in candidates
                  if c.priority is not Priority.AUCTION}
        rank = guaranteed_rank(self.supply.order(
            [cid for cid, k in direct.items() if k == KIND_GUARANTEED]), direct) if direct else {}
        for run in slot_runs(req.slots):
            shape = (run[0].format, run[0].width, run[0].height)
            pool = [
                cand for cand, ad, c in candidates
                if (ad.format, ad.width, ad.height) == shape
                and c.id not in placed_campaigns and c.advertiser_id not in placed_advertisers
            ]
            placement = self.catalog.placements.get(req.placement.id)
            reserve = applied_reserve(req, run[0], placement)
            pricing = placement.auction_type if placement else AuctionType.SECOND_PRICE
            came, pool = pool, shade_reference_run(pool, auto, self.shading, pricing,
                                                   req.placement.id, run[0], now, reserve,
                                                   decision.shading)
            if direct:  # sponsorships, guaranteed lines, then the auction on the rest
                lines = direct_lines(pool, direct, rank)
                fill = fill_run([s.id for s in run], lines,
                                [x for x in pool if x.campaign_id not in direct], reserve, seed,
                                pricing)
                wins, tiers, rejections = fill.wins, fill.tiers, fill.rejections
            else:
                result = run_auction(pool, [s.id for s in run], reserve, tie_seed=seed,
                                     auction_type=pricing)
                wins, tiers, rejections = result.wins, {}, result.rejections
            record_reference_run(
                decision.beats, decision.unshaded, wins,
                {w.slot_id for w in wins if tiers.get(w.slot_id, AUCTION) == AUCTION},
                [r for r in rejections if r.campaign_id not in direct], pool, came, reserve)
            for win in wins:
                ad, c = by_ad[win.candidate.ad_id]
                placed_campaigns.add(c.id)
                placed_advertisers.add(c.advertiser_id)
                decision.placed.append(place(win, ad, c, req.placement.id, now, self.token_key,
                                             self.token_ttl_s, tiers.get(win.slot_id, AUCTION)))
            decision.rejections.extend(rejections)


def direct_lines(pool: list[Candidate], kinds: dict[int, int],
                 rank: dict[int, int]) -> list[DirectLine]:
    """The direct lines among ``pool`` (campaign id -> tier code in ``kinds``), their
    candidates grouped per campaign in pool order; ``rank``: the guaranteed order."""
    by_campaign: dict[int, list[Candidate]] = {}
    for cand in pool:
        if cand.campaign_id in kinds:
            by_campaign.setdefault(cand.campaign_id, []).append(cand)
    return [DirectLine(kinds[cid], rank.get(cid, 0), cands)
            for cid, cands in by_campaign.items()]


def rotate_creatives(
    candidates: list[tuple[Candidate, Ad, Campaign]], ctr: SmoothedCtr, placement: str
) -> list[tuple[Candidate, Ad, Campaign]]:
    """A campaign's creatives of one size rotate evenly until the model tells them apart.

    Those the model cannot tell apart from the campaign's best
    (:meth:`SmoothedCtr.campaign_pctrs`) get one pooled pCTR, so their totals tie and
    the auction's uniform tie-break picks among them; quality still separates them.
    """
    groups: dict[tuple[int, str, int, int], list[int]] = {}
    for i, (cand, ad, _) in enumerate(candidates):
        groups.setdefault((cand.campaign_id, ad.format, ad.width, ad.height), []).append(i)
    out = list(candidates)
    for idx in groups.values():
        if len(idx) < 2:
            continue
        pctrs = ctr.campaign_pctrs([candidates[i][0].ad_id for i in idx], placement)
        for i, pctr in zip(idx, pctrs, strict=True):
            cand, ad, c = candidates[i]
            if cand.pctr != pctr:
                out[i] = (replace(cand, pctr=pctr), ad, c)
    return out
