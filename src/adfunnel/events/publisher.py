"""The tracker's way into the event log: publish, or spool to disk while the log is down.

:meth:`EventPublisher.append` returns only once the event is stored — in the log, or
fsync'd in the spool (:mod:`adfunnel.events.spool`) — so a beacon acknowledged to its
client is never lost. Order is kept: while anything is spooled, new events join the
spool behind it, and a background thread publishes the spool in order when the log
answers again (the log's msg-id dedupe drops anything published twice by a crash
mid-drain).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from prometheus_client import Counter, Gauge

from adfunnel.events.jetstream_async import LoopPublisher
from adfunnel.events.log import EventLog, EventLogUnavailable
from adfunnel.events.model import Event
from adfunnel.events.spool import Spool
from adfunnel.events.spool_files import SpoolError

_log = logging.getLogger(__name__)

SPOOLED = Counter("adfunnel_events_spooled_total", "Events spooled while the log was down")
SPOOL_DEPTH = Gauge("adfunnel_events_spool_depth", "Events in the spool, not yet published")
FAST_PATH_FALLBACKS = Counter(
    "adfunnel_events_fast_path_fallbacks_total",
    "Events the loop's own JetStream connection could not promise stored (published again "
    "through the log's thread, or spooled)")
#: Seconds between attempts to publish the spool while the log is down.
DEFAULT_RETRY_S = 0.5
#: Most events one flusher round stores.
MAX_ROUND = 1_000


class EventRefused(Exception):
    """Neither the log nor the spool could store the event (the log is down and the
    spool is full, absent or failing): the client must not be acknowledged."""


class EventPublisher:
    """Appends events to ``log``, falling back to ``spool``; thread-safe.

    Args:
        log: the event log.
        spool: the on-disk spool (None: an unavailable log refuses the event).
        retry_s: seconds between drain attempts while events are spooled (network
            time, not domain time).
    """

    def __init__(self, log: EventLog, spool: Spool | None = None, *,
                 retry_s: float = DEFAULT_RETRY_S) -> None:
        self.log = log
        self.spool = spool
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending: list[tuple[Event, Future[None] | asyncio.Future[None]]] = []
        self._submitted = threading.Condition()
        self._closed = False
        self._fast: dict[asyncio.AbstractEventLoop, LoopPublisher] = {}
        self._make_fast = getattr(log, "loop_publisher", None)  # JetStream offers one
        self._flusher = threading.Thread(target=self._flush_loop, name="event-flusher",
                                         daemon=True)
        self._flusher.start()
        self._thread: threading.Thread | None = None
        if spool is not None:
            self._thread = threading.Thread(target=self._drain_loop, name="spool-drain",
                                            daemon=True)
            self._thread.start()
            if len(spool):
                self._wake.set()  # left over from a previous run

    def submit(self, event: Event) -> Future[None]:
        """Queue ``event`` for the next flusher round; the future completes once it is
        stored (log or spool), or fails with :class:`EventRefused`. Never blocks."""
        done: Future[None] = Future()
        with self._submitted:
            if self._closed:
                done.set_exception(EventRefused("the publisher is closed"))
                return done
            self._pending.append((event, done))
            self._submitted.notify()
        return done

    def submit_async(self, event: Event) -> asyncio.Future[None]:
        """:meth:`submit` for a coroutine on the running event loop: an asyncio future,
        completed from that loop (one wake-up of the loop per flusher round, however
        many of its beacons the round stored). Never blocks."""
        done = asyncio.get_running_loop().create_future()
        with self._submitted:
            if self._closed:
                done.set_exception(EventRefused("the publisher is closed"))
                return done
            self._pending.append((event, done))
            self._submitted.notify()
        return done

    async def append_async(self, event: Event) -> None:
        """Store ``event`` from a coroutine and return once it is stored (the tracker's
        way). On a log that offers a loop publisher (JetStream), while nothing is
        spooled, the event is published from the running loop itself
        (:mod:`adfunnel.events.jetstream_async`: no thread hand-over); when that cannot
        promise the event is stored, it takes :meth:`submit_async`'s path, which
        publishes again (deduplicated by msg id) or spools.

        Raises:
            EventRefused: the log is unavailable and the spool cannot take it.
        """
        fast = self._fast_path()
        if fast is not None and fast.ready and not self.spooled():
            try:
                await fast.publish(event)
            except EventLogUnavailable:
                FAST_PATH_FALLBACKS.inc()
            else:
                return
        await self.submit_async(event)

    def _fast_path(self) -> LoopPublisher | None:
        """The running loop's publisher (made and started on first use), or None when
        the log offers none."""
        make = self._make_fast
        if make is None or self._closed:
            return None
        loop = asyncio.get_running_loop()
        fast = self._fast.get(loop)
        if fast is None:
            fast = self._fast[loop] = make()
            fast.start()
        return fast

    async def aclose_fast_path(self) -> None:
        """Close the running loop's publisher, if one was made (before :meth:`close`,
        on the loop that used it); its duplicates stay counted."""
        fast = self._fast.get(asyncio.get_running_loop())
        if fast is not None:
            await fast.aclose()

    def append(self, event: Event) -> None:
        """Store ``event`` (see :meth:`submit`) and return once it is stored.

        Raises:
            EventRefused: the log is unavailable and the spool cannot take it.
        """
        self.submit(event).result()

    def _flush_loop(self) -> None:
        while True:
            with self._submitted:
                while not self._pending and not self._closed:
                    self._submitted.wait()
                if not self._pending:
                    return  # closed, and nothing left
                batch = self._pending[:MAX_ROUND]
                del self._pending[:MAX_ROUND]
            try:
                self._store([e for e, _ in batch])
            except EventRefused as exc:
                failure: BaseException | None = exc
            except Exception as exc:  # a bug must not leave beacons waiting forever
                _log.exception("storing events failed")
                failure = EventRefused(f"storing failed: {exc}")
            else:
                failure = None
            _complete([done for _, done in batch], failure)

    def _store(self, events: Sequence[Event]) -> None:
        """Publish ``events``, or spool them when the log is unavailable or events are
        already spooled (order is kept).

        Raises:
            EventRefused: the log is unavailable and the spool cannot take them.
        """
        spool = self.spool
        if spool is None or not len(spool):
            try:
                self.log.publish_many(events)
            except EventLogUnavailable as exc:
                if spool is None:
                    raise EventRefused(f"event log unavailable: {exc}") from None
            else:
                return
        try:
            spool.append_many(events)  # a partly published round is deduped by msg id
        except SpoolError as exc:
            raise EventRefused(f"event log unavailable and spool refused: {exc}") from None
        SPOOLED.inc(len(events))
        SPOOL_DEPTH.set(len(spool))
        self._wake.set()

    def duplicates(self) -> int:
        """Publishes the log answered as duplicates of a stored msg id (its dedupe
        window dropped them), on either path, since this publisher was made."""
        fast = sum(f.duplicates for f in list(self._fast.values()))
        return int(getattr(self.log, "duplicates", 0)) + fast

    def spooled(self) -> int:
        """Events waiting in the spool (0 without one)."""
        return len(self.spool) if self.spool is not None else 0

    def drain(self) -> int:
        """Publish the spool now, in order; the number published.

        Raises:
            EventLogUnavailable: the log is still down (what is left stays spooled).
        """
        if self.spool is None:
            return 0
        with self._lock:
            n = self.spool.drain(self.log.publish_many)
        SPOOL_DEPTH.set(len(self.spool))
        return n

    def close(self) -> None:
        """Store what was submitted, stop the drain thread (one last attempt first) and
        close the spool; later submissions are refused."""
        with self._submitted:
            self._closed = True
            self._submitted.notify()
        self._flusher.join(timeout=30)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.spool is not None:
            self.spool.close()

    def _drain_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.retry_s)
            self._wake.clear()
            if self.spool is None or not len(self.spool):
                continue
            try:
                self.drain()
            except EventLogUnavailable:
                self._wake.set()  # still down: try again after retry_s
                self._stop.wait(self.retry_s)
            except Exception:  # a drain bug must not kill the thread: log, retry later
                _log.exception("spool drain failed")
                self._stop.wait(self.retry_s)
        try:
            if self.spool is not None and len(self.spool):
                self.drain()
        except Exception:  # the spool keeps them for the next start
            _log.warning("events left in the spool at shutdown: %d", self.spooled())


def _complete(waiters: Sequence[Future[None] | asyncio.Future[None]],
              failure: BaseException | None) -> None:
    """Complete a round's waiters: thread futures here, asyncio futures on their own
    loop, one call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for done in waiters:
        if isinstance(done, asyncio.Future):
            by_loop.setdefault(done.get_loop(), []).append(done)
        elif failure is None:
            done.set_result(None)
        else:
            done.set_exception(failure)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, futures, failure)


def _settle(futures: list[asyncio.Future[None]], failure: BaseException | None) -> None:
    for done in futures:
        if done.done():  # cancelled: its client went away
            continue
        if failure is None:
            done.set_result(None)
        else:
            done.set_exception(failure)
