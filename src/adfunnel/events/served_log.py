"""The served log: one record per committed ad decision, for the click model to learn
from (DESIGN.md §Events and billing; issue 8, "Served log").

Shape of the plane::

    ServedLog.record(source)              # request path: O(1), never blocks, may drop
        └─ bounded queue ─▶ writer thread ─▶ raw/YYYY-MM-DD/HH.<writer>.jsonl (append-only)
    compactor.compact(...)                # closed hours ─▶ parquet/date=…/hour=…/part-0.parquet
    query.query(...) / query.join_served_with_billed(...)   # DuckDB over the Parquet files

``record`` takes the time from the injected clock and puts one tuple on a bounded queue;
everything else (building the :class:`ServedRecord` from its :class:`RecordSource`, which
hashes the user key, JSON encoding, file I/O) happens on the writer thread. When the
queue is full the record is dropped and counted (:attr:`ServedLog.dropped` and the
Prometheus counter ``adfunnel_served_log_dropped_total{reason}``): the answer is never
delayed for the log.

Raw files are newline-delimited JSON (msgspec), one :class:`ServedRecord` per line,
filed by the record's own time (UTC hour), one file per writer and hour, so several
server processes can share a directory without sharing a file. A line is written
whole or, after a crash, left as a torn tail that the compactor skips; a writer that
reopens a file ending in a torn line starts a new line first (the files:
:mod:`adfunnel.events.served_files`).

The user key is never stored: only ``HMAC-SHA256(salt, key)`` in hex (``user_hash``).

This module knows records, not decisions: the serving plane builds a record from its
decision (:mod:`adfunnel.serving.served_record`), and imports the event plane, not the
reverse.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import msgspec
from prometheus_client import Counter

from adfunnel.clock import Clock
from adfunnel.events.served_files import RawFiles
from adfunnel.events.served_schema import ServedRecord, hash_user_key

log = logging.getLogger(__name__)

#: Default bound of the record queue (records waiting for the writer thread).
DEFAULT_MAX_QUEUE = 10_000
#: Default number of per-candidate rejections kept per record (explain decisions).
DEFAULT_MAX_REJECTIONS = 100
#: Most records the writer takes from the queue per write.
_BATCH = 512
#: Reasons of ``adfunnel_served_log_dropped_total``.
QUEUE_FULL = "queue_full"
CLOSED = "closed"
WRITE_ERROR = "write_error"

DROPPED = Counter(
    "adfunnel_served_log_dropped_total",
    "Served-log records dropped instead of delaying an answer, by reason "
    "(queue_full, closed, write_error)",
    ["reason"],
)
_WRITER_ID = re.compile(r"[^A-Za-z0-9_-]+")


_encoder = msgspec.json.Encoder()


class RecordSource(Protocol):
    """What the request path queues: a record to build later, on the writer thread (the
    serving plane's :class:`~adfunnel.serving.served_record.DecisionSource`)."""

    @property
    def request_id(self) -> str:
        """The request id (named in the log when the record cannot be built)."""
        ...

    def build(self, time_s: float, salt: bytes, max_rejections: int) -> ServedRecord:
        """The record at ``time_s``: the user key hashed under ``salt``
        (:func:`hash_user_key`), at most ``max_rejections`` per-candidate rejections."""
        ...


class _Pending(NamedTuple):
    time_s: float
    source: RecordSource


class _Flush(NamedTuple):
    done: threading.Event


_STOP = object()


class ServedLog:
    """Asynchronous, bounded writer of :class:`ServedRecord` lines under ``directory``.

    ``clock`` gives each record its time (never the system clock); ``salt`` keys the
    user-key hash (non-empty bytes, from settings, kept secret like a token key);
    ``max_queue`` bounds the records waiting for the writer (≥ 1); ``max_rejections``
    bounds the per-candidate rejections kept per record; ``writer_id`` names this
    writer's files (default: host, process id and a random suffix; characters outside
    ``[A-Za-z0-9_-]`` are replaced).

    Thread-safe: any thread may call :meth:`record`, :meth:`flush` and :meth:`close`.
    The writer thread starts on construction; :meth:`close` drains and stops it.

    Counters (read at any time): ``dropped`` (records not written, every reason),
    ``written`` (lines written), ``write_errors`` (failed writes; their records count
    as dropped).

    Raises:
        ValueError: on construction, for an empty salt or ``max_queue`` < 1.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        clock: Clock,
        *,
        salt: bytes,
        max_queue: int = DEFAULT_MAX_QUEUE,
        max_rejections: int = DEFAULT_MAX_REJECTIONS,
        writer_id: str | None = None,
    ) -> None:
        if not salt:
            raise ValueError("salt must be non-empty bytes")
        if max_queue < 1:
            raise ValueError(f"max_queue must be at least 1, got {max_queue}")
        self.directory = Path(directory)
        self.clock = clock
        self.max_queue = max_queue
        self.max_rejections = max_rejections
        default_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.writer_id = _WRITER_ID.sub("_", writer_id or default_id)
        self._salt = salt
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._count_lock = threading.Lock()
        self._dropped = 0
        self._written = 0
        self._write_errors = 0
        self._closed = False
        self._files = RawFiles(self.directory, self.writer_id)
        # test hook (:meth:`paused`): the writer parks while ``_pause`` is set
        self._pause_cond = threading.Condition()
        self._pause = False
        self._parked = False
        self._thread = threading.Thread(target=self._run, name="served-log-writer", daemon=True)
        self._thread.start()

    # -- request path -------------------------------------------------------------

    def record(self, source: RecordSource) -> bool:
        """Queue the record of ``source`` (a committed decision) for the log, at the
        clock's time now; never blocks or raises for a full queue. The record is built
        later, on the writer thread.

        Returns True when queued, False when dropped (queue full, or the log closed).
        """
        if self._closed:
            self._drop(CLOSED)
            return False
        item = _Pending(self.clock.now().timestamp(), source)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._drop(QUEUE_FULL)
            return False
        return True

    def _drop(self, reason: str, n: int = 1) -> None:
        with self._count_lock:
            self._dropped += n
        DROPPED.labels(reason).inc(n)

    # -- control ------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        """Records not written since start (queue full, closed, write errors)."""
        return self._dropped

    @property
    def written(self) -> int:
        """Records written to raw files since start."""
        return self._written

    @property
    def write_errors(self) -> int:
        """Writes that failed (I/O errors, records that would not encode)."""
        return self._write_errors

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every record queued before this call is written to its raw file
        (written and flushed to the operating system, not fsync'd).

        Raises:
            TimeoutError: not done within ``timeout_s`` seconds (a stalled or paused
                writer, a full queue).
            RuntimeError: the log is closed.
        """
        if self._closed:
            raise RuntimeError("the served log is closed")
        done = threading.Event()
        try:
            self._queue.put(_Flush(done), timeout=timeout_s)
        except queue.Full:
            raise TimeoutError(f"served log: queue still full after {timeout_s} s") from None
        if not done.wait(timeout_s):
            raise TimeoutError(f"served log: not flushed within {timeout_s} s")

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop accepting records, write every queued one, close the files and stop the
        writer thread. Idempotent; records offered afterwards are dropped (``closed``).

        Raises:
            TimeoutError: the writer did not finish within ``timeout_s`` seconds.
        """
        if self._closed:
            return
        self._closed = True
        self._set_pause(False)
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            raise TimeoutError(f"served log: queue still full after {timeout_s} s") from None
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"served log: writer still running after {timeout_s} s")

    @contextlib.contextmanager
    def paused(self, timeout_s: float = 10.0) -> Iterator[None]:
        """Test hook: hold the writer thread still inside the block.

        On entry it waits until the writer has finished what it holds and parked, so
        within the block the queue only fills: records beyond ``max_queue`` are dropped
        (``queue_full``). On exit the writer resumes.

        Raises:
            TimeoutError: the writer did not park within ``timeout_s`` seconds.
        """
        self._set_pause(True)
        with self._pause_cond:
            if not self._pause_cond.wait_for(lambda: self._parked, timeout_s):
                self._pause = False
                self._pause_cond.notify_all()
                raise TimeoutError("served log: the writer did not park")
        try:
            yield
        finally:
            self._set_pause(False)

    def user_hash(self, key: str) -> str:
        """The ``user_hash`` this log writes for user ``key``."""
        return hash_user_key(key, self._salt) or ""

    @contextlib.contextmanager
    def released(self, timeout_s: float = 10.0) -> Iterator[None]:
        """Hold the writer still with every record queued before this call written and
        its raw files closed, so that the block may rewrite them (an erasure); on exit
        the writer resumes and reopens its files for appending.

        Raises:
            TimeoutError: the writer did not flush or park within ``timeout_s`` seconds.
        """
        self.flush(timeout_s)
        with self.paused(timeout_s):
            self._files.close_all()  # the writer is parked: its files are ours to close
            yield

    def _set_pause(self, on: bool) -> None:
        with self._pause_cond:
            self._pause = on
            self._pause_cond.notify_all()

    # -- writer thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._pause_cond:
                    while self._pause:
                        self._parked = True
                        self._pause_cond.notify_all()
                        self._pause_cond.wait()
                    self._parked = False
                try:
                    first = self._queue.get(timeout=0.05)
                except queue.Empty:
                    continue
                batch = [first]
                while len(batch) < _BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if self._handle(batch):
                    return
        finally:
            self._files.close_all()
            self._drop_left()

    def _drop_left(self) -> None:
        """Count records queued after the stop marker (a race with :meth:`close`)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Pending):
                self._drop(CLOSED)
            elif isinstance(item, _Flush):
                item.done.set()

    def _handle(self, batch: list[Any]) -> bool:
        """Write ``batch`` in order; True when it held the stop marker."""
        pending: list[_Pending] = []
        for item in batch:
            if isinstance(item, _Pending):
                pending.append(item)
                continue
            self._write(pending)
            pending = []
            if item is _STOP:
                return True
            self._files.flush_all()
            item.done.set()
        self._write(pending)
        return False

    def _write(self, items: list[_Pending]) -> None:
        if not items:
            return
        lines: dict[Path, list[bytes]] = {}
        for it in items:
            try:
                rec = it.source.build(it.time_s, self._salt, self.max_rejections)
                line = _encoder.encode(rec) + b"\n"
            except Exception:  # a record that cannot be built must not stop the writer
                log.exception("served log: record %r not encodable", it.source.request_id)
                self._write_errors += 1
                self._drop(WRITE_ERROR)
                continue
            path = self._files.path_of(it.time_s)
            lines.setdefault(path, []).append(line)
        for path, chunk in lines.items():
            try:
                f = self._files.file(path)
                f.write(b"".join(chunk))
                f.flush()
            except OSError:
                log.exception("served log: writing %s failed", path)
                self._write_errors += 1
                self._drop(WRITE_ERROR, len(chunk))
                self._files.forget(path)
                continue
            self._written += len(chunk)
