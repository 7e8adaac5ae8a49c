"""The connection under the JetStream event log: a private loop, the bridge to it, the stream.

nats-py is asyncio; :class:`JetStreamConnection` keeps one private event loop in a daemon
thread and offers synchronous calls on top of it (``asyncio.run_coroutine_threadsafe``
with timeouts). All waiting here is network time (``time.monotonic`` / the loop's clock),
never domain time.

Connection: the first connect fails fast (a refused connection raises
:class:`~adfunnel.events.log.EventLogUnavailable` at once, an unanswered one after
``connect_timeout_s``); after a failure the next attempt waits ``reconnect_wait_s``,
and calls in between fail at once. Once connected, nats-py reconnects by itself;
while it is disconnected every call fails at once instead of queueing, so a tracker
can spool without waiting.

The stream (file storage, over the subjects ``<subject_prefix>.*``, with its duplicate
window) is created by the first connection that finds it missing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from adfunnel.events.log import EventLogError, EventLogUnavailable
from adfunnel.observability.logs import shown_url

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Extra seconds the synchronous side waits beyond a call's own timeout.
_BRIDGE_MARGIN_S = 1.0

#: nats-py failures that mean "the log did not do it" (connection, timeout, server).
TRANSIENT: tuple[type[BaseException], ...] = (
    nats.errors.Error,
    OSError,  # TimeoutError (= asyncio.TimeoutError) included
)


class JetStreamConnection:
    """One connection to NATS JetStream and one stream, used from synchronous code.

    Args (validated by the caller, :class:`~adfunnel.events.jetstream_log.JetStreamEventLog`):
        urls: the NATS servers.
        stream: the stream's name; created when missing.
        subject_prefix: the stream's subjects are ``<subject_prefix>.*``.
        dedupe_window_s, max_age_s, replicas: a new stream's duplicate window, age
            limit (None: none) and replica count.
        timeout_s: the longest a call waits.
        connect_timeout_s: the longest a connection attempt waits.
        reconnect_wait_s: after a failed connect, calls fail at once for this long.

    An unreachable server at construction is not an error: the connection is tried
    again by the first call (after ``reconnect_wait_s``).
    """

    def __init__(
        self,
        urls: list[str],
        *,
        stream: str,
        subject_prefix: str,
        dedupe_window_s: float,
        max_age_s: float | None,
        replicas: int,
        timeout_s: float,
        connect_timeout_s: float,
        reconnect_wait_s: float,
    ) -> None:
        self._urls = urls
        self._shown = shown_url(",".join(urls))  # for messages: no credentials
        self._stream = stream
        self._prefix = subject_prefix
        self._dedupe_window_s = dedupe_window_s
        self._max_age_s = max_age_s
        self._replicas = replicas
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_wait_s = reconnect_wait_s
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._stream_ready = False
        self._next_attempt = 0.0
        self._last_error = "not connected yet"
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._connect_lock: asyncio.Lock | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"nats-{stream}", daemon=True
        )
        self._thread.start()
        try:
            self._run(self._connected(), self._connect_timeout_s + self._timeout_s)
        except EventLogUnavailable as exc:
            _log.warning("event log %s not reachable yet: %s", self._shown, exc)
        except BaseException:
            self.close()
            raise

    @property
    def stream(self) -> str:
        """The stream's name."""
        return self._stream

    def subject(self, partition: int) -> str:
        """The subject of ``partition``: ``<subject_prefix>.<partition>``."""
        return f"{self._prefix}.{partition}"

    def close(self) -> None:
        """Close the connection and stop the loop's thread; later calls raise
        :class:`EventLogUnavailable`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(self._disconnect(), self._loop)
            try:
                fut.result(self._timeout_s + _BRIDGE_MARGIN_S)
            except (concurrent.futures.TimeoutError, *TRANSIENT):
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
        fut = asyncio.run_coroutine_threadsafe(mapped(coro), self._loop)
        try:
            return fut.result(timeout_s + _BRIDGE_MARGIN_S)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise EventLogUnavailable(f"no answer from {self._shown} in {timeout_s:g} s") from None

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
                raise EventLogUnavailable(f"reconnecting to {self._shown}: {self._last_error}")
            if self._nc is None or self._nc.is_closed:
                if time.monotonic() < self._next_attempt:
                    raise EventLogUnavailable(f"not connected to {self._shown}: {self._last_error}")
                try:
                    self._nc = await self._connect()
                except EventLogUnavailable as exc:
                    self._last_error = str(exc)
                    self._next_attempt = time.monotonic() + self._reconnect_wait_s
                    raise
                self._js = self._nc.jetstream(timeout=self._timeout_s)
                self._stream_ready = False
                self._connection_replaced()
            assert self._nc is not None and self._js is not None
            if not self._nc.is_connected:
                raise EventLogUnavailable(f"not connected to {self._shown}: {self._last_error}")
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
                _log.warning("event log disconnected from %s", self._shown)

        async def on_reconnected() -> None:
            self._stream_ready = False  # a server restarted without its store: recreate
            _log.warning("event log reconnected to %s", self._shown)

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
        except (*TRANSIENT, asyncio.CancelledError):
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

    async def _disconnect(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    def _connection_replaced(self) -> None:
        """Called on the loop when a new connection replaces the old one: state kept
        per connection is forgotten here (a subclass's hook)."""


async def mapped(coro: Coroutine[Any, Any, T]) -> T:
    """``coro``'s result, with nats-py failures turned into the log's errors."""
    try:
        return await coro
    except EventLogError:
        raise
    except nats.js.errors.BadRequestError as exc:
        raise EventLogError(f"JetStream refused the request: {exc}") from exc
    except TRANSIENT as exc:
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
        with contextlib.suppress(*TRANSIENT, asyncio.CancelledError):
            await asyncio.wait_for(nc.close(), 0.5)
        if task in done:
            return task.exception()
        return failed.result() if failed.done() else TimeoutError(f"no answer in {timeout_s:g} s")

    reason = asyncio.run(attempt())
    if reason is not None:
        raise EventLogUnavailable(f"cannot connect: {type(reason).__name__}: {reason}")
