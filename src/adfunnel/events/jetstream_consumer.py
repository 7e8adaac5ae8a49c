"""Reading the JetStream event log: the durable pull consumers per partition, and the reader.

A durable consumer ``name`` over partitions P is one durable pull consumer per
partition, ``<name>_p<partition>`` (explicit ack, ``ack_wait``, unlimited
redeliveries), so it runs on NATS servers before 2.10 (no multi-subject filters) and
partitions can move between aggregators one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from prometheus_client import Counter

from adfunnel.events.jetstream_async import STATUS_HEADER
from adfunnel.events.jetstream_connection import TRANSIENT, JetStreamConnection
from adfunnel.events.log import ConsumerBase, Delivery, EventLogUnavailable
from adfunnel.events.model import MalformedEvent, decode

_log = logging.getLogger(__name__)

#: Messages of the log no reader could decode (terminated, never billed): a process
#: total, on ``/metrics`` where the reader runs inside a server (each is logged too).
MALFORMED = Counter("adfunnel_events_malformed_total",
                    "Event log messages that could not be decoded (terminated, never billed)")

#: A lingering pull request lasts at most this long, so a consumer closed while one is
#: open waits at most this long for it before handing its messages back.
_LINGER_S = 0.25


def consumer_durable(name: str, partition: int) -> str:
    """The JetStream durable name of consumer ``name`` on ``partition``."""
    return f"{name}_p{partition}"


async def setup_durables(
    js: JetStreamContext, stream: str, subject: Callable[[int], str], max_ack_pending: int,
    name: str, partitions: tuple[int, ...], ack_wait_s: float, from_seq: int | None,
    take_over: bool = False,
) -> None:
    """Create, reposition or update the durable pull consumers ``<name>_p<partition>``
    of ``stream`` (see :meth:`~adfunnel.events.jetstream_log.JetStreamEventLog.consumer`)."""
    for p in partitions:
        durable = consumer_durable(name, p)
        config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ack_wait_s,
            max_deliver=-1,
            max_ack_pending=max_ack_pending,
            filter_subject=subject(p),
            deliver_policy=DeliverPolicy.ALL,
        )
        if from_seq is not None:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_consumer(stream, durable)
            if from_seq > 1:
                config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
                config.opt_start_seq = from_seq
            await js.add_consumer(stream, config)
            continue
        try:
            info = await js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            await js.add_consumer(stream, config)
            continue
        if take_over and info.num_ack_pending:  # held by a reader that is gone
            floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
            await js.delete_consumer(stream, durable)
            if floor > 0:
                config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
                config.opt_start_seq = floor + 1
            await js.add_consumer(stream, config)
            continue
        if info.config.ack_wait != ack_wait_s:  # an update keeps the position
            info.config.ack_wait = ack_wait_s
            await js.add_consumer(stream, info.config)


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


class JetStreamConsumer(ConsumerBase):
    """A reader of a durable consumer of a
    :class:`~adfunnel.events.jetstream_log.JetStreamEventLog`; see
    :class:`adfunnel.events.log.Consumer`.

    Pulls go to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<name>_p<partition>`` with replies
    on a private inbox. A fetch first asks each partition in turn (rotating the first)
    for what is there now (``no_wait``); if nothing is, it leaves one short lingering
    request (≤ 0.25 s) per partition and returns at the first message. A message that
    arrives on a lingering request after its fetch returned is kept for the next fetch;
    :meth:`close` hands such messages back to the server (NAK) for immediate redelivery.
    A message that cannot be decoded is terminated (never redelivered) and counted in
    :attr:`malformed`.

    ``on_close`` is called once with this reader when it closes (its log forgets it).
    """

    def __init__(self, log: JetStreamConnection, name: str, partitions: tuple[int, ...],
                 on_close: Callable[[JetStreamConsumer], None]) -> None:
        super().__init__(name, partitions)
        self._log = log
        self._on_close = on_close
        self._durables = {p: consumer_durable(name, p) for p in partitions}
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

    def fetch(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        """See :meth:`adfunnel.events.log.Consumer.fetch`."""
        self._next_fetch(max_messages, timeout_s)
        return self._log._run(self._fetch(max_messages, timeout_s),
                              timeout_s + self._log._timeout_s)

    def ack(self, deliveries: Iterable[Delivery]) -> None:
        """See :meth:`adfunnel.events.log.Consumer.ack`: the acks go out together, then
        one flush (a round trip) confirms the server has them."""
        replies = [d.token for d in deliveries if isinstance(d.token, str)]
        if replies:
            self._check_open()
            self._log._run(self._send(replies, b"+ACK"), self._log._timeout_s)

    def close(self) -> None:
        """See :meth:`adfunnel.events.log.Consumer.close`. Waits for this consumer's
        lingering pull requests to end (≤ 0.25 s), then hands back every message it
        holds that no fetch returned."""
        if self._closed:
            return
        self._closed = True
        self._on_close(self)
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
                MALFORMED.inc()
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
            with contextlib.suppress(*TRANSIENT):
                await self._sub.unsubscribe()
        if held:
            await self._send(held, b"-NAK")


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
