"""Reading a spool's directory back when it opens: segments, the drained mark, torn tails.

A part of :class:`~adfunnel.events.spool.Spool` (mixed in: it sets the state the spool
works on). Segments drained before a crash are removed, a segment torn at creation is
removed, one without the spool's header is set aside (``.bad``), and a frame torn by a
crash (short, or CRC mismatch: never acknowledged) is cut off with the rest of its
segment; what is left is counted (bytes, events not yet drained).
"""

from __future__ import annotations

import logging
import os

from adfunnel.events.spool_files import _DRAINED, _MAGIC, _SUFFIX, SpoolError, _frame_end

_log = logging.getLogger("adfunnel.events.spool")


class SpoolRecovery:
    """How a :class:`~adfunnel.events.spool.Spool` reads its directory when it opens."""

    def _recover(self) -> None:
        """Read the directory: segments, the drained mark, torn tails; fix and count."""
        for stale in self._dir.glob(f"{_DRAINED}.tmp"):
            stale.unlink()
        segments = sorted(int(p.stem) for p in self._dir.glob(f"*{_SUFFIX}") if p.stem.isdigit())
        marked, offset = self._read_mark() or (0, len(_MAGIC))
        for number in [n for n in segments if n < marked]:  # drained before a crash
            self._path(number).unlink()
        segments = [n for n in segments if n >= marked]
        if not segments or segments[0] != marked:  # the marked segment was fully drained
            offset = len(_MAGIC)
        self._next_number = max([marked + 1, *(n + 1 for n in segments)])
        self._read_pos = (segments[0], offset) if segments else (self._next_number, len(_MAGIC))
        self._bytes = 0
        self._count = 0
        kept = []
        for number in segments:
            size, frames = self._check_segment(number, offset if number == segments[0] else None)
            if size:
                kept.append(number)
            self._bytes += size
            self._count += frames
        self._segments = kept
        self._active: int | None = None
        self._active_fd: int | None = None
        self._active_size = 0

    def _check_segment(self, number: int, count_from: int | None) -> tuple[int, int]:
        """(size after repair, frames at or after ``count_from``; all frames when None)."""
        path = self._path(number)
        data = path.read_bytes()
        if len(data) < len(_MAGIC) and _MAGIC.startswith(data):  # torn at creation
            path.unlink()
            return 0, 0
        if data[: len(_MAGIC)] != _MAGIC:
            _log.error("spool %s: %s has no spool header; set aside", self._dir, path.name)
            path.rename(path.with_suffix(".bad"))
            return 0, 0
        pos, frames = len(_MAGIC), 0
        while pos < len(data):
            payload_end = _frame_end(data, pos)
            if payload_end is None:
                break
            if count_from is None or pos >= count_from:
                frames += 1
            pos = payload_end
        if pos < len(data):
            _log.warning("spool %s: cut %d bytes of a torn record off %s", self._dir,
                         len(data) - pos, path.name)
            with open(path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
        return pos, frames

    def _read_mark(self) -> tuple[int, int] | None:
        try:
            text = (self._dir / _DRAINED).read_text()
        except FileNotFoundError:
            return None
        try:
            number, offset = (int(x) for x in text.split())
        except ValueError:
            raise SpoolError(
                f"spool {self._dir}: unreadable {_DRAINED} mark {text!r:.60}"
            ) from None
        return number, offset
