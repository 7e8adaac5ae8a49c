"""The decision log: what each decision saw, chose and rejected (with reason codes).

Kept in a bounded in-memory ring for the explain endpoint; the trainer's served log
is a later plane. Appending is O(1) and never blocks the request path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from adfunnel.serving.funnel import Decision


class DecisionLog:
    """The last ``capacity`` decisions, by request id."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, Decision] = OrderedDict()
        self._lock = threading.Lock()
        self.decisions = 0
        self.late = 0
        self.filled_slots = 0

    def append(self, decision: Decision) -> None:
        with self._lock:
            self.decisions += 1
            self.late += decision.late
            self.filled_slots += len(decision.placed)
            self._items[decision.request_id] = decision
            if len(self._items) > self.capacity:
                self._items.popitem(last=False)

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
                 "pctr": p.win.candidate.pctr}
                for p in d.placed
            ],
            "rejections": [
                {"ad_id": r.ad_id, "campaign_id": r.campaign_id, "reason": r.reason}
                for r in d.rejections
            ],
        }
