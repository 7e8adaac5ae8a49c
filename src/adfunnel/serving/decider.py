"""The production decider: the funnel's filter, budget gate, pacing coin, pre-rank and
auction over numpy arrays (DESIGN.md §The funnel; issue "The decision at catalogue scale").

:class:`ColumnarDecider` gives the same winners, prices and side effects as the
per-candidate reference path (:class:`~adfunnel.serving.reference.ReferenceDecider`) for
the same seed and state — a differential test holds it to that — at a cost that follows
the candidates that can still win. Each stage is a module of :mod:`adfunnel.serving.stages`:

1. **Filter** (``filter``) — boolean masks over the retrieved ads' columns
   (:mod:`adfunnel.serving.columns`): ad status, slot shape, the placement's allowed
   sizes and formats; then, once per distinct campaign in first-retrieved order,
   status, flight and daypart (local dates and hours per time zone, not per ad).
2. **Budget gate** (``gating``) — a :class:`~adfunnel.budget.gate.BulkGate` answers
   admit / refuse for most campaigns in one call; only the rest are asked one by one
   (:meth:`SpendGate.admit`), in the reference order, re-reading the bulk answers
   after an ask that changed the gate's state (its ``generation``).
3. **Pacing coin** (``gating``) — one compiled pass
   (:func:`adfunnel.serving.kernels.paced_out`); then the frequency caps.
4. **Pre-rank** (``prerank``) — total value per impression (bid × action rate +
   quality, with the smoothed pCTR and creative rotation) is one vectorised expression;
   the click model, when configured, scores the best of them (the predict stage).
5. **Fill** (``fill``) — per slot run, the best ``prerank_keep`` candidates above the
   reserve (ties at the cut kept) are ranked as the auction ranks them (total, then
   the tie key: ``argpartition`` and ``lexsort``) and walked with the one-per-campaign
   and one-per-advertiser rule to the first ranked candidate beyond the slots. Only
   that decisive prefix becomes :class:`~adfunnel.auction.gsp.Candidate` objects for
   the reference auction. With exact scores the cut never changes a winner or a price
   (the prefix is the full ranking's; the cut widens when it runs out first). Only
   winners become tokens. Where the catalogue holds sponsorship or guaranteed lines, each
   run's first slots go to them before the auction (:mod:`adfunnel.serving.tiers`, the
   rule the reference path calls too; their draws replace the pacing coin's reason in
   the gating stage), at their contract rates.

Rejections are data without the cost: an ``explain`` request goes through the
reference path (composed in, not inherited) and keeps every candidate's reason; any
other decision counts reasons per code (``Decision.reason_counts``, a ``bincount``).
The auction's own reasons are exact for the decisive prefix; candidates ranked below it
count as ``outranked`` (whether or not one-per-page would also have turned them away),
and those beyond the pre-rank cut as ``prerank_cut``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection

import numpy as np

from adfunnel.auction.draws import EXPLORE, unit
from adfunnel.budget.gate import SpendGate
from adfunnel.clock import Clock, monotonic_ms
from adfunnel.index.base import ArrayRetrieval, query_array
from adfunnel.index.shaped import ShapedIndex
from adfunnel.pacing.traffic_log import EligibleCounter
from adfunnel.prediction.scorer import ModelScorer
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.caps import CapGate
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.decision import Decision, commit_served, give_back_caps
from adfunnel.serving.house import house_fills
from adfunnel.serving.reference import ReferenceDecider
from adfunnel.serving.request import ExchangeSelect, SelectRequest, request_attributes
from adfunnel.serving.stages.fill import FillStage
from adfunnel.serving.stages.filter import FilterStage, Scratch, count_codes
from adfunnel.serving.stages.gating import GatingStage
from adfunnel.serving.stages.prerank import PrerankStage

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
#: The stages timed when ``ColumnarDecider.timings`` is a list.
STAGES = ("retrieve", "filter", "gate", "prerank", "predict", "auction")


class ColumnarDecider(FilterStage, GatingStage, PrerankStage, FillStage):
    """Makes ad decisions over the catalogue's columns (module doc), one stage per base.

    The wiring (``catalog`` … ``caps``) is the reference path's
    (:class:`~adfunnel.serving.reference.ReferenceDecider`, which decides ``explain``
    requests and ids beyond the columns, wired as this decider is at the time).

    ``prerank_keep``: candidates kept per slot run for the auction (≥ 1);
    ``candidate_limit``: most ads retrieved from a shape-partitioned index (the
    reference path's ``retrieval_limit`` counts every shape), ``first_limit`` those
    retrieved first (:data:`FIRST_LIMIT`). When ``timings`` is a list, each decision
    appends its stage durations (µs, by :data:`STAGES`) and its ``candidates``
    retrieved: for benchmarks.
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
        prerank_keep: int = PRERANK_KEEP,
        candidate_limit: int = CANDIDATE_LIMIT,
        first_limit: int = FIRST_LIMIT,
    ) -> None:
        self.reference = ReferenceDecider(
            catalog, gate, ctr, clock, token_key, token_ttl_s=token_ttl_s, pcvr=pcvr,
            retrieval_limit=retrieval_limit, rng=rng, eligible=eligible,
            same_retrieval=same_retrieval, caps=caps)
        self.catalog = catalog
        self.gate = gate
        self.ctr = ctr
        self.clock = clock
        self.token_key = token_key
        self.token_ttl_s = token_ttl_s
        self.pcvr = pcvr
        self.retrieval_limit = retrieval_limit
        self.rng = self.reference.rng  # one seeded source for both paths
        self.eligible = eligible
        self.same_retrieval = same_retrieval
        self.caps = caps
        #: per campaign and UTC hour, the decisions whose frequency caps refused it (the
        #: dashboard's delivery status; both paths add to it); never drained, read with
        #: ``peek``
        self.capped = self.reference.capped
        #: the guaranteed lines' eligible supply: their serving order (both paths add to it)
        self.supply = self.reference.supply
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
        #: first-price shading's win curves, a shading release (None: bids unshaded)
        self.shading: ShadingRelease | None = None
        self._placement_reasons: dict[str, tuple[int, int, np.ndarray]] = {}
        self._distinct = Scratch()

    def decide(self, req: SelectRequest, request_id: str, deadline_at_ms: float) -> Decision:
        """Decide ``req`` before ``deadline_at_ms`` (a :func:`monotonic_ms` instant).

        Pure with respect to spend: winners, prices and signed tokens, nothing recorded;
        the caller commits with :meth:`commit` only when the answer goes out in time.
        """
        if req.explain:  # every candidate's reason: the reference path
            return self._reference().decide(req, request_id, deadline_at_ms)
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
                return self._reference().decide_seeded(req, request_id, deadline_at_ms, seed)
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
        verdict, pending = self._campaign_gate(servable, now, seed, extra,
                                               isinstance(req, ExchangeSelect))
        clock.lap("gate")
        count_codes(counts, verdict, extra)
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
        """Commit an answer that is being sent in time: its expected spend (budget gate),
        and the model's winners to its calibration monitor.

        :meth:`decide` commits nothing, so a decision found late or shed costs nothing.
        This is the single place where everything owed to a sent answer is recorded:
        frequency-cap increments and the served-log record hook in here too.
        """
        commit_served(decision, self.gate)
        scorer = self.scorer
        if (scorer is not None and scorer.monitor is not None and not decision.fallback
                and decision.model_version == scorer.version):
            for p in decision.placed:
                scorer.monitor.served(p.served.impression_id, scorer.version,
                                      float(p.win.candidate.pctr))

    def abandon(self, decision: Decision, ad_ids: Collection[int] | None = None) -> None:
        """The answer to ``decision`` is not sent (found late after the decision): give
        back the frequency-cap counts it made, the one thing :meth:`decide` writes
        (DESIGN.md §The funnel: only answers sent in time commit spend, caps or logs).
        ``ad_ids``: only those winners are not sent (dropped from the answer after the
        decision, e.g. an OpenRTB bid under its floor): only their counts go back."""
        give_back_caps(decision, self.caps, ad_ids)

    def _reference(self) -> ReferenceDecider:
        """The reference path, wired as this decider is now (the runtime and tests may
        swap its gate, caps or catalogue after construction)."""
        ref = self.reference
        ref.catalog, ref.gate, ref.ctr, ref.clock = self.catalog, self.gate, self.ctr, self.clock
        ref.token_key, ref.token_ttl_s, ref.pcvr = self.token_key, self.token_ttl_s, self.pcvr
        ref.retrieval_limit, ref.rng, ref.eligible = self.retrieval_limit, self.rng, self.eligible
        ref.same_retrieval, ref.caps, ref.capped = self.same_retrieval, self.caps, self.capped
        ref.supply, ref.shading = self.supply, self.shading
        return ref

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
