"""The per-candidate reference path: retrieve → filter → score → auction → respond, one
candidate at a time (DESIGN.md §The funnel).

Production decides on :class:`~adfunnel.serving.decider.ColumnarDecider`, which composes
this path in for ``explain`` requests (every candidate's reason) and for ids beyond its
columns; the differential test holds the two to the same winners, prices and side effects.

The decider is synchronous and does no I/O: campaign state, budget state and pCTR
are all in memory. Every candidate that drops out carries a reason code, and the
absolute deadline is checked between stages: a decision that would be late returns
what it has (or nothing).
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime

from adfunnel.auction.draws import PACING_COIN, unit
from adfunnel.auction.gsp import Candidate, Rejection, run_auction
from adfunnel.bidding.strategy import auto_bid_micros
from adfunnel.budget.gate import PACED_OUT, SpendGate, bid_multiplier
from adfunnel.budget.multipliers import automatic
from adfunnel.campaigns.bidding_terms import is_automatic
from adfunnel.campaigns.model import (
    Ad,
    AdStatus,
    AuctionType,
    Campaign,
    CampaignStatus,
    Priority,
)
from adfunnel.campaigns.schedule import in_daypart, in_flight
from adfunnel.clock import Clock, monotonic_ms
from adfunnel.frequency.windows import CapPlan
from adfunnel.index.base import Retrieval
from adfunnel.index.shaped import ShapedIndex
from adfunnel.pacing.traffic_log import EligibleCounter
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.bid_shading import record_reference_run, shade_reference_run
from adfunnel.serving.blocks import request_blocks
from adfunnel.serving.caps import CAPPED, CapGate, add_counts
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.decision import (
    AD_PAUSED,
    BLOCKED,
    CAMPAIGN_COMPLETED,
    CAMPAIGN_ENDED,
    CAMPAIGN_PAUSED,
    COUNTED_FIRST,
    MAX_CAP_ROUNDS,
    NO_FITTING_SLOT,
    OUT_OF_FLIGHT,
    OUTSIDE_DAYPART,
    Decision,
    applied_reserve,
    commit_served,
    give_back_caps,
    place,
    placement_rejection,
    slot_runs,
)
from adfunnel.serving.direct_book import GuaranteedSupply
from adfunnel.serving.house import house_fills
from adfunnel.serving.request import SelectRequest, request_attributes
from adfunnel.serving.tiers import (
    AUCTION,
    GOAL_MET,
    KIND_AUCTION,
    KIND_GUARANTEED,
    KIND_OF,
    DirectLine,
    coin_reason,
    fill_run,
    gate_reason,
    guaranteed_rank,
    share_of,
)

#: How many candidates the filter stage processes between deadline checks.
_CHECK_EVERY = 256


class ReferenceDecider:
    """Makes ad decisions, one candidate at a time, from a :class:`Catalog`, a
    :class:`SpendGate` and a pCTR source.

    ``token_key`` signs tracking tokens; ``token_ttl_s`` is their lifetime in seconds;
    ``pcvr`` is the conversion probability used for CPA bids until a model exists.
    ``same_retrieval``: retrieve as the columnar path does (only the slots' shapes from
    a shape-partitioned index), for comparisons of the two paths. ``caps``: frequency
    caps (:mod:`adfunnel.serving.caps`); None: no campaign's caps are enforced.
    ``capped``: the counter of capped decisions to add to (one of its own when None).
    ``supply``: the guaranteed lines' eligible supply (their serving order; one of its
    own when None).

    Sponsorship and guaranteed lines are served ahead of the auction
    (:mod:`adfunnel.serving.tiers`: the rule both deciders call).
    """

    def __init__(
        self,
        catalog: Catalog,
        gate: SpendGate,
        ctr: SmoothedCtr,
        clock: Clock,
        token_key: bytes,
        *,
        token_ttl_s: int = 3600,
        pcvr: float = 0.01,
        retrieval_limit: int = 10_000,
        rng: random.Random | None = None,
        eligible: EligibleCounter | None = None,
        same_retrieval: bool = False,
        caps: CapGate | None = None,
        capped: EligibleCounter | None = None,
        supply: GuaranteedSupply | None = None,
    ) -> None:
        self.catalog = catalog
        self.gate = gate
        self.ctr = ctr
        self.clock = clock
        self.token_key = token_key
        self.token_ttl_s = token_ttl_s
        self.pcvr = pcvr
        self.retrieval_limit = retrieval_limit
        self.rng = rng or random.Random()
        self.eligible = eligible
        self.same_retrieval = same_retrieval
        self.caps = caps
        #: per campaign and UTC hour, the decisions whose frequency caps refused it (the
        #: dashboard's delivery status); never drained, read with ``peek``
        self.capped = capped if capped is not None else EligibleCounter()
        #: per decision, the guaranteed lines eligible (HWM's serving order)
        self.supply = supply if supply is not None else GuaranteedSupply()
        #: first-price shading's win curves (None: automatic bids are not shaded)
        self.shading: ShadingRelease | None = None

    def decide(self, req: SelectRequest, request_id: str, deadline_at_ms: float) -> Decision:
        """Decide ``req`` before ``deadline_at_ms`` (a :func:`monotonic_ms` instant).

        Pure with respect to spend: winners, prices and signed tokens, nothing recorded;
        the caller commits with :meth:`commit` only when the answer goes out in time.
        """
        # one seed per decision from the seeded source; every draw below is a function
        # of it and an id, so a replay reproduces whatever order candidates come in
        return self.decide_seeded(req, request_id, deadline_at_ms, self.rng.getrandbits(64))

    def decide_seeded(self, req: SelectRequest, request_id: str, deadline_at_ms: float,
                      seed: int) -> Decision:
        """:meth:`decide` with the decision's 64-bit seed given (drawn by the caller)."""
        now = self.clock.now()
        retrieval = self._retrieve_list(req)
        decision = Decision(request_id, [], [], retrieval.version, truncated=retrieval.truncated)
        if monotonic_ms() >= deadline_at_ms:
            decision.late = True
            return decision
        seen: list[int] = []  # the guaranteed lines eligible for this request
        candidates = self._filter(req, retrieval.ad_ids, now, decision, deadline_at_ms, seed,
                                  request_id, seen)
        self.supply.observe(seen)
        candidates, plans = self._screen_caps(req, candidates, now, decision)
        if plans:
            self._auction_capped(req, candidates, now, decision, seed, plans)
        else:
            self._auction(req, candidates, now, decision, seed)
        decision.house = house_fills(
            self.catalog.placements.get(req.placement.id), req.slots,
            {p.win.slot_id for p in decision.placed}, now, self.token_key, self.token_ttl_s,
        )
        return decision

    def _retrieve_list(self, req: SelectRequest) -> Retrieval:
        """Every shape's best ads (so explain names those that do not fit), or with
        ``same_retrieval`` the columnar path's: only the slots' shapes."""
        index = self.catalog.index
        attrs = request_attributes(req)
        if self.same_retrieval and isinstance(index, ShapedIndex):
            shapes = [(s.format, s.width, s.height) for s in req.slots]
            r = index.query_shapes(attrs, shapes, self.retrieval_limit)
            return Retrieval(r.ad_ids.tolist(), r.version, r.truncated)
        return index.query(attrs, self.retrieval_limit)

    def commit(self, decision: Decision) -> None:
        """Commit an answer that is being sent in time: its expected spend (budget gate).

        :meth:`decide` commits nothing, so a decision found late or shed costs nothing.
        This is the single place where everything owed to a sent answer is recorded:
        frequency-cap increments and the served-log record hook in here too.
        """
        commit_served(decision, self.gate)

    def abandon(self, decision: Decision, ad_ids: Collection[int] | None = None) -> None:
        """The answer to ``decision`` is not sent (found late after the decision): give
        back the frequency-cap counts it made, the one thing :meth:`decide` writes
        (DESIGN.md §The funnel: only answers sent in time commit spend, caps or logs).
        ``ad_ids``: only those winners are not sent (dropped from the answer after the
        decision, e.g. an OpenRTB bid under its floor): only their counts go back."""
        give_back_caps(decision, self.caps, ad_ids)

    def _filter(
        self,
        req: SelectRequest,
        ad_ids: list[int],
        now: datetime,
        decision: Decision,
        deadline_at_ms: float,
        seed: int,
        request_id: str = "",
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
                    verdicts[campaign.id] = self._campaign_verdict(campaign, now, seed,
                                                                   request_id, seen)
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

    def _campaign_verdict(self, c: Campaign, now: datetime, seed: int, request_id: str = "",
                          seen: list[int] | None = None) -> str | None:
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
        if self.eligible is not None:  # traffic it could reach: the pacing curve's shape
            self.eligible.add(c.id, now)
        kind = KIND_OF[c.priority]
        if kind == KIND_GUARANTEED and seen is not None:
            seen.append(c.id)
        reason = self.gate.admit(c, now, c.max_charge_micros)
        if reason is not None:
            return gate_reason(kind, reason)
        if kind != KIND_AUCTION:  # the tiers' own draw (share or pacing coin)
            return coin_reason(kind, c.id, seed, self.gate.pacing_rate(c.id), request_id,
                               share_of(c))
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
