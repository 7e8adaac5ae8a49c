"""The reference decider's filter stage, one candidate at a time: ad status, slot shape,
the placement's sizes and formats and the request's block lists per ad; then once per
campaign its status, flight, daypart, budget gate and pacing coin (or its tier's draw);
then the frequency caps in one read of the user's records. Every candidate that drops out
carries its reason code; the deadline is checked every :data:`_CHECK_EVERY` ads.
"""

from __future__ import annotations

from datetime import datetime

from adfunnel.auction.draws import PACING_COIN, unit
from adfunnel.auction.gsp import Candidate, Rejection
from adfunnel.bidding.strategy import auto_bid_micros
from adfunnel.budget.gate import PACED_OUT, SpendGate, bid_multiplier
from adfunnel.budget.multipliers import automatic
from adfunnel.campaigns.model import Ad, AdStatus, Campaign, CampaignStatus
from adfunnel.campaigns.schedule import in_daypart, in_flight
from adfunnel.clock import monotonic_ms
from adfunnel.frequency.windows import CapPlan
from adfunnel.pacing.traffic_log import EligibleCounter
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.blocks import request_blocks
from adfunnel.serving.caps import CAPPED, CapGate
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.decision import (
    AD_PAUSED,
    BLOCKED,
    CAMPAIGN_COMPLETED,
    CAMPAIGN_ENDED,
    CAMPAIGN_PAUSED,
    NO_FITTING_SLOT,
    OUT_OF_FLIGHT,
    OUTSIDE_DAYPART,
    Decision,
    placement_rejection,
)
from adfunnel.serving.request import ExchangeSelect, SelectRequest
from adfunnel.serving.tiers import (
    DIRECT_LINE,
    GOAL_MET,
    KIND_AUCTION,
    KIND_GUARANTEED,
    KIND_OF,
    coin_reason,
    gate_reason,
    share_of,
)

#: How many candidates the filter stage processes between deadline checks.
_CHECK_EVERY = 256


