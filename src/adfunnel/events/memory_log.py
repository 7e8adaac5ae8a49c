"""The in-memory event log: the embedded default, and the reference for the contract suite.

Same semantics as the JetStream log (see :mod:`adfunnel.events.log`), in one process:
events are stored encoded (so a reader gets a fresh decoded copy, as from the network);
the dedupe window and ``ack_wait_s`` are measured on the injected clock, so a replay or
a test moves them by moving the clock. Nothing survives the process.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from adfunnel.clock import Clock
from adfunnel.events.log import (
    DEFAULT_ACK_WAIT_S,
    DEFAULT_DEDUPE_WINDOW_S,
    DEFAULT_PARTITIONS,
    ConsumerBase,
    Delivery,
    EventLogUnavailable,
    check_consumer_args,
)
from adfunnel.events.model import Event, EventType, decode, encode, partition_of

#: The msg id endings of measurement events (render, viewable, OpenRTB win and loss
#: notices; valid or invalid traffic).
_MEASURED_SUFFIXES = tuple(f":{t.value}{ivt}" for t in (EventType.RENDER, EventType.VIEWABLE,
                                                         EventType.WIN, EventType.LOSS)
                           for ivt in ("", ":ivt"))


@dataclass
class _Partition:
    """Stored events of one partition; ``dropped`` were removed from the front, so the
    entry with absolute index ``i`` is ``seqs[i - dropped]``."""

    seqs: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    dropped: int = 0

    @property
    def end(self) -> int:
        return self.dropped + len(self.seqs)


@dataclass
class _Pending:
    index: int  # absolute index in the partition
    attempt: int
    deadline: float  # clock seconds when it is due again


@dataclass
class _ConsumerState:
    """The durable position of one (consumer name, partition)."""

    next_index: int
    ack_wait_s: float
    pending: dict[int, _Pending] = field(default_factory=dict)  # by seq


def _ack_floor(state: _ConsumerState) -> int:
    """The index in its partition below which a consumer has acknowledged every event."""
    return min((pend.index for pend in state.pending.values()), default=state.next_index)


class MemoryEventLog:
    """A thread-safe in-memory :class:`~adfunnel.events.log.EventLog`.

    Args:
        clock: domain time for the dedupe window and redelivery deadlines.
        partitions: number of partitions (≥ 1).
        dedupe_window_s: seconds a msg id is remembered after it was stored (> 0).
        max_events: keep at most this many events, dropping the oldest (as a
            JetStream stream with a message limit does; a consumer that had not read
            them skips them); None keeps everything.
        keep_unacknowledged: with ``max_events``, never drop an event a consumer has
            not acknowledged: a publish that would is refused (``EventLogUnavailable``,
            nothing stored), as a stream that discards new messages when full. The
            embedded default's log is the only copy of its events: an answered beacon
            must not vanish while the ledger cannot take it.

    Raises:
        ValueError: for an argument out of its domain.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        partitions: int = DEFAULT_PARTITIONS,
        dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
        max_events: int | None = None,
        keep_unacknowledged: bool = False,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        if not dedupe_window_s > 0:
            raise ValueError(f"dedupe_window_s must be > 0, got {dedupe_window_s}")
        if max_events is not None and max_events < 1:
            raise ValueError(f"max_events must be >= 1 or None, got {max_events}")
        self._clock = clock
        self._partitions = partitions
        self._window_s = dedupe_window_s
        self._max_events = max_events
        self._keep_unacknowledged = keep_unacknowledged
        self._cond = threading.Condition()
        self._parts = [_Partition() for _ in range(partitions)]
        self._order: deque[int] = deque()  # partition of each stored event, by seq
        self._seen: OrderedDict[str, float] = OrderedDict()  # msg id → stored at
        self._last_seq = 0
        self._states: dict[tuple[str, int], _ConsumerState] = {}
        self._closed = False
        #: publishes dropped by the dedupe window since this log was made
        self.duplicates = 0
        #: re-sent render and viewable events dropped (apart: ``duplicates`` counts the
        #: billing events' re-sends)
        self.duplicates_measured = 0

    @property
    def partitions(self) -> int:
        """The number of partitions."""
        return self._partitions

    @property
    def last_seq(self) -> int:
        """The sequence of the last stored event (0: none yet)."""
        with self._cond:
            return self._last_seq

    def publish(self, event: Event) -> None:
        """See :meth:`adfunnel.events.log.EventLog.publish`."""
        self.publish_many((event,))

    def publish_many(self, events: Sequence[Event]) -> None:
        """See :meth:`adfunnel.events.log.EventLog.publish_many`; all or nothing here."""
        encoded = [(e.msg_id, partition_of(e.campaign_id, self._partitions), encode(e))
                   for e in events]
        with self._cond:
            self._check_open()
            now = self._now()
            self._forget_expired(now)
            if (self._keep_unacknowledged and self._max_events is not None
                    and len(self._order) + len(encoded) > self._max_events):
                # only near the limit: the common publish has room and pays nothing
                self._check_room(len({m for m, _, _ in encoded if m not in self._seen}))
            for msg_id, p, payload in encoded:
                if msg_id in self._seen:
                    if msg_id.endswith(_MEASURED_SUFFIXES):  # a re-sent render or view
                        self.duplicates_measured += 1
                    else:
                        self.duplicates += 1
                    continue
                self._seen[msg_id] = now
                self._last_seq += 1
                part = self._parts[p]
                part.seqs.append(self._last_seq)
                part.payloads.append(payload)
                self._order.append(p)
            self._apply_limit()
            self._cond.notify_all()

    def consumer(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        *,
        ack_wait_s: float = DEFAULT_ACK_WAIT_S,
        from_seq: int | None = None,
    ) -> MemoryConsumer:
        """See :meth:`adfunnel.events.log.EventLog.consumer`."""
        chosen = check_consumer_args(name, partitions, self._partitions, ack_wait_s, from_seq)
        with self._cond:
            self._check_open()
            for p in chosen:
                part = self._parts[p]
                state = self._states.get((name, p))
                if state is None or from_seq is not None:
                    start = part.dropped + bisect.bisect_left(part.seqs, from_seq or 0)
                    self._states[(name, p)] = _ConsumerState(start, ack_wait_s)
                else:
                    state.ack_wait_s = ack_wait_s
        return MemoryConsumer(self, name, chosen)

    def close(self) -> None:
        """See :meth:`adfunnel.events.log.EventLog.close`; wakes waiting fetches."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- used by MemoryConsumer, under no lock ---------------------------------------------

    def _fetch(
        self, name: str, partitions: tuple[int, ...], start: int, max_messages: int,
        timeout_s: float, consumer: MemoryConsumer,
    ) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s  # a network-style wait, not domain time
        with self._cond:
            while True:
                self._check_open()
                found = self._collect(name, partitions, start, max_messages)
                left = deadline - time.monotonic()
                if found or left <= 0:
                    break
                self._cond.wait(left)
        out = [Delivery(decode(payload), seq, p, attempt, consumer.ack_one)
               for seq, p, attempt, payload in found]
        out.sort(key=lambda d: d.seq)
        return out

    def _ack(self, name: str, deliveries: Iterable[Delivery]) -> None:
        with self._cond:
            self._check_open()
            for d in deliveries:
                state = self._states.get((name, d.partition))
                if state is not None:
                    state.pending.pop(d.seq, None)

    # --- internals, under the lock ---------------------------------------------------------

    def _collect(
        self, name: str, partitions: tuple[int, ...], start: int, max_messages: int
    ) -> list[tuple[int, int, int, bytes]]:
        now = self._now()
        found: list[tuple[int, int, int, bytes]] = []
        n = len(partitions)
        for k in range(n):  # rotate the first partition so none starves
            if len(found) >= max_messages:
                break
            p = partitions[(start + k) % n]
            part = self._parts[p]
            state = self._states[(name, p)]
            for seq in sorted(state.pending):
                if len(found) >= max_messages:
                    break
                pend = state.pending[seq]
                if pend.deadline > now:
                    continue
                i = pend.index - part.dropped
                if i < 0:  # dropped by the limit while pending
                    del state.pending[seq]
                    continue
                pend.attempt += 1
                pend.deadline = now + state.ack_wait_s
                found.append((seq, p, pend.attempt, part.payloads[i]))
            state.next_index = max(state.next_index, part.dropped)
            while len(found) < max_messages and state.next_index < part.end:
                i = state.next_index - part.dropped
                seq = part.seqs[i]
                state.pending[seq] = _Pending(state.next_index, 1, now + state.ack_wait_s)
                found.append((seq, p, 1, part.payloads[i]))
                state.next_index += 1
        return found

    def _forget_expired(self, now: float) -> None:
        horizon = now - self._window_s
        seen = self._seen
        while seen:
            at = next(iter(seen.values()))
            if at > horizon:
                break
            seen.popitem(last=False)

    def _check_room(self, adding: int) -> None:
        """Refuse ``adding`` new events when keeping them under ``max_events`` would
        drop an event some consumer has not acknowledged.

        Raises:
            EventLogUnavailable: the log is full of unacknowledged events.
        """
        over = 0 if self._max_events is None else len(self._order) + adding - self._max_events
        if over <= 0:
            return
        drops = Counter(itertools.islice(self._order, over))  # partition -> oldest dropped
        for (_, p), state in self._states.items():
            if p in drops and self._parts[p].dropped + drops[p] > _ack_floor(state):
                raise EventLogUnavailable(
                    f"the in-memory event log holds {len(self._order)} events, the most it "
                    "keeps, and not all are acknowledged: try again later")

    def _apply_limit(self) -> None:
        if self._max_events is None:
            return
        while len(self._order) > self._max_events:
            part = self._parts[self._order.popleft()]
            del part.seqs[0], part.payloads[0]
            part.dropped += 1

    def _now(self) -> float:
        return self._clock.now().timestamp()

    def _check_open(self) -> None:
        if self._closed:
            raise EventLogUnavailable("the in-memory event log is closed")


class MemoryConsumer(ConsumerBase):
    """A reader of a durable consumer of a :class:`MemoryEventLog`; see
    :class:`adfunnel.events.log.Consumer`."""

    def __init__(self, log: MemoryEventLog, name: str, partitions: tuple[int, ...]) -> None:
        super().__init__(name, partitions)
        self._log = log

    def fetch(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        """See :meth:`adfunnel.events.log.Consumer.fetch`."""
        start = self._next_fetch(max_messages, timeout_s)
        return self._log._fetch(self._name, self._partitions, start, max_messages,
                                timeout_s, self)

    def ack(self, deliveries: Iterable[Delivery]) -> None:
        """See :meth:`adfunnel.events.log.Consumer.ack`."""
        self._check_open()
        self._log._ack(self._name, deliveries)

    def close(self) -> None:
        """See :meth:`adfunnel.events.log.Consumer.close`."""
        self._closed = True
