"""The aggregator: event log → ledger, budgets and the click model, acknowledged after.

DESIGN.md §Events and billing. An aggregator owns some partitions of the event log
through a durable consumer. It reads them in batches and records each batch in ONE
ledger transaction (:meth:`Ledger.record_many`) — valid events billed as their billing
type bills (CPM the impression, CPC the click, CPA the conversion), invalid traffic
with its reason, a click that came before its impression held until it comes — and
acknowledges the batch only after that commit. A crash before the acknowledgement
redelivers the batch; the ledger's unique (impression id, event type) makes the second
pass record nothing again, so replaying any part of the log is always safe.

Tier 2 (:mod:`adfunnel.ivt.scoring`, applied by :mod:`adfunnel.billing.tier2_reversals`)
scores every newly billed impression and click over sliding windows; an event it finds
invalid is reversed while still pending (:data:`DEFAULT_HOLD_S` after it occurred; then
it is final): the ledger moves it to invalid traffic with its reason and its spend is
refunded to the gate. What billed on it in the meantime (its click, that click's
conversion: in its batch, or held and released by it) is reversed with it, as it would
never have billed after the reversal. Budgets count pending spend as spent.

Newly billed spend goes to the budget gate (:meth:`SpendGate.record_billed`) and newly
billed impressions and clicks to the click model's counts — held clicks too, when their
impression bills them (tier 2 does not score those: the ledger keeps no address);
duplicates, invalid traffic and unbillable events go to neither.

Render and viewable events (measurement: the tracker's ``/i`` and ``/vi``) get their
ledger row once per impression id with no money (outcome ``measured``): they reach
neither the budget gate nor the click model nor tier 2, and count only in the rollups'
``rendered`` and ``viewable``. The impression event beside one of them bills as ever.
OpenRTB win and loss notices are measured the same way; a new loss also releases its
bid's outstanding expected cost in the gate (:meth:`SpendGate.record_billed` with 0
billed, settling: a second release of the same impression finds nothing) and, through
its ledger row, in the budget service's in-flight estimate.

A conversion bills a CPA campaign its target CPA (the token's price) when it is the
first for its click and comes within the campaign's attribution window after the click
(``Campaign.attribution_window_s``, 7 days unless the campaign sets one); the ledger
checks both.
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

import numpy as np

from adfunnel.billing.aggregator_metrics import (
    LAG_SAMPLES,
    AggregatorStats,
    BatchMetrics,
    NewDeliveries,
    lag_percentiles,
    lags_ms,
)
from adfunnel.billing.batch_hours import BatchHours
from adfunnel.billing.batch_model import BatchPlan
from adfunnel.billing.event_rows import bills_on, ledger_event
from adfunnel.billing.ledger import Ledger, LedgerWrite
from adfunnel.billing.limits import write_budgets
from adfunnel.billing.model import PLAIN, EventType, LedgerEvent, Outcome, Recorded
from adfunnel.billing.store_refusals import record_isolating
from adfunnel.billing.tier2_reversals import Tier2Reversals, Unreversed
from adfunnel.billing.waiting_events import (
    UNKNOWN_CAMPAIGN,
    UNKNOWN_CAMPAIGN_RETRY_S,
    WaitingEvents,
)
from adfunnel.budget.gate import SpendGate
from adfunnel.campaigns.model import Campaign, CampaignStatus
from adfunnel.events.log import Consumer, Delivery
from adfunnel.events.model import Event
from adfunnel.ivt.scoring import Tier2Scorer
from adfunnel.prediction.smoothed import SmoothedCtr

#: Default seconds a billed event stays pending, reversible by tier 2, before it is final.
DEFAULT_HOLD_S = 600.0
#: Seconds :meth:`Aggregator.run` waits before recording a failed batch again
#: (network time: the ledger or the log did not answer).
RETRY_S = 1.0


class CampaignLookup(Protocol):
    """The campaign read model the aggregator bills against (budgets, time zone)."""

    def __call__(self, campaign_id: int) -> Campaign | None: ...


class Aggregator(Tier2Reversals):
    """Applies deliveries of one consumer to the ledger; one thread drives it.

    Args:
        consumer: the durable consumer over this aggregator's partitions.
        ledger: where events are recorded.
        campaign: campaign id → campaign (None: not known yet — the change feed may
            not have applied a new campaign: the event is kept unacknowledged and
            retried with every batch for ``unknown_retry_s`` network seconds, then
            rejected, counted ``unknown_campaign``, and acknowledged).
        gate: receives newly billed spend.
        ctr: receives newly billed impressions and clicks (None: not fed).
        on_lifetime_spent: called with a campaign id whose lifetime budget billing left
            at 0, or whose goal billing met (the app marks the campaign ``completed``).
        on_hours: called after each committed batch with the UTC hours (aware datetimes
            at the hour) its events fell in (the rollups refresh them).
        scorer: tier-2 invalid-traffic scoring (None: none); it sees every newly billed
            impression and click, and what it finds invalid is reversed while pending.
        hold_s: seconds an event stays pending (reversible) after it occurred.
        on_billed: called with each newly billed ledger row (the click model's
            calibration monitor).
        on_reversed: called with each billed row tier 2 reversed (the calibration
            monitor takes back what ``on_billed`` added; ``ctr`` is taken back here).
        on_lifetime_restored: called with the id of a ``completed`` campaign when tier 2
            reverses one of its billed events: the refund leaves its lifetime (a
            flight's or a goal's money) unspent again (the app reopens it).
        unknown_retry_s: see ``campaign``.
    """

    def __init__(self, consumer: Consumer, ledger: Ledger, campaign: CampaignLookup,
                 gate: SpendGate, ctr: SmoothedCtr | None = None, *,
                 on_lifetime_spent: Callable[[int], None] | None = None,
                 on_hours: Callable[[set[datetime]], None] | None = None,
                 scorer: Tier2Scorer | None = None,
                 hold_s: float = DEFAULT_HOLD_S,
                 on_billed: Callable[[LedgerEvent], None] | None = None,
                 unknown_retry_s: float = UNKNOWN_CAMPAIGN_RETRY_S,
                 on_reversed: Callable[[LedgerEvent], None] | None = None,
                 on_lifetime_restored: Callable[[int], None] | None = None) -> None:
        self.consumer = consumer
        self.ledger = ledger
        self.campaign = campaign
        self.gate = gate
        self.ctr = ctr
        self.on_lifetime_spent = on_lifetime_spent
        self.on_hours = on_hours
        self.scorer = scorer
        self.hold_s = hold_s
        self.on_billed = on_billed
        self.unknown_retry_s = unknown_retry_s
        self.on_reversed = on_reversed
        self.on_lifetime_restored = on_lifetime_restored
        # unacknowledged deliveries of campaigns not known yet
        self._waiting = WaitingEvents()
        # recently billed rows, for undoing a reversal (refund, model)
        self._billed_where: OrderedDict[tuple[str, str], LedgerEvent] = OrderedDict()
        # this batch's newly billed events tier 2 scores once the batch is fed
        self._to_score: list[tuple[Event, LedgerEvent]] = []
        # what tier 2 found invalid and the ledger has not reversed yet (it failed)
        self._unreversed: deque[Unreversed] = deque()
        # hours a batch that failed after the ledger's commit changed (refreshed on retry)
        self._hours_owed: set[datetime] = set()
        self.stats = AggregatorStats()
        #: distinct events of the log this aggregator has handled (a redelivery of one
        #: it handled is not counted again; one another reader left unacknowledged is)
        self.first_deliveries = 0
        self.outcomes: Tally[str] = Tally()
        self._lags_ms: deque[float] = deque(maxlen=LAG_SAMPLES)
        self._lock = threading.Lock()  # one batch at a time (pump may come from any thread)
        self._handled = threading.Condition()  # notified after each committed batch
        self._new = NewDeliveries()
        self._batch = BatchMetrics()  # this batch's money and outcomes, for the metrics

    def run_once(self, max_messages: int = 2000, timeout_s: float = 0.5) -> int:
        """Fetch one batch (waiting up to ``timeout_s`` network seconds for it), record
        it, acknowledge it; the number of deliveries handled.

        Raises:
            EventLogUnavailable: the log failed (nothing acknowledged: redelivered).
            sqlalchemy.exc.SQLAlchemyError: the ledger failed (likewise).
        """
        with self._lock:
            batch = self.consumer.fetch(max_messages, timeout_s)
            if batch or self._waiting:
                self._apply(batch)
            return len(batch)

    def pump(self, max_messages: int = 2000) -> int:
        """Handle everything available now, without waiting; the number handled."""
        total = 0
        while n := self.run_once(max_messages, 0.0):
            total += n
        return total

    def run(self, stop: threading.Event, max_messages: int = 2000,
            timeout_s: float = 0.5, on_error: Callable[[Exception], None] | None = None
            ) -> None:
        """Run batches until ``stop`` is set. A batch that fails (the ledger or the log
        did not answer) is reported to ``on_error`` and recorded again after
        :data:`RETRY_S` (it was not acknowledged; the ledger's unique key makes a second
        pass harmless), without waiting for the log to deliver it again: a memory log
        on a manual clock would not, before its clock moved."""
        batch: list[Delivery] = []
        while not stop.is_set():
            try:
                if not batch:
                    batch = self.consumer.fetch(max_messages, timeout_s)
                if batch or self._waiting:  # waiting: retried when the log is idle too
                    with self._lock:
                        self._apply(batch)
                batch = []
            except Exception as exc:  # a log or database outage: wait, then retry
                if on_error is not None:
                    on_error(exc)
                stop.wait(RETRY_S)

    def wait_handled(self, count: int, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` (network seconds) until :attr:`first_deliveries`, with
        the events parked until their campaign is known, reaches ``count``; True when it
        has. A parked event counts as handled for now: nothing this aggregator can do
        before its campaign arrives changes the ledger."""
        with self._handled:
            return self._handled.wait_for(
                lambda: self.first_deliveries + len(self._waiting) >= count, timeout_s)

    def lag_ms(self) -> dict[str, float | None]:
        """Beacon-to-ledger lag percentiles (``p50``, ``p99``, wall-clock ms) over the
        recent events this aggregator recorded; None where none were measured."""
        with self._lock:
            lags = np.fromiter(self._lags_ms, dtype=float)
        return lag_percentiles(lags)

    def _apply(self, fetched: Sequence[Delivery]) -> None:
        """Record a batch in one ledger transaction, then feed what it billed, and
        acknowledge what was recorded or rejected (not the events still waiting for
        their campaign)."""
        batch, retried = self._waiting.with_fetched(fetched)
        writes: list[LedgerWrite] = []
        events: list[tuple[Event, Campaign]] = []
        done: list[Delivery] = []
        for delivery in batch:
            event = delivery.event
            campaign = self.campaign(event.campaign_id)
            if campaign is None:
                if self._waiting.wait(delivery, self.unknown_retry_s):
                    self.stats.unknown_retried += 1
                    continue
                self.stats.unknown_campaign += 1  # still unknown: rejected
                self._outcome(PLAIN[event.event_type], "unknown_campaign")
                UNKNOWN_CAMPAIGN.labels("rejected").inc()
                done.append(delivery)
                continue
            if delivery.seq in retried:
                UNKNOWN_CAMPAIGN.labels("recorded").inc()
            done.append(delivery)
            daily, lifetime, limits = write_budgets(campaign)  # its period's limits
            writes.append(LedgerWrite(ledger_event(event, campaign), daily, lifetime,
                                      event.ivt_reason, limits))
            events.append((event, campaign))
        if not done:  # every event waits for its campaign: parked, wake the waiters
            with self._handled:
                self._handled.notify_all()
            return
        plan = self._record(writes, events) if writes else None
        hours = BatchHours()
        try:
            if plan is not None:
                for (event, campaign), write, recorded in zip(events, writes, plan.recorded,
                                                              strict=True):
                    if self._after(event, campaign, write.event, recorded):
                        hours.add(write.event.occurred_at)
                for row, recorded in plan.released:  # held clicks billed with their impression
                    self.stats.billed += 1
                    self._outcome(PLAIN[row.event_type], "released")
                    self._feed(row, recorded, self.campaign(row.campaign_id))
                    hours.add(row.occurred_at)
            self._score_batch(hours)
        except BaseException:
            # the ledger committed what these hours show (billed, reversed); the retried
            # batch is all duplicates, which mark no hour: the retry refreshes them
            self._hours_owed |= hours.hours
            raise
        if self._hours_owed:
            hours.hours |= self._hours_owed
            self._hours_owed = set()
        self._batch.flush_money()
        self.consumer.ack(done)
        self._waiting.done(done)
        batch = done
        self._batch.flush_outcomes()
        self.stats.batches += 1
        self.stats.events += len(batch)
        self._count_new(batch, retried)
        done_ns = time.time_ns()
        self._lags_ms.extend(lags_ms(batch, done_ns))
        if hours.hours and self.on_hours is not None:
            self.on_hours(hours.hours)

    def _record(self, writes: list[LedgerWrite], events: list[tuple[Event, Campaign]]
                ) -> BatchPlan:
        """The batch recorded (:func:`record_isolating`); a write the ledger refused on
        its own is dropped from ``writes`` and ``events`` (its delivery is acknowledged
        with the batch) and counted as ``store_refused``."""
        plan, refused = record_isolating(self.ledger, writes)
        for i in reversed(refused):
            event, _ = events.pop(i)
            del writes[i]
            self.stats.store_refused += 1
            self._outcome(PLAIN[event.event_type], "store_refused")
        return plan

    def _after(self, event: Event, campaign: Campaign, row: LedgerEvent,
               recorded: Recorded) -> bool:
        """Count what recording ``event`` did, feed and score it when billed; True when
        it changed the ledger's figures (its hour needs a rollup refresh)."""
        self._outcome(PLAIN[event.event_type], PLAIN[recorded.outcome])
        if event.billing_notice:  # billed, or a replay the ledger held already: duplicate
            self._batch.billing_notices[PLAIN[recorded.outcome]] += 1
        match recorded.outcome:
            case Outcome.INVALID:
                self.stats.invalid += 1
                return True
            case Outcome.MEASURED:  # render, viewable: the rollups count it, nothing bills
                self.stats.measured += 1
                if row.event_type is EventType.LOSS:  # the bid's reservation is released
                    self.gate.record_billed(row.campaign_id, row.day, 0, row.impression_id,
                                            True)
                return True
            case Outcome.DUPLICATE:
                self.stats.duplicates += 1
            case Outcome.HELD:
                self.stats.held += 1
            case Outcome.NOT_BILLABLE:
                self.stats.not_billable += 1
            case Outcome.BILLED:
                self.stats.billed += 1
                self._feed(row, recorded, campaign)
                if self.scorer is not None and event.client_ip:  # windows are per address
                    self._to_score.append((event, row))
                return True
        return False

    def _count_in_model(self, row: LedgerEvent, *, taken_back: bool) -> None:
        """Count ``row`` (an impression or click) in the click model, or take it back."""
        ctr = self.ctr
        if ctr is None:
            return
        if row.event_type is EventType.IMPRESSION:
            (ctr.unobserve_impression if taken_back else ctr.observe_impression)(
                row.ad_id, row.placement)
        elif row.event_type is EventType.CLICK:
            (ctr.unobserve_click if taken_back else ctr.observe_click)(row.ad_id, row.placement)

    def _unfeed(self, row: LedgerEvent) -> None:
        """Take back from the click model and its calibration monitor what billing
        ``row`` fed them (it was reversed: IVT never reaches the model)."""
        self._count_in_model(row, taken_back=True)
        if self.on_reversed is not None:
            self.on_reversed(row)

    def _feed(self, row: LedgerEvent, recorded: Recorded, campaign: Campaign | None) -> None:
        """Newly billed: spend to the budget gate, observations to the click model."""
        self._count_in_model(row, taken_back=False)
        if self.on_billed is not None:
            self.on_billed(row)
        self._batch.add_money(recorded)  # to the metrics once per batch
        if self.scorer is not None:  # tier 2 may reverse it while pending: keep its row
            self._remember(row)
        billable = bills_on(row.billing_type) is row.event_type
        self.gate.record_billed(row.campaign_id, row.day, recorded.billed_micros,
                                row.impression_id, billable)
        spent = recorded.lifetime_remaining_micros == 0 or recorded.goal_met
        if (spent and self.on_lifetime_spent is not None
                and campaign is not None and campaign.status is not CampaignStatus.COMPLETED):
            self.on_lifetime_spent(campaign.id)

    def _count_new(self, batch: Sequence[Delivery], retried: set[int]) -> None:
        """Count the batch's events this aggregator had not handled before (a
        partition's deliveries come in sequence order; a redelivery is at or below the
        partition's highest handled sequence; one that waited for its campaign was
        never counted) and wake :meth:`wait_handled`."""
        new = self._new.count(batch, retried)
        with self._handled:
            self.first_deliveries += new
            self._handled.notify_all()

    def _outcome(self, event_type: str, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self._batch.outcomes[(event_type, outcome)] += 1  # to the metric once per batch
