"""Decide, commit in time, log: the one path every ad-request endpoint takes.

DESIGN.md §The funnel, step 7: the decision waits its turn in the
:class:`~adfunnel.serving.deadline.DecisionQueue`; an answer still in time when it is
about to be sent commits its expected spend, the decision log, the placement's traffic
count and the served log; a late one gives back the frequency caps it counted and
commits nothing; a shed one was never decided. ``POST /v1/ads:select``
(:mod:`adfunnel.serving.http`) and ``POST /openrtb2/bid`` (:mod:`adfunnel.openrtb`) both
call :meth:`DecisionRunner.run`; the OpenRTB endpoint passes ``adjust`` to reprice its
winners (their tokens and expected cost) before the deadline is checked, so what is
committed is exactly what is answered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from prometheus_client import Counter

from adfunnel.budget.gate import bid_multiplier
from adfunnel.clock import monotonic_ms
from adfunnel.events.served_log import ServedLog
from adfunnel.serving.deadline import SHED_EXPIRED, SHED_QUEUE, DecisionQueue
from adfunnel.serving.decision import Decision
from adfunnel.serving.decision_log import DecisionLog
from adfunnel.serving.placement_traffic import PlacementCounter
from adfunnel.serving.request import SelectRequest
from adfunnel.serving.served_record import decision_source

SHED_REQUESTS = Counter(
    "adfunnel_shed_requests", "Ad requests shed (204, never decided) because they could not "
    "start before their deadline: reason queue (on arrival) or expired (in the queue)",
    ["reason"],
)
SHED_COUNTERS = {r: SHED_REQUESTS.labels(r) for r in (SHED_QUEUE, SHED_EXPIRED)}

#: :attr:`Committed.outcome` values.
SHED = "shed"
LATE = "late"
DECIDED = "decided"


@dataclass(frozen=True, slots=True)
class Committed:
    """What became of one request: ``shed`` or ``late`` (``decision`` None: nothing
    committed), or ``decided`` (the decision, committed and logged)."""

    outcome: str
    decision: Decision | None = None


class DecisionRunner:
    """Runs one request through the queue and commits its decision only when in time.

    ``served``: the served log (None: not recorded); ``placements``: requests and
    filled slots per placement (None: not counted).
    """

    def __init__(self, queue: DecisionQueue, log: DecisionLog, *,
                 served: ServedLog | None = None,
                 placements: PlacementCounter | None = None) -> None:
        self.queue = queue
        self.decider = queue.decider
        self.log = log
        self.served = served
        self.placements = placements

    async def run(self, req: SelectRequest, request_id: str, deadline_ms: float,
                  adjust: Callable[[Decision], None] | None = None,
                  supply_chain: str | None = None, dry_run: bool = False) -> Committed:
        """Decide ``req`` before ``deadline_ms`` (a :func:`monotonic_ms` instant) and
        commit it if still in time. ``adjust`` may rewrite the decision's winners (in
        place) before the deadline check and the commit; ``supply_chain``: an OpenRTB
        request's ``source.schain`` (JSON text) for the served log. ``dry_run`` (an
        OpenRTB ``test = 1`` request): answered, but nothing is committed — no spend,
        decided writing nothing (:mod:`adfunnel.serving.dry_run`: no pacing traffic,
        supply, cap count, budget demand or draw), no served log or placement count,
        shed or late alike; only the decision log keeps it (to look at) and counts it
        when shed or late."""
        outcome = await self.queue.decide(req, request_id, deadline_ms, dry_run)
        decision = outcome.decision
        placements = None if dry_run else self.placements
        if decision is None:
            if placements is not None:
                placements.add(req.placement.id, len(req.slots))
            self.log.count_shed()
            SHED_COUNTERS[outcome.shed or SHED_QUEUE].inc()
            return Committed(SHED)
        if adjust is not None:
            adjust(decision)
        if monotonic_ms() >= deadline_ms:  # checked just before commit: late work commits nothing
            self.decider.abandon(decision)  # and gives back the caps it counted
            if placements is not None:
                placements.add(req.placement.id, len(req.slots))
            self.log.count_late()
            return Committed(LATE)
        if dry_run:  # its decision made no cap counts; a dropped winner's were none either
            self.log.append(decision, explain=req.explain)
            return Committed(DECIDED, decision)
        self.decider.commit(decision)
        self.log.append(decision, explain=req.explain)
        if placements is not None:
            placements.add(req.placement.id, len(req.slots), decision.slot_tiers().values())
        if self.served is not None:  # queued (never waits; dropped and counted when full)
            self.served.record(decision_source(
                decision, req, pacing_rate=self.decider.gate.pacing_rate,
                bid_multiplier=partial(bid_multiplier, self.decider.gate),
                model_version=decision.model_version, exploration=decision.exploration,
                propensities=decision.propensities or None, supply_chain=supply_chain))
        return Committed(DECIDED, decision)
