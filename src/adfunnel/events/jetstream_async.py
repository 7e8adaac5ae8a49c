"""Publishing to JetStream from the caller's own asyncio loop: the tracker's fast path.

:class:`~adfunnel.events.jetstream_log.JetStreamEventLog` runs nats-py on a private
loop in a thread of its own, behind a synchronous API. A beacon handled on the HTTP
server's loop that went through it would cross two threads and back (the publisher's
flusher, the log's loop) and pay for every hand-over of the interpreter lock. A
:class:`LoopPublisher` instead keeps a second connection ON the server's loop: a beacon
writes its message (with the same ``Nats-Msg-Id``) into that connection's buffer and
awaits the stream's answer there; nats-py's own flusher sends the buffered messages of
many concurrent beacons in one write.

It is only a fast path: :meth:`LoopPublisher.publish` raises
:class:`~adfunnel.events.log.EventLogUnavailable` whenever it cannot promise the event
is stored (not connected yet, disconnected, refused, no answer in ``timeout_s``), and
the caller (:meth:`adfunnel.events.publisher.EventPublisher.append_async`) then takes
the slow path, which publishes again or spools. A publish that did reach the stream
before the failure was noticed is dropped there as a duplicate of its msg id.

Waiting here is network time (the loop's clock), never domain time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from adfunnel.events.log import EventLogUnavailable
from adfunnel.events.model import Event, encode

_log = logging.getLogger(__name__)

MSG_ID_HEADER = "Nats-Msg-Id"
STATUS_HEADER = "Status"
#: A publish answer for a duplicate: nats-server writes ``"duplicate": true`` (a space).
_DUPLICATE = re.compile(rb'"duplicate"\s*:\s*true')
def publish_answer(msg: Msg) -> bool:
    """Read the stream's answer to one publish: True when it was a duplicate of a stored
    msg id (dropped, but stored all the same), False when newly stored.

    Raises:
        EventLogUnavailable: the stream refused it (``{"error":…}``, or a status such as
            503: no stream listens on the subject).
    """
    status = msg.headers.get(STATUS_HEADER) if msg.headers else None
    if status is not None or b'"error"' in msg.data:
        detail = f"status {status}" if status else msg.data.decode("utf-8", "replace")
        raise EventLogUnavailable(f"publish refused: {detail:.300}")
    return _DUPLICATE.search(msg.data) is not None


#: Seconds between sweeps that fail publishes left unanswered past ``timeout_s``.
_SWEEP_S = 0.25


class LoopPublisher:
    """Publishes events to JetStream on the running loop it was started on.

    Args:
        urls: the NATS servers.
        subject_of: the subject an event is published on (its partition's).
        timeout_s: the longest a publish waits for the stream's answer (> 0).
        connect_timeout_s: the longest the connection attempt waits.

    Not thread-safe: every call must come from the loop :meth:`start` ran on.
    """

    def __init__(self, urls: list[str], subject_of: Callable[[Event], str], *,
                 timeout_s: float = 2.0, connect_timeout_s: float = 2.0) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self._urls = urls
        self._subject_of = subject_of
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._nc: NatsClient | None = None
        self._inbox = ""
        self._next = 0
        #: reply number -> (the waiting future, loop time it gives up)
        self._waiting: dict[int, tuple[asyncio.Future[None], float]] = {}
        self._task: asyncio.Task[None] | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        #: publishes the stream answered as duplicates
        self.duplicates = 0

    def start(self) -> None:
        """Begin connecting in the background, on the running loop (once)."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._connect())

    @property
    def ready(self) -> bool:
        """True while connected: :meth:`publish` may succeed."""
        nc = self._nc
        return nc is not None and nc.is_connected and not self._closed

    async def publish(self, event: Event) -> None:
        """Publish ``event`` and return once the stream stored it (a duplicate of its
        msg id counts as stored).

        Raises:
            EventLogUnavailable: not connected, refused, or no answer in ``timeout_s``
                (the event may or may not be stored: publish it again elsewhere).
        """
        nc = self._nc
        if nc is None or not nc.is_connected or self._closed:
            raise EventLogUnavailable("the loop's JetStream connection is not up")
        loop = asyncio.get_running_loop()
        n = self._next = self._next + 1
        done: asyncio.Future[None] = loop.create_future()
        self._waiting[n] = (done, loop.time() + self._timeout_s)
        try:
            await nc.publish(self._subject_of(event), encode(event),
                             reply=f"{self._inbox}.{n}", headers={MSG_ID_HEADER: event.msg_id})
        except Exception as exc:  # nats-py raises its own errors and OSError
            self._waiting.pop(n, None)
            raise EventLogUnavailable(f"publish failed: {type(exc).__name__}: {exc}") from exc
        await done

    async def aclose(self) -> None:
        """Fail what still waits and close the connection."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._fail_all("the publisher closed")
        if self._task is not None and not self._task.done():
            self._task.cancel()
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), self._timeout_s)

    # --- on the loop ---------------------------------------------------------------------

    async def _connect(self) -> None:
        nc = NatsClient()

        async def on_error(exc: BaseException) -> None:
            _log.debug("loop publisher: %s: %s", type(exc).__name__, exc)

        async def on_disconnected() -> None:
            self._fail_all("disconnected")  # their answers will not come on this link

        try:
            await nc.connect(servers=self._urls,
                             connect_timeout=self._connect_timeout_s,  # type: ignore[arg-type]
                             max_reconnect_attempts=-1, error_cb=on_error,
                             disconnected_cb=on_disconnected,
                             name="adfunnel-tracker-fast-path")
            self._inbox = nc.new_inbox()
            await nc.subscribe(f"{self._inbox}.*", cb=self._on_answer)
        except Exception as exc:  # the slow path serves meanwhile; it has its own retry
            _log.warning("loop publisher not connected (%s: %s); beacons take the slow path",
                         type(exc).__name__, exc)
            with contextlib.suppress(Exception):
                await nc.close()
            return
        if self._closed:
            await nc.close()
            return
        self._nc = nc
        self._sweep()

    async def _on_answer(self, msg: Msg) -> None:
        """The stream's answer to one publish: ``{"stream":…,"seq":…}``, an
        ``{"error":…}``, or a status (503: no stream listens on the subject)."""
        tail = msg.subject.rpartition(".")[2]
        entry = self._waiting.pop(int(tail), None) if tail.isdigit() else None
        if entry is None or entry[0].done():
            return  # answered after it gave up
        done = entry[0]
        try:
            if publish_answer(msg):
                self.duplicates += 1
        except EventLogUnavailable as exc:
            done.set_exception(exc)
            return
        done.set_result(None)

    def _sweep(self) -> None:
        """Fail publishes past their time; runs every :data:`_SWEEP_S` while open."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = [n for n, (_, until) in self._waiting.items() if until <= now]
        for n in late:
            done, _ = self._waiting.pop(n)
            if not done.done():
                done.set_exception(EventLogUnavailable(
                    f"no answer from the stream in {self._timeout_s:g} s"))
        self._sweeper = loop.call_later(_SWEEP_S, self._sweep)

    def _fail_all(self, why: str) -> None:
        waiting, self._waiting = self._waiting, {}
        for done, _ in waiting.values():
            if not done.done():
                done.set_exception(EventLogUnavailable(why))
