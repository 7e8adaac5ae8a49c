"""The spool's files on disk: segments of CRC-checked frames, the drained mark, the errors.

Used by :class:`~adfunnel.events.spool.Spool`. On disk (one directory per spool, held by
one process at a time)::

    LOCK                      flock'd while open (a second opener gets SpoolLocked)
    00000000000000000001.seg  segments: 8-byte magic, then frames
    00000000000000000002.seg    frame = u32 length | u32 CRC-32 | encoded event
    DRAINED                   "<segment> <offset>": everything before it was published

A frame whose length field passes ``_MAX_FRAME`` bytes, that ends past the data, or
whose CRC-32 does not match is torn or corrupt (:func:`_frame_end` answers None).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

_MAGIC = b"ADFSPL01"
_FRAME = struct.Struct(">II")  # payload length, CRC-32 of the payload
_MAX_FRAME = 64 << 10  # a longer length field is corruption (an event is < 3 KiB)
_SUFFIX = ".seg"
_DRAINED = "DRAINED"


class SpoolError(Exception):
    """The spool cannot do what was asked (I/O error, corrupt mark, misuse)."""


class SpoolFull(SpoolError):
    """Appending would take the spool past ``max_bytes``; nothing was written. The caller
    must refuse the event (not acknowledge it) rather than lose it."""


class SpoolLocked(SpoolError):
    """Another open :class:`Spool` (in this or another process) holds the directory."""


def _frame(payload: bytes) -> bytes:
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _frame_end(data: bytes, pos: int) -> int | None:
    """The end of the valid frame at ``pos`` in ``data``, or None (torn or corrupt)."""
    if pos + _FRAME.size > len(data):
        return None
    length, crc = _FRAME.unpack_from(data, pos)
    end = pos + _FRAME.size + length
    if length > _MAX_FRAME or end > len(data):
        return None
    if zlib.crc32(data[pos + _FRAME.size : end]) != crc:
        return None
    return end


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
