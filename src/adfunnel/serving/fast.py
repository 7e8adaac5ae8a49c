"""The columnar decision: the funnel's filter, budget gate, pacing coin, pre-rank and
auction over numpy arrays (DESIGN.md §The funnel; issue "The decision at catalogue scale").

:class:`ColumnarDecider` gives the same winners, prices and side effects as the
per-candidate reference path (:class:`~adfunnel.serving.funnel.Decider`) for the same
seed and state — a differential test holds it to that — at a cost that follows the
candidates that can still win:

1. **Filter** — boolean masks over the retrieved ads' columns
   (:mod:`adfunnel.serving.columns`): ad status, slot shape, the placement's allowed
   sizes and formats; then, once per distinct campaign in first-retrieved order,
   status, flight and daypart (local dates and hours per time zone, not per ad).
2. **Budget gate** — a :class:`~adfunnel.budget.gate.BulkGate` answers admit / refuse
   for most campaigns in one call; only the rest are asked one by one
   (:meth:`SpendGate.admit`), in the reference order, re-reading the bulk answers
   after an ask that changed the gate's state (its ``generation``).
3. **Pacing coin** — one compiled pass (:func:`adfunnel.serving.kernels.paced_out`).
4. **Pre-rank** — total value per impression (bid × action rate + quality, with the
   smoothed pCTR and creative rotation) is one vectorised expression; per slot run,
   the best ``prerank_keep`` candidates above the reserve (ties at the cut kept) are
   ranked as the auction ranks them (total, then the tie key: ``argpartition`` and
   ``lexsort``) and walked with the one-per-campaign and one-per-advertiser rule to
   the first ranked candidate beyond the slots. Only that decisive prefix becomes
   :class:`~adfunnel.auction.gsp.Candidate` objects for the reference auction. With
   exact scores the cut never changes a winner or a price (the prefix is the full
   ranking's; the cut widens when it runs out first).
5. Only winners become tokens.

Rejections are data without the cost: an ``explain`` request goes through the
reference path and keeps every candidate's reason; any other decision counts reasons
per code (``Decision.reason_counts``, a ``bincount``). The auction's own reasons are
exact for the decisive prefix; candidates ranked below it count as ``outranked``
(whether or not one-per-page would also have turned them away), and those beyond the
pre-rank cut as ``prerank_cut``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from adfunnel.auction.draws import EXPLORE, PACING_COIN, RECALL, TIE_BREAK, unit, unit_base
from adfunnel.auction.gsp import OUTRANKED, AuctionResult, Candidate, Win, run_auction
from adfunnel.budget.gate import ASK, BUDGET_EXHAUSTED, NO_SLICE, PACED_OUT, REFUSE, BulkGate
from adfunnel.campaigns.model import Placement
from adfunnel.clock import monotonic_ms
from adfunnel.frequency.windows import CapPlan
from adfunnel.index.base import ArrayRetrieval, query_array
from adfunnel.index.shaped import ShapedIndex
from adfunnel.money import MILLE
from adfunnel.prediction.scorer import PCVR, ModelScorer
from adfunnel.serving.caps import CAPPED, add_counts
from adfunnel.serving.columns import BID_TYPES, MAX_DENSE_ID, ColumnsView
from adfunnel.serving.funnel import (
    AD_PAUSED,
    CAMPAIGN_COMPLETED,
    CAMPAIGN_ENDED,
    CAMPAIGN_PAUSED,
    FORMAT_NOT_ALLOWED,
    MAX_CAP_ROUNDS,
    NO_FITTING_SLOT,
    OUT_OF_FLIGHT,
    OUTSIDE_DAYPART,
    SIZE_NOT_ALLOWED,
    Decider,
    Decision,
    _reserve,
    _slot_runs,
)
from adfunnel.serving.house import house_fills
from adfunnel.serving.kernels import (
    campaign_checks,
    candidate_fields,
    decisive_prefix,
    gate_inputs,
    mask_ads,
    paced_out,
    totals,
)
from adfunnel.serving.request import SelectRequest, SlotIn, request_attributes

#: Candidates kept by pre-rank per slot run (more when ties or one-per-page need them).
PRERANK_KEEP = 200
#: Most ads of the slots' shapes retrieved per request from a shape-partitioned index.
#: Retrieval of every shape with the design's K = 10,000 handed over about 2,600 that
#: fit (``real`` workload); each kept candidate still has to pass status, schedule,
#: budget and pacing before pre-rank keeps 200.
CANDIDATE_LIMIT = 2_500
#: Ads retrieved first; the rest of ``CANDIDATE_LIMIT`` only when fewer than
#: ``prerank_keep`` of them can serve (ad and campaign status, shape, flight,
#: daypart). Retrieval runs best static score first — for CPM ads the total itself —
#: so the candidates past these rarely reach the auction's decisive prefix, and
#: every stage after retrieval costs per candidate.
FIRST_LIMIT = 800  # settings.first_candidates
#: Reason carried (in counts) by eligible candidates beyond the pre-rank cut.
PRERANK_CUT = "prerank_cut"
#: Reason of a winner whose ad or campaign was edited while the decision read it.
CHANGED = "changed_during_decision"
#: A candidate's budget answer (``s["lazy"]``): admitted, pending (its campaign is
#: asked when it reaches the decisive prefix) or refused after the ask.
LAZY_ADMITTED, LAZY_PENDING, LAZY_REFUSED = 0, 1, 2
#: Ask rounds per slot run before pending campaigns still in the prefix go without.
MAX_SETTLE_ROUNDS = 8
_NO_IDS = np.zeros(0, dtype=np.int64)

# reason codes of the masks: index into REASONS (0 = still a candidate)
REASONS: tuple[str | None, ...] = (
    None, AD_PAUSED, NO_FITTING_SLOT, SIZE_NOT_ALLOWED, FORMAT_NOT_ALLOWED,
    CAMPAIGN_PAUSED, CAMPAIGN_ENDED, CAMPAIGN_COMPLETED, OUT_OF_FLIGHT, OUTSIDE_DAYPART,
    PACED_OUT, BUDGET_EXHAUSTED,
)
_CODE = {r: i for i, r in enumerate(REASONS) if r is not None}
#: c_status value (columns.STATUS_CODES) -> reason code
_STATUS_REASON = np.array([0, _CODE[CAMPAIGN_PAUSED], _CODE[CAMPAIGN_ENDED],
                           _CODE[CAMPAIGN_COMPLETED]], dtype=np.int8)
#: Key prefix of the model's pCTR column at one slot position, in a decision's scores.
AT_POSITION = "pctr@"
#: The stages timed when ``ColumnarDecider.timings`` is a list.
STAGES = ("retrieve", "filter", "gate", "prerank", "predict", "auction")


class ColumnarDecider(Decider):
    """:class:`Decider` whose decisions run over the catalogue's columns (module doc).

    ``prerank_keep``: candidates kept per slot run for the auction (≥ 1);
    ``candidate_limit``: most ads retrieved from a shape-partitioned index (the
    reference path's ``retrieval_limit`` counts every shape), ``first_limit`` those
    retrieved first (:data:`FIRST_LIMIT`). When ``timings`` is a list, each decision
    appends its stage durations (µs, by :data:`STAGES`) and its ``candidates``
    retrieved: for benchmarks.
    """

    def __init__(self, *args: object, prerank_keep: int = PRERANK_KEEP,
                 candidate_limit: int = CANDIDATE_LIMIT, first_limit: int = FIRST_LIMIT,
                 **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if min(prerank_keep, candidate_limit, first_limit) < 1:
            raise ValueError("prerank_keep, candidate_limit and first_limit must be at least 1")
        self.prerank_keep = prerank_keep
        self.candidate_limit = candidate_limit
        self.first_limit = first_limit
        self.timings: list[dict[str, float]] | None = None
        #: the predict stage (None: the prior's pCTR decides)
        self.scorer: ModelScorer | None = None
        #: share of decisions in the exploration slice, while a model decides (a
        #: uniform pick among the eligible candidates above the reserve, per slot)
        self.exploration_share = 0.0
        self._placement_reasons: dict[str, tuple[int, int, np.ndarray]] = {}
        self._distinct = _Scratch()

    def decide(self, req: SelectRequest, request_id: str, deadline_at_ms: float) -> Decision:
        if req.explain:  # every candidate's reason: the reference path
            return super().decide(req, request_id, deadline_at_ms)
        clock = _StageClock(self.timings is not None)
        now = self.clock.now()
        seed = self.rng.getrandbits(64)
        limit = min(self.first_limit, self.candidate_limit)
        while True:
            retrieval = self._retrieve(req, limit)
            clock.lap("retrieve")
            view = self.catalog.columns.view()  # after retrieval: it holds every id found
            counts: dict[str, int] = {}
            servable = self._servable(req, retrieval.ad_ids, view, now, counts)
            if servable is None:
                # an id the columns do not hold (beyond the dense range, or written
                # after this view): the reference path decides, from the same draw
                return super().decide_seeded(req, request_id, deadline_at_ms, seed)
            if (limit >= self.candidate_limit or not retrieval.truncated
                    or servable.live_candidates >= self.prerank_keep):
                break
            # too few of the best ads can serve: pre-rank needs more of the ranking
            limit = self.candidate_limit
        clock.lap("filter")
        decision = Decision(request_id, [], [], retrieval.version, truncated=retrieval.truncated,
                            reason_counts=counts)
        if monotonic_ms() >= deadline_at_ms:
            decision.late = True
            return decision
        ids, camp, versions = servable.ids, servable.camp, servable.versions
        extra: list[str] = []  # the gate's own reasons, coded after REASONS
        verdict, pending = self._campaign_gate(servable, now, seed, extra)
        clock.lap("gate")
        _count(counts, verdict, extra)
        keep = verdict == 0
        ids, camp, pending = ids[keep], camp[keep], pending[keep]
        if monotonic_ms() >= deadline_at_ms:
            decision.late = True
            return decision
        ids, camp, pending, plans = self._screen_caps_columns(req, ids, camp, pending, view,
                                                              now, decision)
        scores = self._scores(ids, camp, view, req.placement.id)
        scores["lazy"] = pending.view(np.int8)  # LAZY_PENDING = 1, LAZY_ADMITTED = 0
        clock.lap("prerank")
        scorer = self.scorer
        if scorer is not None and len(ids):
            self._predict(scorer, req, ids, camp, scores, now, deadline_at_ms, decision, seed)
        clock.lap("predict")
        if self.scorer is not None and self.exploration_share > 0 and not plans:
            decision.exploration = unit(seed, 0, EXPLORE) < self.exploration_share
        if plans:
            self._auction_columns_capped(req, ids, camp, scores, versions, view, now,
                                         decision, seed, plans)
        else:
            self._auction_columns(req, ids, camp, scores, versions, view, now, decision, seed)
        decision.house = house_fills(
            self.catalog.placements.get(req.placement.id), req.slots,
            {p.win.slot_id for p in decision.placed}, now, self.token_key, self.token_ttl_s,
        )
        clock.lap("auction")
        if self.timings is not None:
            clock.laps["candidates"] = float(len(retrieval.ad_ids))
            self.timings.append(clock.laps)
        return decision

    def commit(self, decision: Decision) -> None:
        """:meth:`Decider.commit`, and the model's winners to its calibration monitor."""
        super().commit(decision)
        scorer = self.scorer
        if (scorer is not None and scorer.monitor is not None and not decision.fallback
                and decision.model_version == scorer.version):
            for p in decision.placed:
                scorer.monitor.served(p.served.impression_id, scorer.version,
                                      float(p.win.candidate.pctr))

    def _retrieve(self, req: SelectRequest, limit: int | None = None) -> ArrayRetrieval:
        """The best ``limit`` (default ``candidate_limit``) ads for the request: of the
        slots' shapes only, where the index is partitioned by shape (the others could
        not fill a slot)."""
        index = self.catalog.index
        attrs = request_attributes(req)
        if isinstance(index, ShapedIndex):
            shapes = [(s.format, s.width, s.height) for s in req.slots]
            return index.query_shapes(attrs, shapes, limit or self.candidate_limit)
        return query_array(index, attrs, self.retrieval_limit)

    def _servable(self, req: SelectRequest, ids: np.ndarray, view: ColumnsView,
                  now: datetime, counts: dict[str, int]) -> _Servable | None:
        """Steps 1-2 without side effects: the ads that fit and their campaigns' status,
        flight and daypart (counted into ``counts``); None when an id is beyond the
        columns (:meth:`_mask_ads`)."""
        masked = None
        if not len(ids) or int(ids.max()) < len(view.ads):
            masked = self._mask_ads(req, ids, view, counts)
        if masked is None:
            return None
        ids, camp, versions = masked
        ordinals, hours = self.catalog.columns.zones.at(now)
        uc, inverse, c_version, verdict, local, charges, budgets = campaign_checks(
            camp, self._distinct.scratch(len(view.campaigns)), view.campaigns, view.dayparts,
            ordinals, hours, _STATUS_REASON, _CODE[OUT_OF_FLIGHT], _CODE[OUTSIDE_DAYPART])
        versions.campaigns(uc, c_version)  # read before the other fields (ColumnsView)
        return _Servable(ids, camp, versions, uc, inverse, verdict, local, charges, budgets)

    # ---- 1. masks over ads ---------------------------------------------------------
    def _mask_ads(self, req: SelectRequest, ids: np.ndarray, view: ColumnsView,
                  counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray, _Versions] | None:
        """(ad ids still in, their campaign ids, the versions read), in retrieval order;
        the others are counted per reason into ``counts``. None: an ad's campaign id is
        beyond the columns' dense range (the reference path decides).

        Ads or campaigns the catalogue no longer holds are dropped without a reason,
        as the reference path drops them."""
        placement = self.catalog.placements.get(req.placement.id)
        tally = np.zeros(len(REASONS), dtype=np.int64)
        keep, camp, ad_version, big = mask_ads(ids, view.ads, view.campaigns,
                                               self._shape_reasons(req, placement), tally,
                                               MAX_DENSE_ID)
        if big:
            return None
        for code in np.flatnonzero(tally).tolist():
            _add(counts, REASONS[code] or "", int(tally[code]))
        return keep, camp, _Versions(keep, ad_version)

    def _shape_reasons(self, req: SelectRequest, placement: Placement | None) -> np.ndarray:
        """Reason code per shape code for this request (int8; 0: a slot takes the shape
        and the placement allows it)."""
        cols = self.catalog.columns
        table = np.full(max(len(cols.shape_list), 1), _CODE[NO_FITTING_SLOT], dtype=np.int8)
        for s in req.slots:
            code = cols.shape_code(s.format, s.width, s.height)
            if code >= 0:
                table[code] = 0
        if placement is not None:
            rules = self._placement_table(placement)
            fits = table == 0
            table[fits] = rules[: len(table)][fits]
        return table

    def _placement_table(self, p: Placement) -> np.ndarray:
        """Reason code per shape code for placement ``p`` (0: allowed)."""
        shapes = self.catalog.columns.shape_list
        held = self._placement_reasons.get(p.id)
        if held is not None and held[0] == p.version and held[1] == len(shapes):
            return held[2]
        table = np.zeros(max(len(shapes), 1), dtype=np.int8)
        for code, (fmt, w, h) in enumerate(list(shapes)):
            if not p.size_allowed(w, h):
                table[code] = _CODE[SIZE_NOT_ALLOWED]
            elif not p.format_allowed(fmt):
                table[code] = _CODE[FORMAT_NOT_ALLOWED]
        self._placement_reasons[p.id] = (p.version, len(shapes), table)
        return table

    # ---- 2-3. once per campaign -------------------------------------------------------
    def _campaign_gate(self, sv: _Servable, now: datetime, seed: int, extra: list[str]
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The budget gate and pacing coin for the campaigns :meth:`_servable` left in,
        in first-retrieved order: each candidate's reason code (0 = in; status, flight
        and daypart codes kept), and whether its campaign's budget answer waits until
        it can win (:meth:`_gate`). The campaigns in count as eligible traffic."""
        verdict = sv.verdict.copy()
        pending = np.zeros(len(sv.uc), dtype=bool)
        if not len(sv.uc):
            return verdict[sv.inverse], pending[sv.inverse]
        live = np.flatnonzero(verdict == 0)
        if self.eligible is not None and len(live):  # the pacing curve's traffic
            self.eligible.add_many(sv.uc[live], now)
        verdict[live], pending[live] = self._gate(sv.uc[live], sv.local[live],
                                                  sv.charges[live], sv.budgets[live], now,
                                                  seed, extra)
        return verdict[sv.inverse], pending[sv.inverse]

    def _gate(self, cids: np.ndarray, days: np.ndarray, charges: np.ndarray,
              budgets: np.ndarray, now: datetime, seed: int, extra: list[str]
              ) -> tuple[np.ndarray, np.ndarray]:
        """Reason code per campaign (0 = admitted and in by the pacing coin), and
        whether it is left pending. A reason of the gate's own that :data:`REASONS` lacks
        (e.g. ``no_slice``) gets a code past them, its name at that index of ``extra``.

        A gate whose asks share one round (``asks_together``: the embedded service on
        the system clock) is asked lazily: a campaign it cannot answer in bulk (metered,
        no slice) stays in as *pending*, and is asked only when it reaches the auction's
        decisive prefix (:meth:`_settle_pending`). At catalogue scale a decision meets
        thousands of such campaigns, of which a handful can win; asking for all of
        them granted tens of thousands of slices nobody used, and re-granted them as
        they expired. Other gates are asked here, in the reference path's order."""
        n = len(cids)
        out = np.zeros(n, dtype=np.int8)
        pending = np.zeros(n, dtype=bool)
        if not n:
            return out, pending
        gate = self.gate
        bulk = _is_bulk(gate)
        t = now.timestamp()
        if bulk:
            codes = gate.bulk_admit(cids, days, charges, budgets, t)
            p = gate.bulk_pacing(cids)
            gen = gate.generation
        else:
            codes = np.full(n, ASK, dtype=np.int8)
            p = np.ones(n)
            gen = 0
        out[codes == REFUSE] = _CODE[BUDGET_EXHAUSTED]
        asks = np.flatnonzero(codes == ASK)
        if len(asks) and getattr(gate, "asks_together", False):
            pending[asks] = True  # asked when they can win; no pacing coin before
            asks = asks[:0]
        while len(asks):
            k = int(asks[0])
            reason = gate.admit(self.catalog.campaigns[int(cids[k])], now, int(charges[k]))
            if reason is not None:
                out[k] = _code_of(reason, extra)
            if bulk and gate.generation != gen:
                # the ask changed the gate (an in-process reply): later campaigns, and
                # this one's p, are read anew, as the reference path reads them
                gen = gate.generation
                codes[k + 1:] = gate.bulk_admit(cids[k + 1:], days[k + 1:], charges[k + 1:],
                                                budgets[k + 1:], t)
                out[k + 1:] = np.where(codes[k + 1:] == REFUSE, _CODE[BUDGET_EXHAUSTED], 0)
                p[k:] = gate.bulk_pacing(cids[k:])
            elif not bulk and reason is None:
                p[k] = gate.pacing_rate(int(cids[k]))
            rest = np.flatnonzero(codes[k + 1:] == ASK)
            asks = rest + k + 1
        admitted = np.flatnonzero(out == 0)
        if pending.any():
            admitted = admitted[~pending[admitted]]
        paced = paced_out(unit_base(seed, PACING_COIN), cids[admitted], p[admitted])
        out[admitted[paced]] = _CODE[PACED_OUT]
        return out, pending

    def _settle_pending(self, at: np.ndarray, camp: np.ndarray, s: dict[str, np.ndarray],
                        view: ColumnsView, now: datetime, seed: int,
                        counts: dict[str, int]) -> None:
        """Ask the gate in one round (``ask_many``) for the pending campaigns among the
        candidates ``at``; those admitted take the pacing coin with the p read after the
        round. The round may change other campaigns' states too, so the other campaigns
        of ``at`` are read again from the bulk view: refused ones leave, and one that
        lost its slice meanwhile is pending again. ``s["lazy"]`` is updated in place
        (:data:`LAZY_PENDING` and the others); candidates turned away are counted by reason."""
        gate = self.gate
        lazy = s["lazy"]
        asked = np.unique(camp[at[lazy[at] == LAZY_PENDING]])
        others = np.setdiff1d(camp[at[lazy[at] == LAZY_ADMITTED]], asked, assume_unique=False)
        reasons = gate.ask_many(  # type: ignore[attr-defined]
            [self.catalog.campaigns[int(c)] for c in asked.tolist()], now,
            view.c_charge[asked].tolist())
        out: dict[int, str] = {c: r for c, r in zip(asked.tolist(), reasons, strict=True)
                               if r is not None}
        admitted = np.array([c for c in asked.tolist() if c not in out], dtype=np.int64)
        if len(admitted):
            paced = paced_out(unit_base(seed, PACING_COIN), admitted,
                              gate.bulk_pacing(admitted))  # type: ignore[attr-defined]
            out.update(dict.fromkeys(admitted[paced].tolist(), PACED_OUT))
        again = _NO_IDS
        if len(others):
            ordinals, _ = self.catalog.columns.zones.at(now)
            charges, budgets = gate_inputs(others, view.campaigns)
            codes = gate.bulk_admit(  # type: ignore[attr-defined]
                others, ordinals[view.c_zone[others]], charges, budgets, now.timestamp())
            out.update(dict.fromkeys(others[codes == REFUSE].tolist(), BUDGET_EXHAUSTED))
            again = others[codes == ASK]
        lazy[np.isin(camp, asked) & (lazy == LAZY_PENDING)] = LAZY_ADMITTED
        if len(again):
            lazy[np.isin(camp, again) & (lazy == LAZY_ADMITTED)] = LAZY_PENDING
        for c, r in out.items():
            gone = (camp == c) & (lazy != LAZY_REFUSED)
            _add(counts, r, int(np.count_nonzero(gone)))
            lazy[gone] = LAZY_REFUSED

    # ---- 3b. frequency caps (serving/caps.py) --------------------------------------------
    def _screen_caps_columns(self, req: SelectRequest, ids: np.ndarray, camp: np.ndarray,
                             pending: np.ndarray, view: ColumnsView, now: datetime,
                             decision: Decision,
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, CapPlan]]:
        """:meth:`Decider._screen_caps` on the arrays: the candidates with caps screened
        with one read, the others untouched; reasons counted. ``pending`` (a flag per
        candidate) is filtered with them."""
        gate = self.caps
        if gate is None or not gate.book.any() or not len(ids):
            return ids, camp, pending, {}
        at = np.flatnonzero(gate.book.capped_mask(camp, view.c_advertiser[camp]))
        if not len(at):
            return ids, camp, pending, {}
        campaigns, counts = self.catalog.campaigns, decision.reason_counts
        assert counts is not None
        screen = gate.screen(req.user.key, [(int(ids[i]), campaigns[int(camp[i])])
                                            for i in at.tolist()], now)
        out = [i for i, r in zip(at.tolist(), screen.reasons, strict=True) if r is not None]
        for r in screen.reasons:
            if r is not None:
                _add(counts, r, 1)
        self.capped.add_many({campaigns[int(camp[i])].id
                              for i, r in zip(at.tolist(), screen.reasons, strict=True)
                              if r == CAPPED}, now)
        if not out:
            return ids, camp, pending, screen.plans
        keep = np.ones(len(ids), dtype=bool)
        keep[out] = False
        return ids[keep], camp[keep], pending[keep], screen.plans

    def _auction_columns_capped(self, req: SelectRequest, ids: np.ndarray, camp: np.ndarray,
                                s: dict[str, np.ndarray], versions: _Versions,
                                view: ColumnsView, now: datetime, decision: Decision, seed: int,
                                plans: dict[int, CapPlan]) -> None:
        """:meth:`Decider._auction_capped` on the arrays: winners refused at count leave
        the arrays and the auction runs again (reason counts of the last round)."""
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
                                           [plans[p.ad.id] for p, a
                                            in zip(todo, answers, strict=True) if a is None])
            if not lost:
                break
            decision.placed = [p for p in decision.placed if p.ad.id not in lost]
            if round_ + 1 < MAX_CAP_ROUNDS:
                keep = ~np.isin(ids, np.array(sorted(lost), dtype=np.int64))
                ids, camp = ids[keep], camp[keep]
                s = {k: v[keep] for k, v in s.items()}
        for reason, n in refused.items():
            _add(decision.reason_counts, reason, n)

    # ---- 4. pre-rank scores -------------------------------------------------------------
    def _scores(self, ids: np.ndarray, camp: np.ndarray, view: ColumnsView,
                placement: str) -> dict[str, np.ndarray]:
        """Per candidate: pCTR (with creative rotation), action rate, value and total."""
        pctr, seen = self.ctr.pctr_array(ids, placement)
        shape, quality, bid_type, bid, advertiser = candidate_fields(ids, camp, view.ads,
                                                                     view.campaigns)
        if seen.any():
            self._rotate(ids, camp, shape, pctr, seen, placement)
        rate, total = totals(bid_type, bid, quality, pctr, self.pcvr)
        return {"pctr": pctr, "rate": rate, "total": total, "shape": shape,
                "bid": bid, "bid_type": bid_type, "quality": quality, "advertiser": advertiser,
                "pcvr": np.full(len(ids), self.pcvr)}

    def _predict(self, scorer: ModelScorer, req: SelectRequest, ids: np.ndarray,
                 camp: np.ndarray, s: dict[str, np.ndarray], now: datetime,
                 deadline_at_ms: float, decision: Decision, seed: int) -> None:
        """Step 5: the model's pCTR for the ``prerank_keep`` best by the prior's scores
        (ties at the cut kept), at each slot run's position (the candidates' own tokens
        summed once); each run ranks and prices on its position's (``_at_position``),
        the others keep the prior's. On a fallback the prior's scores stand and the
        decision says so."""
        decision.model_version = scorer.version
        total = s["total"]
        top = np.arange(len(ids))
        if len(ids) > self.prerank_keep:
            part = np.argpartition(-total, self.prerank_keep - 1)[: self.prerank_keep]
            top = np.flatnonzero(total >= total[part].min())
        bid_type = s["bid_type"][top]
        candidates = list(zip(ids[top].tolist(), camp[top].tolist(),
                              s["advertiser"][top].tolist(),
                              [BID_TYPES[b].value for b in bid_type.tolist()], strict=True))
        p = req.placement
        positions = sorted({run[0].position for run in _slot_runs(req.slots)})
        request = {"placement": p.id, "position": positions[0],
                   "exchange": p.exchange, "domain": p.domain, "hour": now.astimezone(UTC).hour,
                   "attributes": req.user.attributes}
        found, _cause = scorer.pctr_by_position(request, positions, candidates, deadline_at_ms)
        if found is None:
            decision.fallback = True
            return
        if len(top) < len(ids) and unit(seed, 0, RECALL) < scorer.recall_sample:
            self._check_recall(scorer, request, ids, camp, s, top, found[positions[0]],
                               deadline_at_ms)
        pcvr = found.pop(PCVR, None)
        if pcvr is not None:  # CPA candidates the conversion model knows: its pCVR
            cpa = s["bid_type"][top] == 2
            if scorer.cvr_model is not None:
                cpa &= scorer.cvr_model.knows(ids[top])
            s["pcvr"][top[cpa]] = pcvr[cpa]
        for k, pctr in found.items():  # whole columns: the capped path filters them
            column = s["pctr"].copy()
            column[top] = serving_pctr(scorer, ids[top], pctr, s["pctr"][top])
            s[f"{AT_POSITION}{k}"] = column
        self._at_position(s, positions[0])

    def _at_position(self, s: dict[str, np.ndarray], position: int) -> None:
        """Make the model's pCTR at ``position`` (where it scored) the one ranked and
        priced on, with the rates and totals that follow from it."""
        column = s.get(f"{AT_POSITION}{position}")
        if column is None:
            return
        s["pctr"] = column
        s["rate"], s["total"] = self._totals(s, np.arange(len(column)), column)

    def _totals(self, s: dict[str, np.ndarray], at: np.ndarray, pctr: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """(action rate, value + quality) of the candidates ``at`` with ``pctr``."""
        bid_type = s["bid_type"][at]
        rate = np.where(bid_type == 0, 1.0 / MILLE,
                        np.where(bid_type == 1, pctr, pctr * s["pcvr"][at]))
        return rate, s["bid"][at] * rate + s["quality"][at]

    def _check_recall(self, scorer: ModelScorer, request: dict[str, object], ids: np.ndarray,
                      camp: np.ndarray, s: dict[str, np.ndarray], top: np.ndarray,
                      top_pctr: np.ndarray, deadline_at_ms: float) -> None:
        """Pre-rank recall, on a sample of decisions: would the best candidate by the
        total serving ranks on, over every candidate, have been among those pre-rank
        kept? The others are scored too (a measurement: skipped without the time for
        it). Both sides take the pCTR serving uses (:func:`serving_pctr`): the model's
        for ads it was trained on, the prior's for the others."""
        rest = np.setdiff1d(np.arange(len(ids)), top, assume_unique=True)
        candidates = list(zip(ids[rest].tolist(), camp[rest].tolist(),
                              s["advertiser"][rest].tolist(),
                              [BID_TYPES[b].value for b in s["bid_type"][rest].tolist()],
                              strict=True))
        rest_pctr, _ = scorer.pctr(request, candidates, deadline_at_ms, measuring=True)
        if rest_pctr is None:
            return
        kept = serving_pctr(scorer, ids[top], top_pctr, s["pctr"][top])
        others = serving_pctr(scorer, ids[rest], rest_pctr, s["pctr"][rest])
        best_kept = float(self._totals(s, top, kept)[1].max())
        best_rest = float(self._totals(s, rest, others)[1].max())
        scorer.record_recall(best_kept >= best_rest)

    def _rotate(self, ids: np.ndarray, camp: np.ndarray, shape: np.ndarray,
                pctr: np.ndarray, seen: np.ndarray, placement: str) -> None:
        """:func:`~adfunnel.serving.funnel.rotate_creatives` on the arrays: a campaign's
        creatives of one shape, where one has counts, get the rotation pool's pCTRs."""
        key = camp * (int(shape.max()) + 1) + shape
        _, group, size = np.unique(key, return_inverse=True, return_counts=True)
        for g in np.unique(group[(size[group] > 1) & seen]):
            members = np.flatnonzero(group == g)
            pctr[members] = self.ctr.campaign_pctrs(ids[members].tolist(), placement)

    # ---- 5. auction per slot run ----------------------------------------------------------
    def _auction_columns(self, req: SelectRequest, ids: np.ndarray, camp: np.ndarray,
                         s: dict[str, np.ndarray], versions: _Versions, view: ColumnsView,
                         now: datetime, decision: Decision, seed: int) -> None:
        counts = decision.reason_counts
        assert counts is not None
        placement = self.catalog.placements.get(req.placement.id)
        in_page = np.zeros(len(ids), dtype=bool)  # campaign or advertiser placed already
        cols = self.catalog.columns
        for run in _slot_runs(req.slots):
            self._at_position(s, run[0].position)  # the model's pCTR at this run's position
            pool = (s["shape"] == cols.shape_code(run[0].format, run[0].width, run[0].height))
            pool &= ~in_page
            reserve = _reserve(req, run[0], placement)
            lazy = s["lazy"]
            pool &= lazy != LAZY_REFUSED  # turned away by the gate in an earlier run
            eligible = pool & _above_reserve(s, reserve / MILLE)
            _add(counts, "below_reserve", int(pool.sum() - eligible.sum()))
            if decision.exploration and (lazy[eligible] == LAZY_PENDING).any():
                # an exploration pick may be any eligible candidate: every one answered
                self._settle_pending(np.flatnonzero(eligible), camp, s, view, now, seed, counts)
                eligible &= lazy != LAZY_REFUSED
            slot_ids = [x.id for x in run]
            for round_ in itertools.count():
                result, prefix, kept = self._auction_prefix(
                    ids, camp, s, np.flatnonzero(eligible), slot_ids, reserve, seed)
                waiting = lazy[prefix] == LAZY_PENDING
                if not waiting.any():
                    break
                if round_ >= MAX_SETTLE_ROUNDS:  # answers keep changing: no slice for now
                    gone = np.isin(camp, camp[prefix[waiting]]) & (lazy == LAZY_PENDING)
                    _add(counts, NO_SLICE, int(np.count_nonzero(gone & eligible)))
                    lazy[gone] = LAZY_REFUSED
                else:
                    self._settle_pending(prefix, camp, s, view, now, seed, counts)
                eligible &= lazy != LAZY_REFUSED
            _add(counts, PRERANK_CUT, int(eligible.sum()) - kept)
            _add(counts, OUTRANKED, kept - len(prefix))  # ranked below the decisive prefix
            for reason, n in Counter(r.reason for r in result.rejections).items():
                _add(counts, reason, n)
            wins = result.wins
            if decision.exploration is not None:
                wins = self._explore(ids, camp, s, eligible, run, reserve, seed, wins,
                                     decision)
            for win in wins:
                c = self.catalog.campaigns[win.candidate.campaign_id]
                ad = self.catalog.ads[win.candidate.ad_id]
                in_page |= (camp == c.id) | (s["advertiser"] == c.advertiser_id)
                if (ad.version, c.version) != versions.read(ad.id, c.id):
                    # edited while this decision read its columns: not served on a
                    # mix of two versions (the slot stays empty)
                    _add(counts, CHANGED, 1)
                    continue
                decision.placed.append(self._place(win, ad, c, req.placement.id, now))

    def _explore(self, ids: np.ndarray, camp: np.ndarray, s: dict[str, np.ndarray],
                 eligible: np.ndarray, run: list[SlotIn], reserve: int, seed: int,
                 greedy: list[Win], decision: Decision) -> list[Win]:
        """The slot run's winners with exploration configured, and their propensities.

        Slot by slot, the exploration pick is uniform among the eligible candidates
        (above the reserve, budget, pacing and caps passed) whose campaign and
        advertiser have no ad on the page yet; it pays the reserve (a lone bidder's
        GSP price), so it never bids above its bid or below the reserve. The
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
                                     reserve, tie_seed=seed)
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
                        seed: int) -> tuple[AuctionResult, np.ndarray, int]:
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
        return run_auction(cands, slot_ids, reserve, tie_seed=seed), prefix, kept

    def _candidate_at(self, i: int, ids: np.ndarray, camp: np.ndarray,
                      s: dict[str, np.ndarray]) -> Candidate:
        return Candidate(
            int(ids[i]), int(camp[i]), int(s["advertiser"][i]), BID_TYPES[s["bid_type"][i]],
            int(s["bid"][i]), float(s["pctr"][i]), float(s["pcvr"][i]),
            quality_micros=int(s["quality"][i]),
        )


def serving_pctr(scorer: ModelScorer, ids: np.ndarray, model_pctr: np.ndarray,
                 prior_pctr: np.ndarray) -> np.ndarray:
    """The pCTR serving ranks and prices on, per candidate: the model's for the ads it
    was trained on, the prior's (``prior_pctr``) for the others — a model says nothing
    of an ad it never saw."""
    return np.where(scorer.model.knows(ids), model_pctr, prior_pctr)


def _above_reserve(s: dict[str, np.ndarray], reserve_imp: float) -> np.ndarray:
    """:func:`~adfunnel.auction.gsp.run_auction`'s reserve test, vectorised: action rate
    > 0, bid ≥ reserve in the bid's unit, total ≥ reserve per impression."""
    rate = s["rate"]
    positive = rate > 0
    in_unit = np.full(len(rate), np.inf)
    np.divide(reserve_imp, rate, out=in_unit, where=positive)
    return positive & (s["bid"] >= in_unit) & (s["total"] >= reserve_imp)


_BULK: dict[type, bool] = {}


def _is_bulk(gate: object) -> bool:
    """isinstance(gate, BulkGate), cached per class (a protocol check is slow)."""
    kind = type(gate)
    known = _BULK.get(kind)
    if known is None:
        known = _BULK[kind] = isinstance(gate, BulkGate)
    return known


def _code_of(reason: str, extra: list[str]) -> int:
    code = _CODE.get(reason)
    if code is None:
        if reason not in extra:
            extra.append(reason)
        code = len(REASONS) + extra.index(reason)
    return code


def _count(counts: dict[str, int], reasons: np.ndarray, extra: list[str]) -> None:
    names = [*REASONS, *extra]
    tally = np.bincount(reasons[reasons > 0], minlength=len(names))
    for code in np.flatnonzero(tally):
        _add(counts, names[code] or "", int(tally[code]))


def _add(counts: dict[str, int], reason: str, n: int) -> None:
    if n:
        counts[reason] = counts.get(reason, 0) + n


@dataclass(slots=True)
class _Servable:
    """What :meth:`ColumnarDecider._servable` found: the candidates that fit (ids,
    campaign ids, versions read) and per distinct campaign (``uc``; ``inverse`` maps
    each candidate to its entry) its reason code so far, local date ordinal and the
    gate's inputs."""

    ids: np.ndarray
    camp: np.ndarray
    versions: _Versions
    uc: np.ndarray
    inverse: np.ndarray
    verdict: np.ndarray
    local: np.ndarray
    charges: np.ndarray
    budgets: np.ndarray

    @property
    def live_candidates(self) -> int:
        """Candidates whose campaign is still in (status, flight, daypart)."""
        return int(np.count_nonzero(self.verdict[self.inverse] == 0))


class _Versions:
    """Ad and campaign versions as a decision read them, before their other columns."""

    def __init__(self, ad_ids: np.ndarray, ad_version: np.ndarray) -> None:
        self.ad_ids, self.ad_version = ad_ids, ad_version
        self.campaign_ids = self.c_version = np.zeros(0, dtype=np.int64)

    def campaigns(self, campaign_ids: np.ndarray, c_version: np.ndarray) -> None:
        self.campaign_ids, self.c_version = campaign_ids, c_version

    def read(self, ad_id: int, campaign_id: int) -> tuple[int, int]:
        """(ad version, campaign version) read for a winner (a few per decision)."""
        i = int(np.flatnonzero(self.ad_ids == ad_id)[0])
        j = int(np.flatnonzero(self.campaign_ids == campaign_id)[0])
        return int(self.ad_version[i]), int(self.c_version[j])


class _Scratch:
    """A per-thread int64 array of −1 by campaign id, as long as asked, for
    :func:`~adfunnel.serving.kernels.campaign_checks` (which leaves it all −1)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def scratch(self, n: int) -> np.ndarray:
        buf: np.ndarray | None = getattr(self._local, "buf", None)
        if buf is None or len(buf) < n:
            buf = self._local.buf = np.full(max(n, 1024), -1, dtype=np.int64)
        return buf


class _StageClock:
    """Stage durations in µs (measurement only: not domain time)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter() if on else 0.0

    def lap(self, stage: str) -> None:
        if self.on:
            t = time.perf_counter()
            self.laps[stage] = (t - self._t) * 1e6
            self._t = t
