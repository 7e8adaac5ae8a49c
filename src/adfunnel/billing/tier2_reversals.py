"""Tier 2's reversals in the aggregator: score a batch's newly billed events, then move
what the scorer finds invalid (and what billed on it) to invalid traffic while pending.

A part of :class:`~adfunnel.billing.aggregator.Aggregator` (mixed in: its state is
declared in ``Aggregator.__init__``). The scorer (:mod:`adfunnel.ivt.scoring`) sees each
newly billed impression and click once the whole batch is fed, so a reversal finds every
row it takes back: an invalid impression's click billed in the same batch (or held and
released by it), an invalid click's conversion. A reversal stays queued until the
ledger has taken it: when the ledger fails, the batch is retried, its events are then
duplicates that are never scored again, and the queue is taken first. Each reversal is
refunded to the budget gate and taken back from the click model.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

from adfunnel.billing.batch_hours import BatchHours
from adfunnel.billing.ledger import Ledger
from adfunnel.billing.model import PLAIN, EventType, LedgerEvent, Recorded
from adfunnel.budget.gate import SpendGate
from adfunnel.campaigns.model import CampaignStatus
from adfunnel.events.model import Event
from adfunnel.ivt.rules import EventFacts
from adfunnel.ivt.scoring import Tier2Scorer

#: Most recently billed events remembered for refunding a reversal to the budget gate.
PENDING_MEMORY = 200_000

#: A reversal tier 2 decided: (impression id, event type, reason, the scored event's
#: time, which decides whether the row is still pending).
Unreversed = tuple[str, str, str, datetime]

#: a reversed event's type -> the types reversed with it: itself, then what billed on it
REVERSED_WITH: dict[str, tuple[str, ...]] = {
    "impression": ("impression", "click", "conversion"),
    "click": ("click", "conversion"),
}


class Tier2Reversals:
    """Tier 2 of an :class:`~adfunnel.billing.aggregator.Aggregator` (module docstring)."""

    scorer: Tier2Scorer | None
    ledger: Ledger
    gate: SpendGate
    hold_s: float
    stats: Any
    campaign: Callable[[int], Any]
    on_lifetime_restored: Callable[[int], None] | None
    _to_score: list[tuple[Event, LedgerEvent]]
    _unreversed: deque[Unreversed]
    _billed_where: OrderedDict[tuple[str, str], LedgerEvent]
    _outcome: Callable[[str, str], None]
    _unfeed: Callable[[LedgerEvent], None]

    def _score_batch(self, hours: BatchHours) -> None:
        """Tier 2: score the batch's newly billed events, once the whole batch is fed (a
        reversal then finds every row it takes back: a click billed in this batch on an
        impression reversed here), and reverse what it finds.

        A reversal stays queued until the ledger has taken it: when the ledger fails
        the batch is retried, its events now duplicates that are never scored again,
        and the queue is taken first. The hours of what was reversed go to ``hours`` (the
        rollups refresh them)."""
        scoring, self._to_score = self._to_score, []
        if self.scorer is not None:
            for event, row in scoring:
                self._unreversed.extend(self._reversals(self.scorer, event, row))
        while self._unreversed:
            impression_id, event_type, reason, now = self._unreversed[0]
            taken = self.ledger.reverse(impression_id, EventType(event_type), reason, now,
                                        self.hold_s)
            # the ledger has it (or had nothing to take): what follows is this process's
            # own bookkeeping, done once even if it raises (a retry's ledger returns None)
            self._unreversed.popleft()
            if taken is not None:
                self._reversed(impression_id, event_type, reason, now, taken, hours)

    @staticmethod
    def _reversals(scorer: Tier2Scorer, event: Event, row: LedgerEvent) -> list[Unreversed]:
        """What tier 2 finds invalid on scoring a newly billed event, with what billed on
        it (an invalid impression's click, an invalid click's conversion, never
        billable: had they come later they would not have billed)."""
        facts = EventFacts(PLAIN[row.event_type], event.client_ip, event.user_agent or None,
                           served_at_ms=event.served_at * 1000,
                           event_at_ms=int(event.occurred_at * 1000),
                           impression_id=event.impression_id, placement=event.placement)
        return [(r.impression_id, event_type, str(r.reason), row.occurred_at)
                for r in scorer.observe(facts)
                for event_type in REVERSED_WITH.get(r.event_type, (r.event_type,))]

    def _reversed(self, impression_id: str, event_type: str, reason: str, now: datetime,
                  taken: Recorded, hours: BatchHours) -> None:
        """The ledger moved a billed row to invalid traffic: count it, mark its hour for
        the rollups (``now`` when its row is no longer remembered), refund it to the gate
        and take it back from the click model."""
        self.stats.reversed += 1
        self._outcome(event_type, f"reversed_{reason}")
        where = self._billed_where.pop((impression_id, event_type), None)
        hours.add(now if where is None else where.occurred_at)
        if where is None:
            return
        self._unfeed(where)  # in memory first, the store's write (a reopened line) last
        if taken.billed_micros:
            self.gate.record_billed(where.campaign_id, where.day, -taken.billed_micros,
                                    impression_id, False)
            self._restored(where.campaign_id)

    def _restored(self, campaign_id: int) -> None:
        """A refund of a ``completed`` campaign: billing had left its lifetime at 0
        (``on_lifetime_spent``), and now it is not."""
        if self.on_lifetime_restored is None:
            return
        c = self.campaign(campaign_id)
        if c is not None and c.status is CampaignStatus.COMPLETED:
            self.on_lifetime_restored(campaign_id)

    def _remember(self, row: LedgerEvent) -> None:
        """Keep a newly billed row (its campaign and day) for refunding a reversal."""
        billed_where = self._billed_where
        billed_where[(row.impression_id, PLAIN[row.event_type])] = row
        while len(billed_where) > PENDING_MEMORY:
            billed_where.popitem(last=False)
