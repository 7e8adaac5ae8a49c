"""Step 5 of the columnar decision, fill: per slot run, the reference auction over the
decisive prefix of the pre-ranked candidates, the exploration slice, and the rounds that
refill the slots of winners refused at their frequency caps' count.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime

import numpy as np

from adfunnel.auction.draws import EXPLORE, TIE_BREAK, unit, unit_base
from adfunnel.auction.gsp import (
    OUTRANKED,
    SAME_ADVERTISER,
    AuctionResult,
    Candidate,
    Win,
    run_auction,
)
from adfunnel.budget.gate import NO_SLICE
from adfunnel.campaigns.model import AuctionType
from adfunnel.frequency.windows import CapPlan
from adfunnel.money import MILLE
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.serving.bid_shading import (
    record_run,
    run_beats,
    run_curve,
    shade_columns,
)
from adfunnel.serving.caps import CapGate, add_counts
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.columns import BID_TYPES, ColumnsView
from adfunnel.serving.decision import (
    CHANGED,
    MAX_CAP_ROUNDS,
    PRERANK_CUT,
    Decision,
    applied_reserve,
    place,
    slot_runs,
)
from adfunnel.serving.direct_book import GuaranteedSupply
from adfunnel.serving.kernels import decisive_prefix
from adfunnel.serving.request import SelectRequest, SlotIn
from adfunnel.serving.stages.filter import Versions, add_reason
from adfunnel.serving.stages.gating import (
    LAZY_ADMITTED,
    LAZY_PENDING,
    LAZY_REFUSED,
    MAX_SETTLE_ROUNDS,
)
from adfunnel.serving.stages.prerank import at_position
from adfunnel.serving.tiers import (
    AUCTION,
    KIND_AUCTION,
    KIND_GUARANTEED,
    DirectLine,
    RunFill,
    fill_direct,
    guaranteed_rank,
)


class FillStage:
    """The auction stage of :class:`~adfunnel.serving.decider.ColumnarDecider` (a part of
    it: the decider holds what is read below, and the gating stage's
    ``_settle_pending``, which asks the gate for pending campaigns that can win)."""

    catalog: Catalog
    caps: CapGate | None
    prerank_keep: int
    exploration_share: float
    token_key: bytes
    token_ttl_s: int
    supply: GuaranteedSupply
    shading: ShadingRelease | None

    def _auction_columns(self, req: SelectRequest, ids: np.ndarray, camp: np.ndarray,
                         s: dict[str, np.ndarray], versions: Versions, view: ColumnsView,
                         now: datetime, decision: Decision, seed: int) -> None:
        counts = decision.reason_counts
        assert counts is not None
        placement = self.catalog.placements.get(req.placement.id)
        pricing = placement.auction_type if placement else AuctionType.SECOND_PRICE
        in_page = np.zeros(len(ids), dtype=bool)  # campaign or advertiser placed already
        cols = self.catalog.columns
        kinds = self._kinds(camp)  # None: no direct line among the candidates
        base = s  # the bids as they came (after λ); each run shades its own copy
        for run in slot_runs(req.slots):
            s = base
            at_position(s, run[0].position)  # the model's pCTR at this run's position
            pool = (s["shape"] == cols.shape_code(run[0].format, run[0].width, run[0].height))
            pool &= ~in_page
            reserve = applied_reserve(req, run[0], placement)
            s = self._shade_run(req, run[0], base, camp, pricing, now, reserve)
            slot_ids = [x.id for x in run]
            direct: RunFill | None = None
            if kinds is not None:  # sponsorships and guaranteed lines first (tiers)
                direct = self._fill_direct(ids, camp, s, pool & (kinds != KIND_AUCTION),
                                           kinds, slot_ids, seed, counts)
                pool &= kinds == KIND_AUCTION
                for win in direct.wins:
                    in_page |= (camp == win.candidate.campaign_id) | (
                        s["advertiser"] == win.candidate.advertiser_id)
                add_reason(counts, SAME_ADVERTISER, int(np.count_nonzero(
                    pool & in_page & (s["lazy"] != LAZY_REFUSED))))
                pool &= ~in_page
                slot_ids = direct.rest
                run = [x for x in run if x.id in set(slot_ids)]
            lazy = s["lazy"]
            pool &= lazy != LAZY_REFUSED  # turned away by the gate in an earlier run
            eligible = pool & _above_reserve(s, reserve / MILLE)
            add_reason(counts, "below_reserve", int(pool.sum() - eligible.sum()))
            if not slot_ids:  # the direct lines took the run: the rest is outranked
                add_reason(counts, OUTRANKED, int(eligible.sum()))
                self._place(direct.wins if direct else [], direct, req, camp, s, versions,
                            in_page, now, decision)
                continue
            if decision.exploration and (lazy[eligible] == LAZY_PENDING).any():
                # an exploration pick may be any eligible candidate: every one answered
                self._settle_pending(np.flatnonzero(eligible), camp, s, view, now, seed, counts)
                eligible &= lazy != LAZY_REFUSED
            for round_ in itertools.count():
                result, prefix, kept = self._auction_prefix(
                    ids, camp, s, np.flatnonzero(eligible), slot_ids, reserve, seed, pricing)
                waiting = lazy[prefix] == LAZY_PENDING
                if not waiting.any():
                    break
                if round_ >= MAX_SETTLE_ROUNDS:  # answers keep changing: no slice for now
                    gone = np.isin(camp, camp[prefix[waiting]]) & (lazy == LAZY_PENDING)
                    add_reason(counts, NO_SLICE, int(np.count_nonzero(gone & eligible)))
                    lazy[gone] = LAZY_REFUSED
                else:
                    self._settle_pending(prefix, camp, s, view, now, seed, counts)
                eligible &= lazy != LAZY_REFUSED
            add_reason(counts, PRERANK_CUT, int(eligible.sum()) - kept)
            add_reason(counts, OUTRANKED, kept - len(prefix))  # ranked below the decisive prefix
            for reason, n in Counter(r.reason for r in result.rejections).items():
                add_reason(counts, reason, n)
            wins = result.wins
            if decision.exploration is not None:
                wins = self._explore(ids, camp, s, eligible, run, reserve, seed, wins,
                                     decision, pricing)
            self._record_run(decision, result, wins, ids, camp, s, base["bid"], reserve)
            self._place([*(direct.wins if direct else []), *wins], direct, req, camp, s,
                        versions, in_page, now, decision)

    def _shade_run(self, req: SelectRequest, slot: SlotIn, s: dict[str, np.ndarray],
                   camp: np.ndarray, pricing: AuctionType, now: datetime,
                   reserve: int) -> dict[str, np.ndarray]:
        """The run's scores with automatic candidates' bids shaded on a first-price
        placement (:mod:`adfunnel.serving.bid_shading`); ``s`` itself otherwise."""
        curve = run_curve(self.shading, pricing, req.placement.id, slot, now, None)
        if curve is None or not len(camp):
            return s
        auto = self.catalog.automatic.mask(camp)
        return shade_columns(s, auto, curve, reserve) if auto.any() else s

    def _record_run(self, decision: Decision, result: AuctionResult, wins: list[Win],
                    ids: np.ndarray, camp: np.ndarray, s: dict[str, np.ndarray],
                    bids: np.ndarray, reserve: int) -> None:
        """The price each auction winner of the run beat, and its unshaded bid."""
        if not result.wins:
            return
        def at(ad: int) -> int:  # a few look-ups per run: no index of every candidate
            return int(np.flatnonzero(ids == ad)[0])

        beats = run_beats(result.wins, result.rejections,
                          lambda ad: self._candidate_at(at(ad), ids, camp, s).total, reserve)
        record_run(decision.beats, decision.unshaded, result.wins, wins, beats,
                   lambda ad: int(bids[at(ad)]))

    def _place(self, wins: list[Win], direct: RunFill | None, req: SelectRequest,
               camp: np.ndarray, s: dict[str, np.ndarray], versions: Versions,
               in_page: np.ndarray, now: datetime, decision: Decision) -> None:
        """Place a run's winners (slot order), marking their campaigns and advertisers on
        the page; a winner edited while the decision read it is not served."""
        counts = decision.reason_counts
        assert counts is not None
        tiers = direct.tiers if direct else {}
        for win in wins:
            c = self.catalog.campaigns[win.candidate.campaign_id]
            ad = self.catalog.ads[win.candidate.ad_id]
            in_page |= (camp == c.id) | (s["advertiser"] == c.advertiser_id)
            if (ad.version, c.version) != versions.read(ad.id, c.id):
                # edited while this decision read its columns: not served on a
                # mix of two versions (the slot stays empty)
                add_reason(counts, CHANGED, 1)
                continue
            decision.placed.append(place(win, ad, c, req.placement.id, now, self.token_key,
                                         self.token_ttl_s, tiers.get(win.slot_id, AUCTION)))

    def _kinds(self, camp: np.ndarray) -> np.ndarray | None:
        """Each candidate's tier code, or None when none of them sells direct."""
        book = self.catalog.direct
        if not book.any():
            return None
        kinds, _ = book.kinds(camp)
        return kinds if (kinds != KIND_AUCTION).any() else None

    def _fill_direct(self, ids: np.ndarray, camp: np.ndarray, s: dict[str, np.ndarray],
                     at: np.ndarray, kinds: np.ndarray, slot_ids: list[str], seed: int,
                     counts: dict[str, int]) -> RunFill:
        """:func:`~adfunnel.serving.tiers.fill_direct` over the direct candidates ``at``
        (a mask), guaranteed lines in the supply's order; their rejections counted."""
        by_campaign: dict[int, list[Candidate]] = {}
        kind_of: dict[int, int] = {}
        for i in np.flatnonzero(at & (s["lazy"] == LAZY_ADMITTED)).tolist():  # never pending
            cand = self._candidate_at(i, ids, camp, s)
            by_campaign.setdefault(cand.campaign_id, []).append(cand)
            kind_of[cand.campaign_id] = int(kinds[i])
        if not by_campaign:
            return RunFill(rest=list(slot_ids))
        rank = guaranteed_rank(self.supply.order(
            [c for c, k in kind_of.items() if k == KIND_GUARANTEED]), kind_of)
        fill = fill_direct(slot_ids, [DirectLine(kind_of[c], rank[c], cands)
                                      for c, cands in by_campaign.items()], seed)
        for reason, n in Counter(r.reason for r in fill.rejections).items():
            add_reason(counts, reason, n)
        return fill

    def _explore(self, ids: np.ndarray, camp: np.ndarray, s: dict[str, np.ndarray],
                 eligible: np.ndarray, run: list[SlotIn], reserve: int, seed: int,
                 greedy: list[Win], decision: Decision,
                 pricing: AuctionType = AuctionType.SECOND_PRICE) -> list[Win]:
        """The slot run's winners with exploration configured, and their propensities.

        Slot by slot, the exploration pick is uniform among the eligible candidates
        (above the reserve, budget, pacing and caps passed) whose campaign and
        advertiser have no ad on the page yet; it pays what a lone bidder pays (second
        price: the reserve; first price: its bid), so never above its bid nor below the
        reserve. The
        propensity of what a slot shows is (1 − ε)·[the auction's winner] + ε / n, n
        the candidates it was picked among (given the slots before it).
        """
        share = self.exploration_share
        by_slot = {w.slot_id: w for w in greedy}
        open_ = eligible.copy()
        out: list[Win] = []
        for k, slot in enumerate(run):
            pool = np.flatnonzero(open_)
            if not len(pool):
                break
            greedy_win = by_slot.get(slot.id)
            if decision.exploration:
                i = int(pool[int(unit(seed, k + 1, EXPLORE) * len(pool))])
                single = run_auction([self._candidate_at(i, ids, camp, s)], [slot.id],
                                     reserve, tie_seed=seed, auction_type=pricing)
                if not single.wins:
                    continue
                win = single.wins[0]
            elif greedy_win is None:
                continue
            else:
                win = greedy_win
            chosen = win.candidate
            shown_by_auction = (greedy_win is not None
                                and greedy_win.candidate.ad_id == chosen.ad_id)
            decision.propensities[slot.id] = (1 - share) * shown_by_auction + share / len(pool)
            out.append(win)
            open_ &= (camp != chosen.campaign_id) & (s["advertiser"] != chosen.advertiser_id)
        return out

    def _auction_prefix(self, ids: np.ndarray, camp: np.ndarray, s: dict[str, np.ndarray],
                        eligible: np.ndarray, slot_ids: list[str], reserve: int,
                        seed: int, pricing: AuctionType = AuctionType.SECOND_PRICE,
                        ) -> tuple[AuctionResult, np.ndarray, int]:
        """The reference auction over the shortest prefix of the ranking that decides it.

        Pre-rank keeps the best ``prerank_keep`` of ``eligible`` (ties at the cut kept);
        they are ranked as the auction ranks (total, then the tie key) and walked with
        its one-per-campaign and one-per-advertiser rule until one ranked candidate
        beyond the slots is found (it sets the last winner's price). Returns the result
        over that prefix, the prefix (candidate indices) and the number kept by pre-rank; widens
        the pre-rank cut when the kept ones run out first.
        """
        prefix, kept = decisive_prefix(eligible, s["total"], ids, camp, s["advertiser"],
                                       self.prerank_keep, len(slot_ids) + 1,
                                       unit_base(seed, TIE_BREAK))
        cands = [self._candidate_at(i, ids, camp, s) for i in prefix.tolist()]
        return (run_auction(cands, slot_ids, reserve, tie_seed=seed, auction_type=pricing),
                prefix, kept)

    def _candidate_at(self, i: int, ids: np.ndarray, camp: np.ndarray,
                      s: dict[str, np.ndarray]) -> Candidate:
        return Candidate(
            int(ids[i]), int(camp[i]), int(s["advertiser"][i]), BID_TYPES[s["bid_type"][i]],
            int(s["bid"][i]), float(s["pctr"][i]), float(s["pcvr"][i]),
            quality_micros=int(s["quality"][i]),
        )

    def _auction_columns_capped(self, req: SelectRequest, ids: np.ndarray, camp: np.ndarray,
                                s: dict[str, np.ndarray], versions: Versions,
                                view: ColumnsView, now: datetime, decision: Decision, seed: int,
                                plans: dict[int, CapPlan]) -> None:
        """The reference path's capped auction
        (:meth:`~adfunnel.serving.reference_auction.ReferenceAuction._auction_capped`) on the
        arrays: winners refused at count leave the arrays and the auction runs again
        (reason counts of the last round)."""
        gate = self.caps
        assert gate is not None and req.user.key and decision.reason_counts is not None
        before = dict(decision.reason_counts)
        counted: set[int] = set()
        refused: dict[str, int] = {}
        for round_ in range(MAX_CAP_ROUNDS):
            decision.placed = []
            decision.reason_counts = dict(before)
            self._auction_columns(req, ids, camp, s, versions, view, now, decision, seed)
            todo = [p for p in decision.placed if p.ad.id in plans and p.ad.id not in counted]
            answers = gate.count(req.user.key, [plans[p.ad.id] for p in todo], now)
            lost = {p.ad.id for p, a in zip(todo, answers, strict=True) if a is not None}
            for p, a in zip(todo, answers, strict=True):
                if a is None:
                    counted.add(p.ad.id)
                else:
                    refused[a] = refused.get(a, 0) + 1
            decision.cap_counts = add_counts(decision.cap_counts, req.user.key, now,
                                           [(p.ad.id, plans[p.ad.id]) for p, a
                                            in zip(todo, answers, strict=True) if a is None])
            if not lost:
                break
            decision.placed = [p for p in decision.placed if p.ad.id not in lost]
            if round_ + 1 < MAX_CAP_ROUNDS:
                keep = ~np.isin(ids, np.array(sorted(lost), dtype=np.int64))
                ids, camp = ids[keep], camp[keep]
                s = {k: v[keep] for k, v in s.items()}
        for reason, n in refused.items():
            add_reason(decision.reason_counts, reason, n)


def _above_reserve(s: dict[str, np.ndarray], reserve_imp: float) -> np.ndarray:
    """:func:`~adfunnel.auction.gsp.run_auction`'s reserve test, vectorised: action rate
    > 0, bid ≥ reserve in the bid's unit, total ≥ reserve per impression."""
    rate = s["rate"]
    positive = rate > 0
    in_unit = np.full(len(rate), np.inf)
    np.divide(reserve_imp, rate, out=in_unit, where=positive)
    return positive & (s["bid"] >= in_unit) & (s["total"] >= reserve_imp)
