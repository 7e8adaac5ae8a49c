"""The event log interface: an append-only, partitioned, replayable log of :class:`Event`.

DESIGN.md §Events and billing. The tracker appends; aggregators read through durable
consumers and acknowledge after their ledger commit. Semantics every implementation
keeps (tests/contract/test_event_log_contract.py runs them over each):

- **Partitions.** An event goes to partition ``partition_of(campaign_id, partitions)``;
  within a partition events keep their publish order.
- **Sequence.** Every stored event gets a stream sequence, 1, 2, 3, … over the whole
  log (all partitions), increasing with publish order.
- **Dedupe.** A publish whose :attr:`Event.msg_id` was stored within the dedupe window
  is dropped (not stored again, no error), so a retried publish is harmless.
- **Durable consumers.** A consumer is named; its position and its unacknowledged
  deliveries belong to the name, not to the object, so a restarted reader with the same
  name continues where the last one stopped. Each (name, partition) is read by one
  reader at a time.
- **At-least-once.** A delivery not acknowledged within the consumer's ``ack_wait_s``
  is delivered again. Readers must be idempotent (the ledger's unique
  (impression id, event type) is).
- **Replay.** ``consumer(name, partitions, from_seq=s)`` repositions the durable
  consumer to read every stored event with sequence ≥ ``s`` again (0 or 1: the whole
  log).

Implementations: :class:`adfunnel.events.memory_log.MemoryEventLog` (embedded default)
and :class:`adfunnel.events.jetstream_log.JetStreamEventLog` (NATS JetStream).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from adfunnel.events.model import Event

#: Default seconds a delivery may stay unacknowledged before it is delivered again.
DEFAULT_ACK_WAIT_S = 30.0
#: Default dedupe window, seconds: a retried publish within 2 h of the first is dropped.
DEFAULT_DEDUPE_WINDOW_S = 2 * 3600.0
#: Default number of partitions.
DEFAULT_PARTITIONS = 16

_CONSUMER_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")


class EventLogError(Exception):
    """A misuse or misconfiguration of the event log (not a transient failure)."""


class EventLogUnavailable(EventLogError):
    """The log failed, did not answer in time, or is closed.

    After a failed ``publish`` or ``publish_many`` any of the events may or may not have
    been stored: publish them again (the dedupe window drops the ones that were) or
    spool them. After a failed ``ack`` the deliveries will come again.
    """


class Delivery:
    """One event handed to a consumer, to be acknowledged after it is processed.

    Attributes:
        event: the event.
        seq: its stream sequence (≥ 1).
        partition: its partition.
        attempt: 1 on the first delivery, 2 on the first redelivery, …
        token: what the log needs to acknowledge it (opaque; None in memory).
    """

    __slots__ = ("_ack", "attempt", "event", "partition", "seq", "token")

    def __init__(
        self,
        event: Event,
        seq: int,
        partition: int,
        attempt: int,
        ack: Callable[[Delivery], None],
        token: object = None,
    ) -> None:
        self.event = event
        self.seq = seq
        self.partition = partition
        self.attempt = attempt
        self.token = token
        self._ack = ack

    def ack(self) -> None:
        """Acknowledge this delivery (see :meth:`Consumer.ack`; prefer it for batches).

        Raises:
            EventLogUnavailable: the acknowledgement may not have reached the log.
        """
        self._ack(self)

    def __repr__(self) -> str:
        return (
            f"Delivery(seq={self.seq}, partition={self.partition}, attempt={self.attempt}, "
            f"msg_id={self.event.msg_id!r})"
        )


class Consumer(Protocol):
    """A reader of a durable consumer over some partitions. Not shared between threads."""

    @property
    def name(self) -> str:
        """The durable consumer's name."""
        ...

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions it reads, ascending."""
        ...

    def fetch(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        """Up to ``max_messages`` deliveries, ascending by ``seq``.

        Returns as soon as some are available; waits at most about ``timeout_s`` seconds
        (network time, not domain time) when none are, then returns ``[]``. Deliveries
        whose ``ack_wait_s`` ran out unacknowledged come again, ``attempt`` increased.

        Raises:
            ValueError: ``max_messages`` < 1 or ``timeout_s`` < 0.
            EventLogUnavailable: the log failed or is closed.
        """
        ...

    def ack(self, deliveries: Iterable[Delivery]) -> None:
        """Acknowledge ``deliveries`` (call it after their ledger commit), in one round
        trip. Acknowledging twice, or after a redelivery, is harmless.

        Raises:
            EventLogUnavailable: the acknowledgements may not have reached the log
                (they will be delivered again).
        """
        ...

    def close(self) -> None:
        """Stop reading. The durable position stays in the log; deliveries handed out
        and not acknowledged come again after ``ack_wait_s`` (or sooner)."""
        ...


class ConsumerBase:
    """What every log's reader shares: its name and partitions, the partition a fetch asks
    first (rotated by each fetch, so none starves), one-delivery acks and the closed check.

    A reader subclasses it and implements ``fetch`` (starting with :meth:`_next_fetch`),
    ``ack`` and ``close`` (setting ``_closed``).
    """

    def __init__(self, name: str, partitions: tuple[int, ...]) -> None:
        self._name = name
        self._partitions = partitions
        self._turn = 0
        self._closed = False

    @property
    def name(self) -> str:
        """The durable consumer's name."""
        return self._name

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions it reads, ascending."""
        return self._partitions

    def ack(self, deliveries: Iterable[Delivery]) -> None:
        """See :meth:`Consumer.ack`."""
        raise NotImplementedError

    def ack_one(self, delivery: Delivery) -> None:
        """Acknowledge one delivery (what :meth:`Delivery.ack` calls)."""
        self.ack((delivery,))

    def _next_fetch(self, max_messages: int, timeout_s: float) -> int:
        """Check a fetch's arguments and that this reader is open, and turn to the next
        first partition; its index in :attr:`partitions`.

        Raises:
            ValueError: as :func:`check_fetch_args`.
            EventLogUnavailable: the reader is closed.
        """
        check_fetch_args(max_messages, timeout_s)
        self._check_open()
        self._turn = (self._turn + 1) % len(self._partitions)
        return self._turn

    def _check_open(self) -> None:
        if self._closed:
            raise EventLogUnavailable(f"consumer {self._name!r} is closed")


class EventLog(Protocol):
    """An append-only, partitioned, replayable event log (see the module docstring).

    Thread-safe: any thread may publish; each consumer object belongs to one thread.
    """

    @property
    def partitions(self) -> int:
        """The number of partitions, ≥ 1."""
        ...

    def publish(self, event: Event) -> None:
        """Append ``event`` to its campaign's partition, unless its ``msg_id`` was
        stored within the dedupe window (then nothing happens).

        Returns once the log has stored it (durably, for a durable log).

        Raises:
            EventLogUnavailable: failure, timeout or closed log; the event may or may
                not be stored.
        """
        ...

    def publish_many(self, events: Sequence[Event]) -> None:
        """:meth:`publish` each of ``events``, in order, in as few round trips as the
        log allows; returns when all are stored.

        Raises:
            EventLogUnavailable: some of the events may be stored; publish them all
                again (duplicates are dropped) or spool them.
        """
        ...

    def consumer(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        *,
        ack_wait_s: float = DEFAULT_ACK_WAIT_S,
        from_seq: int | None = None,
    ) -> Consumer:
        """A reader of the durable consumer ``name`` over ``partitions`` (None: all).

        A name seen for the first time starts at the beginning of the log. An existing
        one continues where it stopped, with its unacknowledged deliveries pending,
        unless ``from_seq`` is given: then it is repositioned to deliver every stored
        event of those partitions with sequence ≥ ``from_seq`` (0 and 1 both mean the
        whole log), and what was pending is forgotten.

        Args:
            name: 1-100 of ``[A-Za-z0-9_-]``.
            partitions: distinct partitions in ``[0, partitions)``.
            ack_wait_s: seconds before an unacknowledged delivery comes again (> 0).
            from_seq: ≥ 0, or None to continue.

        Raises:
            ValueError: a bad name, partition, ``ack_wait_s`` or ``from_seq``.
            EventLogUnavailable: the log failed or is closed.
        """
        ...

    def close(self) -> None:
        """Release connections and threads; later calls raise
        :class:`EventLogUnavailable`. Idempotent."""
        ...


def check_consumer_args(
    name: str,
    partitions: Sequence[int] | None,
    total: int,
    ack_wait_s: float,
    from_seq: int | None,
) -> tuple[int, ...]:
    """Validate :meth:`EventLog.consumer` arguments; the partitions, ascending.

    Raises:
        ValueError: as documented on :meth:`EventLog.consumer`.
    """
    if not isinstance(name, str) or not _CONSUMER_NAME.fullmatch(name):
        raise ValueError(f"consumer name: 1-100 of [A-Za-z0-9_-], got {name!r:.120}")
    chosen = tuple(range(total)) if partitions is None else tuple(sorted(partitions))
    if not chosen:
        raise ValueError("partitions: at least one")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"partitions: must be distinct, got {list(partitions or ())}")
    for p in chosen:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < total:
            raise ValueError(f"partitions: each in [0, {total}), got {p!r}")
    if not ack_wait_s > 0:
        raise ValueError(f"ack_wait_s must be > 0, got {ack_wait_s}")
    if from_seq is not None and (
        isinstance(from_seq, bool) or not isinstance(from_seq, int) or from_seq < 0
    ):
        raise ValueError(f"from_seq must be an int >= 0 or None, got {from_seq!r}")
    return chosen


def check_fetch_args(max_messages: int, timeout_s: float) -> None:
    """Validate :meth:`Consumer.fetch` arguments.

    Raises:
        ValueError: ``max_messages`` < 1 or ``timeout_s`` < 0.
    """
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise ValueError(f"max_messages must be an int >= 1, got {max_messages!r}")
    if not timeout_s >= 0:
        raise ValueError(f"timeout_s must be >= 0, got {timeout_s}")
