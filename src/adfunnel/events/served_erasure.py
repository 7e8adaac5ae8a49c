"""Erasure of one user from the served log: ``DELETE /v1/users/{key}``.

The served log keeps no user key, only ``user_hash`` = HMAC-SHA256(salt, key), but
whoever holds the salt and a key can find that user's records, so an erasure removes
them: every raw line whose ``user_hash`` is the user's is dropped from the raw files,
and every Parquet hour holding one is rebuilt from the rewritten raw files (the
compactor's own rule, :func:`adfunnel.events.compactor.compact_hour`). Each file is
replaced atomically (a temporary file, then a rename): a reader sees the old file or the
new one.

Which raw files: this process's own (its writer is held still, its files closed, while
they are rewritten: :meth:`ServedLog.released`) and every file of a closed hour (end +
``grace_s`` passed: no writer appends to it any more). A file of another process sharing
the directory whose hour is still open is left to that process (call the route on every
server of a fleet sharing a directory, or again once the hour closed).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from adfunnel.events.compactor import Hour, compact_hour, parquet_path, raw_hours
from adfunnel.events.served_log import ServedLog
from adfunnel.events.served_schema import decode_record

#: An hour accepts late records this long after its end (the compactor's default).
GRACE_S = 300.0


@dataclass(frozen=True, slots=True)
class Erased:
    """What an erasure removed: raw lines, and the Parquet hours rebuilt."""

    records: int = 0
    hours_rebuilt: int = 0


def erase_user(log: ServedLog, key: str, *, grace_s: float = GRACE_S) -> Erased:
    """Remove user ``key``'s records from ``log``'s directory (see the module doc).

    Raises:
        TimeoutError: the writer did not flush or park in time (nothing was rewritten).
        OSError: reading or writing a file failed (files already rewritten stay so).
    """
    target = log.user_hash(key)
    now_s = log.clock.now().timestamp()
    records = rebuilt = 0
    with log.released():
        for hour, files in raw_hours(log.directory).items():
            closed = _hour_start(hour) + 3600 + grace_s <= now_s
            removed = sum(_rewrite_raw(f, target) for f in files
                          if closed or log.writer_id in f.name)
            records += removed
            if removed and parquet_path(log.directory, hour).exists():
                compact_hour(log.directory, hour)
                rebuilt += 1
    return Erased(records, rebuilt)


def _hour_start(hour: Hour) -> float:
    return datetime.strptime(f"{hour[0]} {hour[1]}", "%Y-%m-%d %H").replace(
        tzinfo=UTC).timestamp()


def _rewrite_raw(path: Path, user_hash: str) -> int:
    """Drop the lines of ``user_hash`` from raw file ``path``; how many. Lines that do
    not decode (a torn tail) are kept as they are, for the compactor to skip."""
    data = path.read_bytes()
    kept: list[bytes] = []
    removed = 0
    for line in data.split(b"\n"):
        try:
            if line.strip() and decode_record(line).user_hash == user_hash:
                removed += 1
                continue
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        kept.append(line)
    if removed:
        _replace(path, b"\n".join(kept))
    return removed


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.erasing")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