class ReferenceFilter:
    """The filter stage of :class:`~adfunnel.serving.reference.ReferenceDecider` (a part of
    it: the decider holds the catalogue, the gates and the counters below)."""

    catalog: Catalog
    gate: SpendGate
    ctr: SmoothedCtr
    pcvr: float
    eligible: EligibleCounter | None
    caps: CapGate | None
    capped: EligibleCounter

    def _filter(
        self,
        req: SelectRequest,
        ad_ids: list[int],
        now: datetime,
        decision: Decision,
        deadline_at_ms: float,
        seed: int,
        seen: list[int] | None = None,
    ) -> list[tuple[Candidate, Ad, Campaign]]:
        out: list[tuple[Candidate, Ad, Campaign]] = []
        verdicts: dict[int, str | None] = {}  # campaign id -> reason (None = eligible)
        sizes = {(s.format, s.width, s.height) for s in req.slots}
        cat = self.catalog
        placement = cat.placements.get(req.placement.id)
        blocks = request_blocks(req)  # None without block lists
        for i, ad_id in enumerate(ad_ids):
            if i % _CHECK_EVERY == _CHECK_EVERY - 1 and monotonic_ms() >= deadline_at_ms:
                decision.late = True
                break
            ad = cat.ads.get(ad_id)
            campaign = cat.campaigns.get(ad.campaign_id) if ad else None
            if ad is None or campaign is None:
                continue  # removed since the index version we read
            reason = AD_PAUSED if ad.status is not AdStatus.ACTIVE else None
            if reason is None and (ad.format, ad.width, ad.height) not in sizes:
                reason = NO_FITTING_SLOT
            if reason is None:
                reason = placement_rejection(placement, ad.format, ad.width, ad.height)
            detail = blocks.detail(ad) if reason is None and blocks is not None else None
            reason = BLOCKED if detail is not None else reason
            if reason is None:
                if campaign.id not in verdicts:
                    verdicts[campaign.id] = self._campaign_verdict(
                        campaign, now, seed, seen, exchange=isinstance(req, ExchangeSelect))
                reason = verdicts[campaign.id]
            if reason is not None:
                decision.rejections.append(Rejection(ad.id, campaign.id, reason, detail))
                continue
            out.append((self._candidate(ad, campaign, req.placement.id), ad, campaign))
        return out

    def _screen_caps(self, req: SelectRequest, candidates: list[tuple[Candidate, Ad, Campaign]],
                     now: datetime, decision: Decision,
                     ) -> tuple[list[tuple[Candidate, Ad, Campaign]], dict[int, CapPlan]]:
        """Candidates whose frequency caps let them serve (one read of the user's
        records); the others rejected with the cap's reason. Also the caps, by ad id, of
        the capped candidates kept (for :meth:`_auction_capped`)."""
        gate = self.caps
        if gate is None or not gate.book.any():
            return candidates, {}
        capped = [x for x in candidates if gate.book.capped(x[2])]
        if not capped:
            return candidates, {}
        screen = gate.screen(req.user.key, [(ad.id, c) for _, ad, c in capped], now)
        out: set[int] = set()
        for (_, ad, c), reason, detail in zip(capped, screen.reasons, screen.details,
                                              strict=True):
            if reason is not None:
                out.add(ad.id)
                decision.rejections.append(Rejection(ad.id, c.id, reason, detail))
        self.capped.add_many({c.id for (_, _, c), r in zip(capped, screen.reasons, strict=True)
                              if r == CAPPED}, now)
        return [x for x in candidates if x[1].id not in out], screen.plans

    def _campaign_verdict(self, c: Campaign, now: datetime, seed: int,
                          seen: list[int] | None = None, *,
                          exchange: bool = False) -> str | None:
        if c.status is CampaignStatus.PAUSED:
            return CAMPAIGN_PAUSED
        if c.status in (CampaignStatus.ENDED, CampaignStatus.ARCHIVED):
            return CAMPAIGN_ENDED
        if c.status is CampaignStatus.COMPLETED:
            # billing marks a line completed when its goal's (or flight's) money is
            # spent: for a direct line that is its goal met, as before the mark
            return GOAL_MET if KIND_OF[c.priority] != KIND_AUCTION else CAMPAIGN_COMPLETED
        if not in_flight(c, now):
            return OUT_OF_FLIGHT
        if not in_daypart(c.dayparts, now, c.time_zone):
            return OUTSIDE_DAYPART
        if exchange and KIND_OF[c.priority] != KIND_AUCTION:
            return DIRECT_LINE  # an exchange's request: no direct line, no supply
        if self.eligible is not None:  # traffic it could reach: the pacing curve's shape
            self.eligible.add(c.id, now)
        kind = KIND_OF[c.priority]
        if kind == KIND_GUARANTEED and seen is not None:
            seen.append(c.id)
        reason = self.gate.admit(c, now, c.max_charge_micros)
        if reason is not None:
            return gate_reason(kind, reason)
        if kind != KIND_AUCTION:  # the tiers' own draw (share or pacing coin)
            return coin_reason(kind, c.id, seed, self.gate.pacing_rate(c.id), share_of(c))
        if unit(seed, c.id, PACING_COIN) >= self.gate.pacing_rate(c.id):
            return PACED_OUT
        return None

    def _candidate(self, ad: Ad, c: Campaign, placement: str) -> Candidate:
        """The candidate of ``ad``: an automatic campaign bids ⌊v ÷ λ⌋ (``bid_micros``
        holds v; λ from the spend gate), a manual one its ``bid_micros``."""
        bid = (auto_bid_micros(c.bid_micros, bid_multiplier(self.gate, c.id)) if automatic(c)
               else c.bid_micros)
        return Candidate(
            ad.id, c.id, c.advertiser_id, c.bid_type, bid,
            self.ctr.pctr(ad.id, placement), self.pcvr, quality_micros=ad.quality_micros,
        )
