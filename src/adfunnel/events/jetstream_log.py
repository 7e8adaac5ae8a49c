"""The event log on NATS JetStream (nats-py): the production implementation.

Layout on the server:

- one stream (default ``ADFUNNEL_EVENTS``, file storage) over the subjects
  ``<subject_prefix>.*``; an event goes to ``<subject_prefix>.<partition>``;
- every message carries ``Nats-Msg-Id: <impression_id>:<event_type>``, and the
  stream's duplicate window (default 2 h) drops a second publish of the same id;
- a durable consumer ``name`` over partitions P is one durable pull consumer per
  partition, ``<name>_p<partition>`` (explicit ack, ``ack_wait``, unlimited
  redeliveries), so it runs on NATS servers before 2.10 (no multi-subject filters)
  and partitions can move between aggregators one at a time.

nats-py is asyncio; this class keeps one private event loop in a daemon thread and
offers the synchronous :class:`~adfunnel.events.log.EventLog` API on top of it
(``asyncio.run_coroutine_threadsafe`` with timeouts). All waiting here is network
time (``time.monotonic`` / the loop's clock), never domain time.

Connection: the first connect fails fast (a refused connection raises
:class:`~adfunnel.events.log.EventLogUnavailable` at once, an unanswered one after
``connect_timeout_s``); after a failure the next attempt waits ``reconnect_wait_s``,
and calls in between fail at once. Once connected, nats-py reconnects by itself;
while it is disconnected every call fails at once instead of queueing, so a tracker
can spool without waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from adfunnel.events.jetstream_async import (
    MSG_ID_HEADER,
    STATUS_HEADER,
    LoopPublisher,
    publish_answer,
)
from adfunnel.events.log import (
    DEFAULT_ACK_WAIT_S,
    DEFAULT_DEDUPE_WINDOW_S,
    DEFAULT_PARTITIONS,
    Delivery,
    EventLogError,
    EventLogUnavailable,
    check_consumer_args,
    check_fetch_args,
)
from adfunnel.events.model import Event, MalformedEvent, decode, encode, partition_of

_log = logging.getLogger(__name__)

T = TypeVar("T")

_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")
_SUBJECT_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
#: A lingering pull request lasts at most this long, so a consumer closed while one is
#: open waits at most this long for it before handing its messages back.
_LINGER_S = 0.25
#: Extra seconds the synchronous side waits beyond a call's own timeout.
_BRIDGE_MARGIN_S = 1.0

#: nats-py failures that mean "the log did not do it" (connection, timeout, server).
_TRANSIENT: tuple[type[BaseException], ...] = (
    nats.errors.Error,
    OSError,  # TimeoutError (= asyncio.TimeoutError) included
)


class JetStreamEventLog:
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
        self._urls = [u.strip() for u in url.split(",") if u.strip()]
        self._stream = stream
        self._prefix = subject_prefix
        self._partitions = partitions
        self._dedupe_window_s = dedupe_window_s
        self._max_age_s = max_age_s
        self._replicas = replicas
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_wait_s = reconnect_wait_s
        self._max_ack_pending = max_ack_pending
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._stream_ready = False
        self._next_attempt = 0.0
        self._last_error = "not connected yet"
        self._consumers: set[JetStreamConsumer] = set()
        self._ack_inbox: str | None = None  # publish answers come to <inbox>.<batch>.<i>
        self._batches: dict[str, _PendingBatch] = {}
        self._batch_ids = itertools.count(1)
        self._closed = False
        #: publishes the stream answered as duplicates (dedupe window) since this was made
        self.duplicates = 0
        self._loop = asyncio.new_event_loop()
        self._connect_lock: asyncio.Lock | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"nats-{stream}", daemon=True
        )
        self._thread.start()
        try:
            self._run(self._connected(), self._connect_timeout_s + self._timeout_s)
        except EventLogUnavailable as exc:
            _log.warning("event log %s not reachable yet: %s", self._urls, exc)
        except BaseException:
            self.close()
            raise

    @property
    def partitions(self) -> int:
        """The number of partitions."""
        return self._partitions

    @property
    def stream(self) -> str:
        """The stream's name."""
        return self._stream

    def subject(self, partition: int) -> str:
        """The subject of ``partition``: ``<subject_prefix>.<partition>``."""
        return f"{self._prefix}.{partition}"

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
        consumer = JetStreamConsumer(self, name, chosen)
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
        self._closed = True
        if self._loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(self._disconnect(), self._loop)
            try:
                fut.result(self._timeout_s + _BRIDGE_MARGIN_S)
            except (concurrent.futures.TimeoutError, *_TRANSIENT):
                fut.cancel()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self._timeout_s)
        if not self._loop.is_running():
            self._loop.close()

    # --- administration (tests, operators) ---------------------------------------------------

    def delete_stream(self) -> None:
        """Delete the stream and all its consumers (tests and operators only).

        Raises:
            EventLogUnavailable: failure or timeout.
        """
        async def delete() -> None:
            _, js = await self._connected()
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(self._stream)
            self._stream_ready = False

        self._run(delete(), self._timeout_s)

    def last_seq(self) -> int:
        """The stream's last sequence (0: nothing stored yet).

        Raises:
            EventLogUnavailable: failure or timeout.
        """
        async def info() -> int:
            _, js = await self._connected()
            return int((await js.stream_info(self._stream)).state.last_seq)

        return self._run(info(), self._timeout_s)

    # --- the bridge ---------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the private loop and wait for it, mapping failures."""
        if self._closed:
            coro.close()
            raise EventLogUnavailable("the JetStream event log is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("JetStreamEventLog's sync API called from its own loop")
        fut = asyncio.run_coroutine_threadsafe(_mapped(coro), self._loop)
        try:
            return fut.result(timeout_s + _BRIDGE_MARGIN_S)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise EventLogUnavailable(f"no answer from {self._urls} in {timeout_s:g} s") from None

    # --- on the loop --------------------------------------------------------------------------

    async def _connected(self) -> tuple[NatsClient, JetStreamContext]:
        """The live connection and JetStream context, connecting (and creating the
        stream) if needed; fails at once while disconnected or backing off."""
        nc, js = self._nc, self._js
        if nc is not None and js is not None and nc.is_connected and self._stream_ready:
            return nc, js
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._nc is not None and (self._nc.is_reconnecting or self._nc.is_connecting):
                raise EventLogUnavailable(f"reconnecting to {self._urls}: {self._last_error}")
            if self._nc is None or self._nc.is_closed:
                if time.monotonic() < self._next_attempt:
                    raise EventLogUnavailable(f"not connected to {self._urls}: {self._last_error}")
                try:
                    self._nc = await self._connect()
                except EventLogUnavailable as exc:
                    self._last_error = str(exc)
                    self._next_attempt = time.monotonic() + self._reconnect_wait_s
                    raise
                self._js = self._nc.jetstream(timeout=self._timeout_s)
                self._stream_ready = False
                self._ack_inbox = None
            assert self._nc is not None and self._js is not None
            if not self._nc.is_connected:
                raise EventLogUnavailable(f"not connected to {self._urls}: {self._last_error}")
            if not self._stream_ready:
                await self._ensure_stream(self._js)
                self._stream_ready = True
            return self._nc, self._js

    async def _connect(self) -> NatsClient:
        """A new connection; raises at the first failed attempt rather than retrying."""
        nc = NatsClient()
        first_error: asyncio.Future[BaseException] = self._loop.create_future()
        connected = False
        failures = 0

        async def on_error(exc: BaseException) -> None:
            nonlocal failures
            failures += 1
            # fail at the first refusal of every server rather than retrying forever
            if not connected and failures >= len(self._urls) and not first_error.done():
                first_error.set_result(exc)
            elif connected:
                self._last_error = f"{type(exc).__name__}: {exc}"
                _log.debug("NATS error: %s", self._last_error)

        async def on_disconnected() -> None:
            if connected and not self._closed:
                _log.warning("event log disconnected from %s", self._urls)

        async def on_reconnected() -> None:
            self._stream_ready = False  # a server restarted without its store: recreate
            _log.warning("event log reconnected to %s", self._urls)

        task = asyncio.ensure_future(nc.connect(
            servers=self._urls,
            connect_timeout=self._connect_timeout_s,  # type: ignore[arg-type]
            reconnect_time_wait=self._reconnect_wait_s,  # type: ignore[arg-type]
            max_reconnect_attempts=-1,
            error_cb=on_error,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
            name="adfunnel-event-log",
        ))
        done, _ = await asyncio.wait({task, first_error}, timeout=self._connect_timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done and task.exception() is None:
            connected = True
            return nc
        task.cancel()
        try:
            await asyncio.wait_for(nc.close(), 0.5)
        except (*_TRANSIENT, asyncio.CancelledError):
            pass
        if task in done:
            reason = task.exception()
        elif first_error.done():
            reason = first_error.result()
        else:
            reason = TimeoutError(f"no answer in {self._connect_timeout_s:g} s")
        raise EventLogUnavailable(f"cannot connect: {type(reason).__name__}: {reason}")

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        subjects = [f"{self._prefix}.*"]
        try:
            info = await js.stream_info(self._stream)
        except nats.js.errors.NotFoundError:
            await js.add_stream(StreamConfig(
                name=self._stream,
                subjects=subjects,
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                discard=DiscardPolicy.OLD,
                duplicate_window=self._dedupe_window_s,
                max_age=self._max_age_s or 0,
                num_replicas=self._replicas,
            ))
            return
        if list(info.config.subjects or []) != subjects:
            raise EventLogError(
                f"stream {self._stream} exists with subjects {info.config.subjects}, "
                f"expected {subjects}"
            )

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
        for p in partitions:
            durable = consumer_durable(name, p)
            config = ConsumerConfig(
                durable_name=durable,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=ack_wait_s,
                max_deliver=-1,
                max_ack_pending=self._max_ack_pending,
                filter_subject=self.subject(p),
                deliver_policy=DeliverPolicy.ALL,
            )
            if from_seq is not None:
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await js.delete_consumer(self._stream, durable)
                if from_seq > 1:
                    config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
                    config.opt_start_seq = from_seq
                await js.add_consumer(self._stream, config)
                continue
            try:
                info = await js.consumer_info(self._stream, durable)
            except nats.js.errors.NotFoundError:
                await js.add_consumer(self._stream, config)
                continue
            if take_over and info.num_ack_pending:  # held by a reader that is gone
                floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
                await js.delete_consumer(self._stream, durable)
                if floor > 0:
                    config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
                    config.opt_start_seq = floor + 1
                await js.add_consumer(self._stream, config)
                continue
            if info.config.ack_wait != ack_wait_s:  # an update keeps the position
                info.config.ack_wait = ack_wait_s
                await js.add_consumer(self._stream, info.config)

    async def _disconnect(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()


class _PendingBatch:
    """A published batch waiting for the stream's answers."""

    __slots__ = ("done", "left")

    def __init__(self, left: int, done: asyncio.Future[None]) -> None:
        self.left = left
        self.done = done


class _PullRound:
    """Pull requests sent together, one per partition, and awaited together: a
    partition's request is answered when its arrivals reach its target (it had the
    whole batch asked) or when its status comes (it had fewer)."""

    __slots__ = ("full", "requests", "targets")

    def __init__(self, targets: dict[int, int]) -> None:
        #: partition -> the arrival count that completes its request, while unanswered
        self.targets = targets
        #: request id -> partition
        self.requests: dict[str, int] = {}
        #: partitions that had the whole batch asked (they may have more)
        self.full: list[int] = []

    def settle(self, partition: int, *, full: bool) -> bool:
        """Partition's request answered; True when that was the last one."""
        if self.targets.pop(partition, None) is not None and full:
            self.full.append(partition)
        return not self.targets


class JetStreamConsumer:
    """A reader of a durable consumer of a :class:`JetStreamEventLog`; see
    :class:`adfunnel.events.log.Consumer`.

    Pulls go to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<name>_p<partition>`` with replies
    on a private inbox. A fetch first asks each partition in turn (rotating the first)
    for what is there now (``no_wait``); if nothing is, it leaves one short lingering
    request (≤ 0.25 s) per partition and returns at the first message. A message that
    arrives on a lingering request after its fetch returned is kept for the next fetch;
    :meth:`close` hands such messages back to the server (NAK) for immediate redelivery.
    A message that cannot be decoded is terminated (never redelivered) and counted in
    :attr:`malformed`.
    """

    def __init__(self, log: JetStreamEventLog, name: str, partitions: tuple[int, ...]) -> None:
        self._log = log
        self._name = name
        self._partitions = partitions
        self._durables = {p: consumer_durable(name, p) for p in partitions}
        self._turn = 0
        self._closed = False
        self._buffer: deque[tuple[Msg, int]] = deque()  # (message, its partition)
        self._arrivals = dict.fromkeys(partitions, 0)
        self._statuses: dict[str, str] = {}  # request id → status code, while awaited
        self._awaited: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._round: _PullRound | None = None  # the pull requests awaited together now
        self._ids = itertools.count(1)
        self._inbox = ""
        self._sub: Any = None
        self._linger_until = 0.0
        self._terminate: list[str] = []  # ack subjects of undecodable messages
        #: messages that could not be decoded (terminated on the server)
        self.malformed = 0

    @property
    def name(self) -> str:
        """The durable consumer's name."""
        return self._name

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions it reads, ascending."""
        return self._partitions

    def fetch(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        """See :meth:`adfunnel.events.log.Consumer.fetch`."""
        check_fetch_args(max_messages, timeout_s)
        self._check_open()
        self._turn = (self._turn + 1) % len(self._partitions)
        return self._log._run(self._fetch(max_messages, timeout_s),
                              timeout_s + self._log._timeout_s)

    def ack(self, deliveries: Iterable[Delivery]) -> None:
        """See :meth:`adfunnel.events.log.Consumer.ack`: the acks go out together, then
        one flush (a round trip) confirms the server has them."""
        replies = [d.token for d in deliveries if isinstance(d.token, str)]
        if replies:
            self._check_open()
            self._log._run(self._send(replies, b"+ACK"), self._log._timeout_s)

    def ack_one(self, delivery: Delivery) -> None:
        """Acknowledge one delivery (what :meth:`Delivery.ack` calls)."""
        self.ack((delivery,))

    def close(self) -> None:
        """See :meth:`adfunnel.events.log.Consumer.close`. Waits for this consumer's
        lingering pull requests to end (≤ 0.25 s), then hands back every message it
        holds that no fetch returned."""
        if self._closed:
            return
        self._closed = True
        self._log._consumers.discard(self)
        # on failure the server redelivers what was held after ack_wait
        with contextlib.suppress(EventLogUnavailable):
            self._log._run(self._stop(), self._log._timeout_s + _LINGER_S)

    # --- on the loop --------------------------------------------------------------------------

    async def _start(self) -> None:
        nc, _ = await self._log._connected()
        self._wake = asyncio.Event()
        self._inbox = nc.new_inbox()
        self._sub = await nc.subscribe(f"{self._inbox}.*", cb=self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        """A message on the inbox: a delivery (buffered) or a pull's status. While a
        round of pulls is awaited the waiter is woken once, when the round is answered;
        otherwise at every message."""
        headers = msg.headers
        status = headers.get(STATUS_HEADER) if headers else None
        rnd = self._round
        settled = False
        if status is None:
            p = _partition_of_subject(msg.subject)
            self._buffer.append((msg, p))
            arrivals = self._arrivals
            if p in arrivals:
                arrivals[p] = seen = arrivals[p] + 1
                if rnd is not None and rnd.targets.get(p) == seen:
                    settled = rnd.settle(p, full=True)
        elif status != "100":  # 100: idle heartbeat
            request = msg.subject.rsplit(".", 1)[-1]
            if request in self._awaited:
                self._statuses[request] = status
            if rnd is not None and (p := rnd.requests.get(request)) is not None:
                settled = rnd.settle(p, full=False)
            if status not in ("404", "408"):
                description = headers.get("Description", "") if headers else ""
                _log.warning("consumer %s: pull answered %s %s", self._name, status, description)
        if rnd is None or settled:
            assert self._wake is not None
            self._wake.set()

    async def _fetch(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        nc, _ = await self._log._connected()
        out = self._take(max_messages)
        if len(out) < max_messages:
            out += await self._pull_now(nc, max_messages - len(out))
        while not out and loop.time() < deadline - 0.005:
            out = await self._pull_lingering(nc, max_messages, deadline)
        if self._terminate:
            terminate, self._terminate = self._terminate, []
            await self._send(terminate, b"+TERM", flush=False)
        out.sort(key=lambda d: d.seq)
        return out

    async def _pull_now(self, nc: NatsClient, need: int) -> list[Delivery]:
        """Up to ``need`` messages available now: the partitions are asked at once, each
        for its share of ``need`` (one round trip for all; the shares add up to
        ``need``), then those that had their whole share, and those not asked yet, for
        what is still missing, until ``need`` is met or no partition has more."""
        out: list[Delivery] = []
        n = len(self._partitions)
        asking = [self._partitions[(self._turn + k) % n] for k in range(n)]
        loop = asyncio.get_running_loop()
        while need > 0 and asking:
            each, extra = divmod(need, len(asking))
            shares = {p: each + (k < extra) for k, p in enumerate(asking[:need])}
            rnd = _PullRound({p: self._arrivals[p] + share for p, share in shares.items()})
            self._round = rnd
            try:
                for p, share in shares.items():
                    await self._request(nc, p, {"batch": share, "no_wait": True}, rnd)
                answered = await self._wait(lambda r=rnd: not r.targets,
                                            loop.time() + self._log._timeout_s)
            finally:
                self._round = None
            got = self._take(need)
            out += got
            need -= len(got)
            if not answered:
                if not out:
                    silent = ", ".join(self._durables[p] for p in rnd.targets)
                    raise EventLogUnavailable(
                        f"no answer to a pull on {silent} in {self._log._timeout_s:g} s")
                break
            asking = rnd.full + [p for p in asking if p not in shares]
        return out

    async def _pull_lingering(self, nc: NatsClient, max_messages: int, deadline: float
                              ) -> list[Delivery]:
        """One short lingering request per partition; the first message(s), or []."""
        loop = asyncio.get_running_loop()
        span = min(_LINGER_S, deadline - loop.time())
        expires_ns = int(span * 1e9)
        requests = []
        for p in self._partitions:
            requests.append(await self._request(nc, p, {"batch": 1, "expires": expires_ns}))
        end = loop.time() + span
        self._linger_until = max(self._linger_until, end)
        await self._wait(
            lambda: bool(self._buffer) or all(r in self._statuses for r in requests),
            end + 0.05,
        )
        for r in requests:
            self._awaited.discard(r)
            self._statuses.pop(r, None)
        out = self._take(max_messages)
        if out and len(out) < max_messages:
            out += await self._pull_now(nc, max_messages - len(out))
        return out

    async def _request(self, nc: NatsClient, partition: int, body: dict[str, Any],
                       rnd: _PullRound | None = None) -> str:
        """Send one pull request; its id. Its status is awaited in ``rnd`` when given,
        else in :attr:`_statuses`."""
        request = str(next(self._ids))
        if rnd is not None:
            rnd.requests[request] = partition
        else:
            self._awaited.add(request)
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{self._log._stream}.{self._durables[partition]}"
        await nc.publish(subject, json.dumps(body).encode(), reply=f"{self._inbox}.{request}")
        return request

    async def _wait(self, ready: Any, until: float) -> bool:
        """Wait until ``ready()`` or the loop time ``until``; whether it became ready."""
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while not ready():
            left = until - loop.time()
            if left <= 0:
                return False
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                return bool(ready())
        return True

    def _take(self, limit: int) -> list[Delivery]:
        out: list[Delivery] = []
        buffer = self._buffer
        while buffer and len(out) < limit:
            msg, partition = buffer.popleft()
            delivery = self._delivery(msg, partition)
            if delivery is not None:
                out.append(delivery)
            elif msg.reply:
                self.malformed += 1
                self._terminate.append(msg.reply)
        return out

    def _delivery(self, msg: Msg, partition: int) -> Delivery | None:
        reply = msg.reply
        try:
            seq, attempt = _ack_metadata(reply)
            event = decode(msg.data)
        except (MalformedEvent, ValueError) as exc:
            _log.error("consumer %s: dropping an undecodable message on %s: %s",
                       self._name, msg.subject, exc)
            return None
        return Delivery(event, seq, partition, attempt, self.ack_one, reply)

    async def _send(self, replies: list[str], verb: bytes, flush: bool = True) -> None:
        """Publish ``verb`` to every reply subject, then (``flush``) wait for the
        server's PONG: it has them all.

        While connected the PUB commands go to nats-py's outgoing buffer as one block
        (its ``_send_command``, what ``publish`` calls for each; nats-py is pinned): a
        publish per ack costs more than the rest of reading an event."""
        nc, _ = await self._log._connected()
        send = getattr(nc, "_send_command", None)
        if send is not None and nc.is_connected and not nc.is_draining_pubs:
            tail = f" {len(verb)}\r\n{verb.decode()}\r\n"
            await send("".join([f"PUB {reply}{tail}" for reply in replies]).encode())
            if not flush:
                await nc._flush_pending()
        else:
            for reply in replies:
                await nc.publish(reply, verb)
        if flush:
            await nc.flush(timeout=self._log._timeout_s)  # type: ignore[arg-type]

    async def _stop(self) -> None:
        loop = asyncio.get_running_loop()
        left = self._linger_until - loop.time()
        if left > 0:
            await asyncio.sleep(left + 0.05)
        held = [m.reply for m, _ in self._buffer if m.reply]
        self._buffer.clear()
        if self._sub is not None:
            with contextlib.suppress(*_TRANSIENT):
                await self._sub.unsubscribe()
        if held:
            await self._send(held, b"-NAK")

    def _check_open(self) -> None:
        if self._closed:
            raise EventLogUnavailable(f"consumer {self._name!r} is closed")


def consumer_durable(name: str, partition: int) -> str:
    """The JetStream durable name of consumer ``name`` on ``partition``."""
    return f"{name}_p{partition}"


def _partition_of_subject(subject: str) -> int:
    tail = subject.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _ack_metadata(reply: str | None) -> tuple[int, int]:
    """(stream sequence, delivery count) from a JetStream ack subject.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` or, from
    newer servers, ``$JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>…``.

    Raises:
        ValueError: not an ack subject.
    """
    tokens = (reply or "").split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        raise ValueError(f"not a JetStream ack subject: {reply!r:.120}")
    base = 2 if len(tokens) == 9 else 4
    return int(tokens[base + 3]), int(tokens[base + 2])


async def _mapped(coro: Coroutine[Any, Any, T]) -> T:
    """``coro``'s result, with nats-py failures turned into the log's errors."""
    try:
        return await coro
    except EventLogError:
        raise
    except nats.js.errors.BadRequestError as exc:
        raise EventLogError(f"JetStream refused the request: {exc}") from exc
    except _TRANSIENT as exc:
        raise EventLogUnavailable(f"{type(exc).__name__}: {exc}") from exc



def probe(url: str, timeout_s: float = 2.0) -> None:
    """Connect once to the NATS servers of ``url`` (comma-separated) and close: the
    start-up check of a process that needs its event log. It stops at the first refusal
    of every server (nats-py itself would retry forever); nothing is logged.

    Raises:
        EventLogUnavailable: no server answered within ``timeout_s``.
    """
    servers = url.split(",")

    async def attempt() -> BaseException | None:
        nc = NatsClient()
        failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        errors: list[BaseException] = []

        async def on_error(exc: BaseException) -> None:
            errors.append(exc)
            if len(errors) >= len(servers) and not failed.done():
                failed.set_result(exc)

        task = asyncio.ensure_future(nc.connect(
            servers=servers, connect_timeout=timeout_s,  # type: ignore[arg-type]
            allow_reconnect=False, max_reconnect_attempts=0, error_cb=on_error))
        done, _ = await asyncio.wait({task, failed}, timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done and task.exception() is None:
            await nc.close()
            return None
        task.cancel()
        with contextlib.suppress(*_TRANSIENT, asyncio.CancelledError):
            await asyncio.wait_for(nc.close(), 0.5)
        if task in done:
            return task.exception()
        return failed.result() if failed.done() else TimeoutError(f"no answer in {timeout_s:g} s")

    reason = asyncio.run(attempt())
    if reason is not None:
        raise EventLogUnavailable(f"cannot connect: {type(reason).__name__}: {reason}")
