"""The served log's raw hour files, as its writer thread uses them: where a record's line
goes (``raw/YYYY-MM-DD/HH.<writer>.jsonl``, filed by the record's own UTC hour, one file
per writer and hour), and the few files the writer keeps open — appended to in whole
lines, a torn tail from a crash ended before the next line, the least recently used
closed past :data:`_MAX_OPEN_FILES`. The writer thread alone uses them: no locks.
"""

from __future__ import annotations

import contextlib
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

#: Suffix of raw hour files (``raw/YYYY-MM-DD/HH.<writer>.jsonl``).
RAW_SUFFIX = ".jsonl"
#: Most raw files the writer keeps open at once (the current hour and late records).
_MAX_OPEN_FILES = 4


def hour_of(time_s: float) -> tuple[str, str]:
    """(``YYYY-MM-DD``, ``HH``) of Unix seconds ``time_s`` in UTC: the raw file's day
    folder and hour."""
    at = datetime.fromtimestamp(time_s, UTC)
    return at.strftime("%Y-%m-%d"), at.strftime("%H")


class RawFiles:
    """The raw hour files of writer ``writer_id`` under ``directory``, and those open."""

    def __init__(self, directory: Path, writer_id: str) -> None:
        self.directory = directory
        self.writer_id = writer_id
        self._files: dict[Path, IO[bytes]] = {}  # open raw files, oldest first

    def path_of(self, time_s: float) -> Path:
        """The raw file of a record at Unix seconds ``time_s``."""
        day, hour = hour_of(time_s)
        return self.directory / "raw" / day / f"{hour}.{self.writer_id}{RAW_SUFFIX}"

    def file(self, path: Path) -> IO[bytes]:
        """``path`` open for appending (opened, and a torn last line ended, if needed)."""
        f = self._files.pop(path, None)
        if f is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            f = open(path, "ab")  # noqa: SIM115 - kept open across batches
            if f.tell() > 0 and not _ends_with_newline(path):
                f.write(b"\n")  # a torn line from a crash: start a new one
            while len(self._files) >= _MAX_OPEN_FILES:
                oldest = next(iter(self._files))
                self.forget(oldest)
        self._files[path] = f  # most recently used last
        return f

    def forget(self, path: Path) -> None:
        """Close ``path`` if open (errors ignored): the next write opens it again."""
        f = self._files.pop(path, None)
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()

    def flush_all(self) -> None:
        """Flush every open file; one that fails is logged and closed."""
        for path in list(self._files):
            try:
                self._files[path].flush()
            except OSError:
                log.exception("served log: flushing %s failed", path)
                self.forget(path)

    def close_all(self) -> None:
        """Close every open file."""
        for path in list(self._files):
            self.forget(path)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
