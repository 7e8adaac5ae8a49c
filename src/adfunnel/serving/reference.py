"""The per-candidate reference path: retrieve → filter → score → auction → respond, one
candidate at a time (DESIGN.md §The funnel) — the decider itself: its state, a decision's
steps, commit and abandon. The stages are its parts, one module each: the filter
(:mod:`adfunnel.serving.reference_filter`) and the auction
(:mod:`adfunnel.serving.reference_auction`).

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

from adfunnel.budget.gate import SpendGate
from adfunnel.clock import Clock, monotonic_ms
from adfunnel.index.base import Retrieval
from adfunnel.index.shaped import ShapedIndex
from adfunnel.pacing.traffic_log import EligibleCounter
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.caps import CapGate
from adfunnel.serving.catalog import Catalog
from adfunnel.serving.decision import Decision, commit_served, give_back_caps
from adfunnel.serving.direct_book import GuaranteedSupply
from adfunnel.serving.house import house_fills
from adfunnel.serving.reference_auction import ReferenceAuction
from adfunnel.serving.reference_filter import ReferenceFilter
from adfunnel.serving.request import SelectRequest, request_attributes


class ReferenceDecider(ReferenceFilter, ReferenceAuction):
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
        candidates = self._filter(req, retrieval.ad_ids, now, decision, deadline_at_ms, seed, seen)
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
