"""Wiring of the event plane of one process: event log, publisher (with spool) and
aggregator (DESIGN.md §The planes, §Events and billing).

A beacon answers once its event is stored in the log (or the spool), never after a
ledger write: the aggregator reads the log on a thread of its own and acknowledges after
each ledger commit, so a slow or locked database delays billing, not the beacon.

- **Embedded default** (no ``event_log_url``): the log lives in this process's memory
  and this process's aggregator thread drains it as events arrive (the memory log wakes
  a waiting fetch). The memory log does not outlive the process: :meth:`EventPlane.close`
  lets the aggregator drain it before stopping. A replay on the manual clock stays
  dependent on its seed only because moving the clock settles the plane first
  (:meth:`EventPlane.settle`), as does ``POST /v1/admin/events:settle``.
- **JetStream** (``event_log_url=nats://…``): the tracker only appends; aggregators
  (``adfunnel aggregator``, or a thread of ``adfunnel serve`` with ``aggregate``) read
  the partitions through the durable consumer :data:`CONSUMER`. While the log is down
  the tracker spools to ``spool_dir``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from adfunnel.billing.aggregator import Aggregator, CampaignLookup
from adfunnel.billing.ledger import Ledger
from adfunnel.billing.model import LedgerEvent
from adfunnel.budget.gate import SpendGate
from adfunnel.clock import Clock
from adfunnel.events.jetstream_log import JetStreamEventLog
from adfunnel.events.log import EventLog
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.publisher import EventPublisher
from adfunnel.events.spool import Spool
from adfunnel.ivt.scoring import Tier2Scorer
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.settings import Settings
from adfunnel.settings.ivt import Tier2Config

_log = logging.getLogger(__name__)

#: The durable consumer name of the ledger aggregators.
CONSUMER = "ledger"
#: Most events the embedded memory log keeps (the oldest are dropped past it once the
#: aggregator has applied them; while the ledger cannot take them, beacons past it
#: answer 503 rather than lose what was answered before).
MEMORY_LOG_EVENTS = 1_000_000
#: Network seconds :meth:`EventPlane.close` lets the aggregator drain the memory log.
CLOSE_DRAIN_S = 30.0


@dataclass
class EventPlane:
    """The event log, the tracker's publisher and (where this process aggregates) the
    aggregator with its thread."""

    log: EventLog
    publisher: EventPublisher
    aggregator: Aggregator | None
    inline: bool  # the log is this process's memory (the embedded default)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _closed: bool = False

    def start(self) -> EventPlane:
        """Start the aggregator thread (where this process aggregates)."""
        if self.aggregator is not None and self._thread is None:
            agg = self.aggregator
            self._thread = threading.Thread(
                target=agg.run, args=(self._stop,),
                kwargs={"on_error": lambda e: _log.warning("aggregator: %s", e)},
                name="aggregator", daemon=True)
            self._thread.start()
        return self

    def settle(self, timeout_s: float = 10.0) -> bool:
        """Wait (network seconds) until this process's aggregator has handled every
        event stored in the log so far and the spool is empty; True when it has (at
        once where this process does not aggregate)."""
        if self.aggregator is None:
            return True
        deadline = time.monotonic() + timeout_s
        while self.publisher.spooled():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)  # the spool drains on its own thread, polled
        left = max(0.0, deadline - time.monotonic())
        return self.aggregator.wait_handled(last_seq(self.log), left)

    def close(self) -> None:
        """Store what the tracker submitted, let the aggregator drain a memory log
        (nothing else keeps it), stop the aggregator, drain the spool if the log
        answers, close the log."""
        if self._closed:
            return
        self._closed = True
        self.publisher.close()
        if self.inline and self._thread is not None and not self.settle(CLOSE_DRAIN_S):
            _log.warning("events of the memory log left unapplied at shutdown")
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.aggregator is not None:
            self.aggregator.consumer.close()
        self.log.close()


def last_seq(log: EventLog) -> int:
    """The log's last stored sequence (0: none)."""
    value = log.last_seq  # type: ignore[attr-defined]
    return int(value() if callable(value) else value)


def make_event_log(settings: Settings, clock: Clock) -> EventLog:
    """The memory log (no ``event_log_url``) or JetStream at ``event_log_url``."""
    if settings.event_log_url is None:
        return MemoryEventLog(clock, partitions=settings.event_partitions,
                              max_events=MEMORY_LOG_EVENTS, keep_unacknowledged=True)
    stream = settings.event_stream
    prefix = ("adfunnel.events" if stream == "ADFUNNEL_EVENTS"
              else f"adfunnel.{stream.lower()}")
    return JetStreamEventLog(settings.event_log_url, stream=stream, subject_prefix=prefix,
                             partitions=settings.event_partitions)


def make_scorer(settings: Settings) -> Tier2Scorer | None:
    """Tier-2 scoring for an aggregator (None when ``ivt`` or ``ivt_tier2`` is off); its
    least human click delay is the tier-1 rule's."""
    if not (settings.ivt and settings.ivt_tier2):
        return None
    return Tier2Scorer(Tier2Config.from_settings(settings))


def make_event_plane(
    settings: Settings, clock: Clock, ledger: Ledger, campaign: CampaignLookup,
    gate: SpendGate, ctr: SmoothedCtr | None, *,
    on_lifetime_spent: Callable[[int], None] | None = None,
    on_hours: Callable[[set[datetime]], None] | None = None,
    on_billed: Callable[[LedgerEvent], None] | None = None,
    on_reversed: Callable[[LedgerEvent], None] | None = None,
    aggregate: bool | None = None, partitions: Sequence[int] | None = None,
    on_lifetime_restored: Callable[[int], None] | None = None, start: bool = True,
) -> EventPlane:
    """The event plane of one process (see the module docstring); the aggregator's
    thread is started unless ``start`` is False (then :meth:`EventPlane.start` starts
    it). ``aggregate`` overrides ``settings.aggregate``; ``partitions`` limits the
    aggregator to some partitions (None: all)."""
    log = make_event_log(settings, clock)
    inline = settings.event_log_url is None
    aggregator = None
    if inline or (settings.aggregate if aggregate is None else aggregate):
        # a (re)started aggregator first gets again, in order, what one before it was
        # handed and never acknowledged (a crash): not after ack_wait, behind newer events
        consumer = (log.consumer(CONSUMER, partitions, take_over=True)
                    if isinstance(log, JetStreamEventLog) else log.consumer(CONSUMER, partitions))
        aggregator = Aggregator(consumer, ledger, campaign, gate, ctr,
                                on_lifetime_spent=on_lifetime_spent, on_hours=on_hours,
                                scorer=make_scorer(settings), hold_s=settings.ivt_hold_s,
                                on_billed=on_billed, on_reversed=on_reversed,
                                on_lifetime_restored=on_lifetime_restored)
    spool = (Spool(settings.spool_dir, settings.spool_max_bytes)
             if settings.spool_dir and not inline else None)
    plane = EventPlane(log, EventPublisher(log, spool), aggregator, inline)
    return plane.start() if start else plane
