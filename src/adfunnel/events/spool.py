"""A bounded, fsync'd, append-only spool of events on local disk, for when the log is down.

The tracker appends here what it could not publish, and acknowledges the client only
after :meth:`Spool.append` returned: by then the event is on disk (fsync'd). When the
log answers again, :meth:`Spool.drain` publishes the spooled events in order and
removes what was published. A crash during a drain may publish some events twice;
the log's msg-id dedupe window drops the second copy.

On disk: one directory per spool, held by one process at a time, of segment files of
CRC-checked frames and a ``DRAINED`` mark (:mod:`adfunnel.events.spool_files`); reading
it back on open is :mod:`adfunnel.events.spool_recovery`.

fsync policy: every :meth:`Spool.append` / :meth:`Spool.append_many` call writes its
frames and fsyncs the segment before it returns (one fsync per call, so a caller
batching beacons pays one fsync per batch); a new segment, a deleted segment and the
``DRAINED`` mark (written to a temporary file, fsync'd, renamed) also fsync the
directory. A frame torn by a crash (short, or CRC mismatch) was never acknowledged;
reopening cuts the segment there.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from adfunnel.events.model import Event, MalformedEvent, decode, encode
from adfunnel.events.spool_files import (
    _DRAINED,
    _FRAME,
    _MAGIC,
    _SUFFIX,
    SpoolError,
    SpoolFull,
    SpoolLocked,
    _frame,
    _frame_end,
    _fsync_dir,
)
from adfunnel.events.spool_recovery import SpoolRecovery

_log = logging.getLogger(__name__)

_READ_BYTES = 1 << 20  # a drain reads at most this much of a segment per batch
#: Default size at which a new segment is started.
DEFAULT_SEGMENT_BYTES = 8 << 20


class Spool(SpoolRecovery):
    """An on-disk FIFO of events, bounded by ``max_bytes``; thread-safe.

    Args:
        directory: created if missing; reopening it later finds every event appended
            and not yet drained (also after a crash).
        max_bytes: the most bytes the segment files may take together (> 0).
        segment_bytes: a segment past this size is closed and a new one started, so
            drained space is given back a segment at a time.

    Raises:
        SpoolLocked: the directory is held by another open spool.
        SpoolError: the directory cannot be used, or ``DRAINED`` is unreadable.
        ValueError: ``max_bytes`` or ``segment_bytes`` < 1.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_bytes: int,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        if max_bytes < 1 or segment_bytes < 1:
            raise ValueError("max_bytes and segment_bytes must be >= 1")
        self._dir = Path(directory)
        self._max_bytes = max_bytes
        self._segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._closed = False
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SpoolError(f"cannot use spool directory {self._dir}: {exc}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise SpoolLocked(f"spool {self._dir} is open elsewhere") from None
        try:
            self._recover()
        except BaseException:
            self._release()
            raise

    # --- public ------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The spool's directory."""
        return self._dir

    @property
    def max_bytes(self) -> int:
        """The bound on the segment files' total size."""
        return self._max_bytes

    @property
    def bytes_used(self) -> int:
        """Bytes the segment files take now (drained parts included until their segment
        is removed)."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        """Events appended and not yet drained."""
        with self._lock:
            return self._count

    def append(self, event: Event) -> None:
        """Append one event; returns once it is fsync'd.

        Raises:
            SpoolFull: it does not fit under ``max_bytes`` (nothing written).
            SpoolError: an I/O error (nothing kept) or a closed spool.
        """
        self.append_many((event,))

    def append_many(self, events: Sequence[Event]) -> None:
        """Append ``events`` in order, all or none, with one fsync; returns once they
        are on disk.

        Raises:
            SpoolFull: they do not all fit under ``max_bytes`` (nothing written).
            SpoolError: an I/O error (nothing kept) or a closed spool.
        """
        if not events:
            return
        frames = b"".join(_frame(encode(e)) for e in events)
        with self._lock:
            self._check_open()
            new_segment = self._active is None or self._active_size >= self._segment_bytes
            need = len(frames) + (len(_MAGIC) if new_segment else 0)
            if self._bytes + need > self._max_bytes:
                raise SpoolFull(
                    f"spool {self._dir}: {need} more bytes would pass the bound "
                    f"({self._bytes} of {self._max_bytes} used)"
                )
            if new_segment:
                self._start_segment()
            self._write_synced(frames)
            self._bytes += len(frames)
            self._count += len(events)

    def drain(self, publish: Callable[[Sequence[Event]], None], batch_size: int = 500) -> int:
        """Publish every spooled event in order, in batches of up to ``batch_size``, and
        remove each batch once ``publish`` returned; the number published.

        Appends may go on meanwhile (they are drained too if they come before the end).
        A frame that no longer decodes as an event is skipped and logged (it cannot be
        published by anyone).

        Raises:
            Whatever ``publish`` raises (e.g. EventLogUnavailable): that batch and
            everything after it stay spooled, in order.
            SpoolError: an I/O error or a closed spool.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        published = 0
        with self._drain_lock:
            while True:
                with self._lock:
                    self._check_open()
                    payloads, end = self._read_batch(batch_size)
                    if not payloads:
                        self._release_drained()
                        return published
                events = []
                for payload in payloads:
                    try:
                        events.append(decode(payload))
                    except MalformedEvent as exc:
                        _log.error("spool %s: skipping an undecodable record: %s", self._dir, exc)
                if events:
                    publish(events)
                with self._lock:
                    self._check_open()
                    self._mark_drained(end, len(payloads))
                published += len(events)

    def close(self) -> None:
        """Close the files and release the directory. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release()

    # --- internals (under self._lock unless noted) -----------------------------------------------

    def _read_batch(self, limit: int) -> tuple[list[bytes], tuple[int, int]]:
        """Up to ``limit`` payloads from the read position, within one segment, and the
        position after them. Moves past (and removes) fully read closed segments."""
        while True:
            number, offset = self._read_pos
            if number not in self._segments:
                later = [n for n in self._segments if n > number]
                if not later:
                    return [], self._read_pos
                number, offset = self._read_pos = (later[0], len(_MAGIC))
            size = self._size_of(number)
            with open(self._path(number), "rb") as f:
                f.seek(offset)
                data = f.read(min(max(0, size - offset), _READ_BYTES))
            payloads: list[bytes] = []
            pos = 0
            while len(payloads) < limit and pos < len(data):
                end = _frame_end(data, pos)
                if end is None:
                    break
                payloads.append(data[pos + _FRAME.size : end])
                pos = end
            if payloads:
                return payloads, (number, offset + pos)
            if data:
                raise SpoolError(f"spool {self._dir}: {self._path(number).name} is corrupt "
                                 f"at byte {offset}; reopen the spool to cut it there")
            if number == self._active or number == self._segments[-1]:
                return [], self._read_pos
            self._drop_segment(number)  # fully drained and closed
            self._read_pos = (self._segments[0], len(_MAGIC))
            self._write_mark()

    def _mark_drained(self, end: tuple[int, int], frames: int) -> None:
        self._read_pos = end
        self._count -= frames
        self._write_mark()

    def _release_drained(self) -> None:
        """After a drain reached the end: remove every fully drained segment, the active
        one included (the next append starts a new segment)."""
        number, offset = self._read_pos
        if number in self._segments and offset >= self._size_of(number):
            if number == self._active:
                self._close_active()
            self._drop_segment(number)
            self._read_pos = (self._segments[0] if self._segments else self._next_number,
                              len(_MAGIC))
            self._write_mark()

    def _size_of(self, number: int) -> int:
        if number == self._active:
            return self._active_size
        return self._path(number).stat().st_size

    def _start_segment(self) -> None:
        self._close_active()
        number = self._next_number
        path = self._path(number)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            os.write(fd, _MAGIC)
            os.fsync(fd)
            _fsync_dir(self._dir)
        except OSError as exc:
            raise SpoolError(f"spool {self._dir}: cannot start a segment: {exc}") from exc
        self._next_number += 1
        self._segments.append(number)
        self._active, self._active_fd, self._active_size = number, fd, len(_MAGIC)
        self._bytes += len(_MAGIC)

    def _write_synced(self, frames: bytes) -> None:
        fd = self._active_fd
        assert fd is not None
        try:
            view = memoryview(frames)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            try:  # take back a partial write, so no torn frame sits before later ones
                os.ftruncate(fd, self._active_size)
                os.fsync(fd)
            except OSError:
                self._close_active()  # reopening cuts the torn tail
            raise SpoolError(f"spool {self._dir}: write failed: {exc}") from exc
        self._active_size += len(frames)

    def _drop_segment(self, number: int) -> None:
        path = self._path(number)
        size = path.stat().st_size if number != self._active else self._active_size
        try:
            path.unlink()
            _fsync_dir(self._dir)
        except OSError as exc:
            raise SpoolError(f"spool {self._dir}: cannot remove {path.name}: {exc}") from exc
        self._segments.remove(number)
        self._bytes -= size

    def _write_mark(self) -> None:
        tmp = self._dir / f"{_DRAINED}.tmp"
        try:
            with open(tmp, "w") as f:
                f.write(f"{self._read_pos[0]} {self._read_pos[1]}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._dir / _DRAINED)
            _fsync_dir(self._dir)
        except OSError as exc:
            raise SpoolError(f"spool {self._dir}: cannot write {_DRAINED}: {exc}") from exc

    def _close_active(self) -> None:
        if self._active_fd is not None:
            os.close(self._active_fd)
        self._active, self._active_fd, self._active_size = None, None, 0

    def _path(self, number: int) -> Path:
        return self._dir / f"{number:020d}{_SUFFIX}"

    def _release(self) -> None:
        if getattr(self, "_active_fd", None) is not None:
            self._close_active()
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(self._lock_fd)

    def _check_open(self) -> None:
        if self._closed:
            raise SpoolError(f"spool {self._dir} is closed")
