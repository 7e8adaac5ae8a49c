"""The event log on NATS JetStream (nats-py): the production implementation, and its producer.

Layout on the server:

- one stream (default ``ADFUNNEL_EVENTS``, file storage) over the subjects
  ``<subject_prefix>.*``; an event goes to ``<subject_prefix>.<partition>``;
- every message carries ``Nats-Msg-Id: <impression_id>:<event_type>``, and the
  stream's duplicate window (default 2 h) drops a second publish of the same id;
- a durable consumer ``name`` over partitions P is one durable pull consumer per
  partition, ``<name>_p<partition>`` (:mod:`adfunnel.events.jetstream_consumer`).

The connection, its private event loop and the synchronous bridge to it are
:class:`~adfunnel.events.jetstream_connection.JetStreamConnection`, which this log
extends with the :class:`~adfunnel.events.log.EventLog` API: publishing (here) and
consumers (:class:`~adfunnel.events.jetstream_consumer.JetStreamConsumer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import Sequence

from nats.aio.msg import Msg

from adfunnel.events.jetstream_async import (
    MSG_ID_HEADER,
    LoopPublisher,
    publish_answer,
)
from adfunnel.events.jetstream_connection import JetStreamConnection
from adfunnel.events.jetstream_consumer import JetStreamConsumer, setup_durables
from adfunnel.events.log import (
    DEFAULT_ACK_WAIT_S,
    DEFAULT_DEDUPE_WINDOW_S,
    DEFAULT_PARTITIONS,
    EventLogError,
    EventLogUnavailable,
    check_consumer_args,
)
from adfunnel.events.model import Event, encode, partition_of

_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")
_SUBJECT_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


class JetStreamEventLog(JetStreamConnection):
    """An :class:`~adfunnel.events.log.EventLog` on a NATS JetStream stream.

    Args:
        url: the NATS server, e.g. ``nats://127.0.0.1:4222`` (several: comma-separated).
        stream: the stream's name (1-200 of ``[A-Za-z0-9_-]``); created when missing.
        subject_prefix: subjects are ``<subject_prefix>.<partition>``.
        partitions: number of partitions (≥ 1); every producer and consumer of a stream
            must use the same number.
        dedupe_window_s: the stream's duplicate window for a new stream (> 0).
        max_age_s: a new stream drops events older than this; None keeps them.
        replicas: a new stream's replica count (1 on one server, 3 in a cluster).
        timeout_s: the longest a publish, ack or consumer set-up waits (> 0).
        connect_timeout_s: the longest a connection attempt waits (> 0).
        reconnect_wait_s: after a failed connect, calls fail at once for this long.
        max_ack_pending: per (consumer, partition), deliveries handed out and not yet
            acknowledged before the server stops handing out more.

    Raises:
        ValueError: an argument out of its domain.
        EventLogError: the stream exists with other subjects.

    An unreachable server at construction is not an error: the connection is tried
    again by the first call (after ``reconnect_wait_s``).
    """

    def __init__(
        self,
        url: str = "nats://127.0.0.1:4222",
        *,
        stream: str = "ADFUNNEL_EVENTS",
        subject_prefix: str = "adfunnel.events",
        partitions: int = DEFAULT_PARTITIONS,
        dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
        max_age_s: float | None = None,
        replicas: int = 1,
        timeout_s: float = 2.0,
        connect_timeout_s: float = 2.0,
        reconnect_wait_s: float = 0.5,
        max_ack_pending: int = 20_000,
    ) -> None:
        if not _STREAM_NAME.fullmatch(stream):
            raise ValueError(f"stream: 1-200 of [A-Za-z0-9_-], got {stream!r:.220}")
        if not _SUBJECT_PREFIX.fullmatch(subject_prefix):
            raise ValueError(f"subject_prefix: dot-separated tokens, got {subject_prefix!r}")
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        for label, value in (("dedupe_window_s", dedupe_window_s), ("timeout_s", timeout_s),
                             ("connect_timeout_s", connect_timeout_s)):
            if not value > 0:
                raise ValueError(f"{label} must be > 0, got {value}")
        if max_age_s is not None and not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0 or None, got {max_age_s}")
        if replicas < 1 or max_ack_pending < 1 or reconnect_wait_s < 0:
            raise ValueError("replicas and max_ack_pending must be >= 1, reconnect_wait_s >= 0")
        self._partitions = partitions
        self._max_ack_pending = max_ack_pending
        self._consumers: set[JetStreamConsumer] = set()
        self._ack_inbox: str | None = None  # publish answers come to <inbox>.<batch>.<i>
        self._batches: dict[str, _PendingBatch] = {}
        self._batch_ids = itertools.count(1)
        #: publishes the stream answered as duplicates (dedupe window) since this was made
        self.duplicates = 0
        super().__init__(
            [u.strip() for u in url.split(",") if u.strip()], stream=stream,
            subject_prefix=subject_prefix, dedupe_window_s=dedupe_window_s,
            max_age_s=max_age_s, replicas=replicas, timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s, reconnect_wait_s=reconnect_wait_s)

    @property
    def partitions(self) -> int:
        """The number of partitions."""
        return self._partitions

    # --- EventLog ----------------------------------------------------------------------------

    def publish(self, event: Event) -> None:
        """See :meth:`adfunnel.events.log.EventLog.publish`."""
        self.publish_many((event,))

    def publish_many(self, events: Sequence[Event]) -> None:
        """See :meth:`adfunnel.events.log.EventLog.publish_many`. The messages go out
        in order on one connection and the stream's answers are awaited together; the
        whole batch gets ``timeout_s``. A duplicate (answered ``duplicate``) counts as
        stored."""
        if not events:
            return
        batch = [(self.subject(partition_of(e.campaign_id, self._partitions)), encode(e),
                  e.msg_id) for e in events]
        self._run(self._publish(batch), self._timeout_s)

    def loop_publisher(self) -> LoopPublisher:
        """A :class:`~adfunnel.events.jetstream_async.LoopPublisher` on this log's
        servers and subjects, for publishing from the caller's own loop (call its
        ``start`` there). The stream is made by this log's own connection."""
        partitions, subject = self._partitions, self.subject
        return LoopPublisher(
            self._urls, lambda e: subject(partition_of(e.campaign_id, partitions)),
            timeout_s=self._timeout_s, connect_timeout_s=self._connect_timeout_s)

    def consumer(
        self,
        name: str,
        partitions: Sequence[int] | None = None,
        *,
        ack_wait_s: float = DEFAULT_ACK_WAIT_S,
        from_seq: int | None = None,
        take_over: bool = False,
    ) -> JetStreamConsumer:
        """See :meth:`adfunnel.events.log.EventLog.consumer`. Creates (or, with
        ``from_seq``, deletes and recreates) the durable pull consumers
        ``<name>_p<partition>``; an existing one gets the new ``ack_wait_s``.

        ``take_over``: this reader replaces one that stopped without acknowledging all
        it was handed (a restarted aggregator). A partition whose durable still waits for
        acknowledgements is repositioned just after its acknowledgement floor, so what
        the old reader held comes again at once and in log order, ahead of newer events,
        rather than after ``ack_wait_s`` behind them (an aggregator would then read a
        click before the impression it needs, and leave it unbilled). Events acknowledged
        after the floor come again too (readers are idempotent). Ignored with
        ``from_seq``."""
        chosen = check_consumer_args(name, partitions, self._partitions, ack_wait_s, from_seq)
        self._run(self._setup_consumers(name, chosen, ack_wait_s, from_seq, take_over),
                  self._timeout_s * (1 + len(chosen)))
        consumer = JetStreamConsumer(self, name, chosen, self._consumers.discard)
        try:
            self._run(consumer._start(), self._timeout_s)
        except BaseException:
            consumer._closed = True
            raise
        self._consumers.add(consumer)
        return consumer

    def close(self) -> None:
        """See :meth:`adfunnel.events.log.EventLog.close`. Open consumers are closed
        first (their undelivered buffered messages handed back to the server)."""
        if self._closed:
            return
        for consumer in list(self._consumers):
            with contextlib.suppress(EventLogError):
                consumer.close()
        super().close()

    # --- on the loop --------------------------------------------------------------------------

    def _connection_replaced(self) -> None:
        self._ack_inbox = None  # the answers' inbox was the old connection's

    async def _publish(self, batch: list[tuple[str, bytes, str]]) -> None:
        """Send every message of ``batch`` in order, each with its own reply subject on
        the log's ack inbox, then wait for all the stream's answers together."""
        nc, _ = await self._connected()
        if self._ack_inbox is None:
            self._ack_inbox = nc.new_inbox()
            await nc.subscribe(f"{self._ack_inbox}.*.*", cb=self._on_pub_ack)
        batch_id = str(next(self._batch_ids))
        pending = _PendingBatch(len(batch), asyncio.get_running_loop().create_future())
        self._batches[batch_id] = pending
        prefix = f"{self._ack_inbox}.{batch_id}."
        try:
            for i, (subject, payload, msg_id) in enumerate(batch):
                # the msg id is the only header: every reader parses it (in Python)
                await nc.publish(subject, payload, reply=f"{prefix}{i}",
                                 headers={MSG_ID_HEADER: msg_id})
            await asyncio.wait_for(pending.done, self._timeout_s)
        except TimeoutError:
            raise EventLogUnavailable(
                f"the stream confirmed {len(batch) - pending.left} of {len(batch)} publishes "
                f"in {self._timeout_s:g} s"
            ) from None
        finally:
            del self._batches[batch_id]

    async def _on_pub_ack(self, msg: Msg) -> None:
        """One stream answer to a publish: ``{"stream":…,"seq":…[,"duplicate": true]}``,
        an ``{"error":…}``, or a status (503: no stream listens on the subject)."""
        batch_id = msg.subject.rsplit(".", 2)[-2]
        pending = self._batches.get(batch_id)
        if pending is None or pending.done.done():
            return  # an answer after its batch timed out or failed
        try:
            if publish_answer(msg):
                self.duplicates += 1
        except EventLogUnavailable as exc:
            pending.done.set_exception(exc)
            return
        pending.left -= 1
        if pending.left == 0:
            pending.done.set_result(None)

    async def _setup_consumers(
        self, name: str, partitions: tuple[int, ...], ack_wait_s: float, from_seq: int | None,
        take_over: bool = False,
    ) -> None:
        _, js = await self._connected()
        await setup_durables(js, self._stream, self.subject, self._max_ack_pending, name,
                             partitions, ack_wait_s, from_seq, take_over)


class _PendingBatch:
    """A published batch waiting for the stream's answers."""

    __slots__ = ("done", "left")

    def __init__(self, left: int, done: asyncio.Future[None]) -> None:
        self.left = left
        self.done = done

