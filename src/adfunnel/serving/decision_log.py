"""The decision log: what each decision saw, chose and rejected (with reason codes).

Kept in a bounded in-memory ring for the explain endpoint; the trainer's served log
is a later plane. Appending is O(1) and never blocks the request path. Only answers
sent in time are appended (DESIGN.md §The funnel, step 7); late and shed requests are
counted, and the deadline miss rate is their share of the most recent requests.

A record is named by its request id, which the caller chooses: a held name is never
taken from the decision that holds it, but by an explain request's (the operator's, its
admin key checked), so no caller can overwrite or hide another's record, nor squat the
name of the operator's audit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

from adfunnel.serving.decision import Decision

#: Most per-candidate rejections held in all (explain requests keep every candidate's
#: reason; at catalogue scale one holds thousands): older decisions leave first.
MAX_REJECTIONS_HELD = 500_000


class DecisionLog:
    """The last ``capacity`` committed decisions, by request id, and the outcome counts.

    Memory is bounded twice: at most ``capacity`` decisions, holding at most
    ``max_rejections`` per-candidate rejections in all (the columnar path keeps counts
    per reason instead; explain requests keep every candidate's).

    ``decisions`` counts every ad request that reached the decision stage: committed
    (answered in time, filled or not), ``late`` (decided, found late, 204) and ``shed``
    (never decided, 204). :meth:`miss_rate` is (late + shed) / requests over the last
    ``window`` of them. ``rejections`` totals the committed decisions' rejected
    candidates per reason code since start (e.g. ``capped``).
    """

    def __init__(self, capacity: int = 10_000, window: int = 1_000,
                 max_rejections: int = MAX_REJECTIONS_HELD) -> None:
        self.capacity = capacity
        self.max_rejections = max_rejections
        self._held_rejections = 0  # per-candidate rejections of the decisions held
        self._items: OrderedDict[str, Decision] = OrderedDict()
        self._lock = threading.Lock()
        self.decisions = 0
        self.late = 0
        self.shed = 0
        self.filled_slots = 0
        self.rejections: dict[str, int] = {}
        self._recent: deque[bool] = deque(maxlen=window)  # True: late or shed
        self._recent_missed = 0

    def append(self, decision: Decision, *, explain: bool = False) -> None:
        """Log a decision whose answer is sent in time (the commit step): counted always,
        held under its request id unless another decision holds that name and this one
        is not an explain request's (``explain``: the operator's, admin key checked)."""
        with self._lock:
            self.decisions += 1
            self.filled_slots += len(decision.placed)
            for reason, n in decision.rejection_counts().items():
                self.rejections[reason] = self.rejections.get(reason, 0) + n
            self._note(missed=False)
            # the name is the caller's choice: taking it would let anyone replace the
            # record of a decision someone else made (the operator's audit included)
            if explain or decision.request_id not in self._items:
                self._hold(decision)

    def _hold(self, decision: Decision) -> None:
        """Hold ``decision`` under its name (the newest), then drop the oldest records
        beyond ``capacity`` decisions or ``max_rejections`` rejections. Lock held."""
        old = self._items.pop(decision.request_id, None)
        if old is not None:
            self._held_rejections -= len(old.rejections)
        self._items[decision.request_id] = decision
        self._held_rejections += len(decision.rejections)
        while len(self._items) > self.capacity or (
                self._held_rejections > self.max_rejections and len(self._items) > 1):
            _, dropped = self._items.popitem(last=False)
            self._held_rejections -= len(dropped.rejections)

    def count_late(self) -> None:
        """A decision found late: answered 204, nothing logged or committed."""
        with self._lock:
            self.decisions += 1
            self.late += 1
            self._note(missed=True)

    def count_shed(self) -> None:
        """A request shed before it was decided: answered 204."""
        with self._lock:
            self.decisions += 1
            self.shed += 1
            self._note(missed=True)

    def miss_rate(self) -> float:
        """(late + shed) / requests over the recent window; 0.0 before any request."""
        with self._lock:
            return self._recent_missed / len(self._recent) if self._recent else 0.0

    def _note(self, *, missed: bool) -> None:
        if len(self._recent) == self._recent.maxlen:
            self._recent_missed -= self._recent[0]
        self._recent.append(missed)
        self._recent_missed += missed

    def get(self, request_id: str) -> Decision | None:
        with self._lock:
            return self._items.get(request_id)

    def explain(self, request_id: str) -> dict[str, object] | None:
        """A JSON-ready account of one decision, or None when it is no longer held."""
        d = self.get(request_id)
        if d is None:
            return None
        return {
            "request_id": d.request_id,
            "index_version": d.index_version,
            "late": d.late,
            "truncated": d.truncated,
            "placed": [
                {"slot_id": p.win.slot_id, "ad_id": p.ad.id, "campaign_id": p.campaign.id,
                 "price_micros": p.win.price_micros, "charge_micros": p.charge_micros,
                 "total_value_micros": round(p.win.candidate.total, 3),
                 "pctr": p.win.candidate.pctr, "tier": p.tier}
                for p in d.placed
            ],
            # the tier that filled each slot: sponsorship, guaranteed, auction or house
            "tiers": d.slot_tiers(),
            # every candidate's reason (goal_met, ahead_of_plan and share_not_drawn
            # for the direct lines a tier turned away)
            "rejections": [
                {"ad_id": r.ad_id, "campaign_id": r.campaign_id, "reason": r.reason,
                 **({"detail": r.detail} if r.detail else {})}
                for r in d.rejections
            ],
            # per reason; every candidate's own reason is kept for explain requests only
            "rejection_counts": d.rejection_counts(),
        }
