"""The served-log compactor: closed hours of raw JSON lines into one Parquet file each.

Layout under the served-log directory::

    raw/YYYY-MM-DD/HH.<writer>.jsonl                     ServedLog writers (append-only)
    parquet/date=YYYY-MM-DD/hour=HH/part-0.parquet       this module (one file per hour)

An hour is *closed* once its end plus ``grace_s`` has passed (records are filed by
their own time, so a record decided at 10:59:59 may reach its file a little later).
Compacting an hour reads every writer's raw file of that hour, skips torn or
undecodable lines (counted), orders the rows by (time, request id) and writes them
with :data:`SCHEMA` (zstd) to a temporary file in the hour's folder that is renamed
over ``part-0.parquet``: a reader sees the old file or the new one, never a partial
one (temporary names do not end in ``.parquet``).

Idempotent: the Parquet file's metadata holds the name and size of each raw file it
was built from (``adfunnel.sources``). Running again over an hour whose raw files are
unchanged does nothing; a raw file that grew (a late record) rebuilds the hour from
all of them, so the result is always a function of the raw files. Raw files are kept
(they are the source of truth); deleting them is retention's business, after
compaction.

Schema (:data:`SCHEMA`): one row per :class:`~adfunnel.events.served_schema.ServedRecord`,
same field names; nested fields as Arrow types, not JSON strings — ``attributes``
``map<string, list<string>>``, ``reason_counts`` ``map<string, int64>``, ``slots`` /
``winners`` / ``rejections`` lists of structs, ``house_slots`` ``list<string>``.
Integers are int64 (money in micros), scores float64, ``time`` float64 Unix seconds.
DuckDB reads them as MAP, STRUCT[] and LIST columns (``UNNEST(winners)``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from adfunnel.events.served_files import RAW_SUFFIX
from adfunnel.events.served_schema import SCHEMA_VERSION, ServedRecord, decode_record

#: Metadata key of the Parquet file: JSON list of [raw file name, size in bytes].
SOURCES_KEY = b"adfunnel.sources"
PART_NAME = "part-0.parquet"
#: Temporary files older than this (seconds) are a crashed compaction's and removed.
_STALE_TMP_S = 3600.0
#: Parquet file -> the raw (name, size) list it is known to hold, in this process: a
#: pass over every closed hour (every ``served_compact_s``, and before each
#: recalibration) then opens no Parquet footer of an hour whose raw files are unchanged,
#: so a pass costs a stat per raw file, not a file open per hour the log ever had (it
#: grew with the log: 22 % of a week-long replay's server CPU). Keyed by the sizes,
#: so a grown or rewritten raw file still rebuilds its hour.
_BUILT: dict[Path, list[tuple[str, int]]] = {}
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_HOUR = re.compile(r"(\d{2})\..+")

_SLOT = pa.struct([
    ("id", pa.string()), ("position", pa.int64()), ("width", pa.int64()),
    ("height", pa.int64()), ("format", pa.string()), ("reserve_cpm_micros", pa.int64()),
])
_WINNER = pa.struct([
    ("slot_id", pa.string()), ("position", pa.int64()), ("impression_id", pa.string()),
    ("ad_id", pa.int64()), ("campaign_id", pa.int64()), ("advertiser_id", pa.int64()),
    ("bid_type", pa.string()), ("bid_micros", pa.int64()), ("price_micros", pa.int64()),
    ("charge_micros", pa.int64()), ("expected_micros", pa.int64()), ("pctr", pa.float64()),
    ("pcvr", pa.float64()), ("quality_micros", pa.float64()), ("total_micros", pa.float64()),
    ("pacing_p", pa.float64()), ("propensity", pa.float64()), ("tier", pa.string()),
    ("model_pctr", pa.float64()),
    ("bid_multiplier", pa.float64()),
    ("beat_micros", pa.float64()), ("unshaded_bid_micros", pa.int64()),
    ("openrtb_at", pa.int64()),
])
_REJECTION = pa.struct([
    ("ad_id", pa.int64()), ("campaign_id", pa.int64()), ("reason", pa.string()),
    ("detail", pa.string()),
])

#: The Parquet schema of the served log (module doc); field order = ServedRecord's.
SCHEMA = pa.schema([
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("time", pa.float64(), nullable=False),
    ("user_hash", pa.string()),
    ("attributes", pa.map_(pa.string(), pa.list_(pa.string()))),
    ("placement", pa.string()),
    ("exchange", pa.string()),
    ("domain", pa.string()),
    ("placement_reserve_cpm_micros", pa.int64()),
    ("slots", pa.list_(_SLOT)),
    ("winners", pa.list_(_WINNER)),
    ("house_slots", pa.list_(pa.string())),
    ("reason_counts", pa.map_(pa.string(), pa.int64())),
    ("rejections", pa.list_(_REJECTION)),
    ("rejections_total", pa.int64()),
    ("truncated", pa.bool_()),
    ("index_version", pa.int64()),
    ("exploration", pa.bool_()),
    ("model_version", pa.string()),
    ("supply_chain", pa.string()),
    ("schema_version", pa.int64()),
], metadata={b"adfunnel.schema_version": str(SCHEMA_VERSION).encode()})

Hour = tuple[str, str]
"""An hour of the log: (``YYYY-MM-DD``, ``HH``), UTC."""


@dataclass(slots=True)
class CompactReport:
    """What one :func:`compact` run did.

    ``written``: hours (re)written; ``unchanged``: closed hours already compacted from
    the same raw files; ``still_open``: hours not closed yet (left alone); ``rows``:
    rows in the hours written; ``bad_lines``: torn or undecodable raw lines skipped.
    """

    written: list[Hour] = field(default_factory=list)
    unchanged: list[Hour] = field(default_factory=list)
    still_open: list[Hour] = field(default_factory=list)
    rows: int = 0
    bad_lines: int = 0


def records_table(records: Iterable[ServedRecord]) -> pa.Table:
    """``records`` as an Arrow table of :data:`SCHEMA`, in the given order."""
    return pa.Table.from_pylist([msgspec.to_builtins(r) for r in records], schema=SCHEMA)


def parquet_path(directory: str | os.PathLike[str], hour: Hour) -> Path:
    """Where the Parquet file of ``hour`` lives (``parquet/date=…/hour=…/part-0.parquet``)."""
    day, hh = hour
    return Path(directory) / "parquet" / f"date={day}" / f"hour={hh}" / PART_NAME


def raw_hours(directory: str | os.PathLike[str]) -> dict[Hour, list[Path]]:
    """Raw files under ``directory/raw`` by hour, each hour's sorted by name."""
    out: dict[Hour, list[Path]] = {}
    root = Path(directory) / "raw"
    if not root.is_dir():
        return out
    for day_dir in sorted(root.iterdir()):
        if not day_dir.is_dir() or not _DAY.fullmatch(day_dir.name):
            continue
        for f in sorted(day_dir.iterdir()):
            m = _HOUR.fullmatch(f.name)
            if m and f.name.endswith(RAW_SUFFIX) and f.is_file():
                out.setdefault((day_dir.name, m.group(1)), []).append(f)
    return out


def compact(directory: str | os.PathLike[str], now: datetime, *,
            grace_s: float = 300.0) -> CompactReport:
    """Compact every closed hour of ``directory`` whose raw files changed since its
    Parquet file was written (or that has none).

    ``now``: the current time (timezone-aware; from the injected clock); an hour is
    closed when ``now`` ≥ its end + ``grace_s`` seconds.

    Raises:
        OSError: reading raw files or writing Parquet failed (the hour's previous
            Parquet file, if any, is left as it was).
    """
    report = CompactReport()
    now_s = now.timestamp()
    for hour, files in raw_hours(directory).items():
        start = datetime.strptime(f"{hour[0]} {hour[1]}", "%Y-%m-%d %H").replace(tzinfo=UTC)
        if start.timestamp() + 3600 + grace_s > now_s:
            report.still_open.append(hour)
            continue
        result = compact_hour(directory, hour, files)
        if result is None:
            report.unchanged.append(hour)
        else:
            report.written.append(hour)
            report.rows += result[0]
            report.bad_lines += result[1]
    return report


def compact_hour(directory: str | os.PathLike[str], hour: Hour,
                 files: list[Path] | None = None) -> tuple[int, int] | None:
    """Write the Parquet file of ``hour`` from its raw ``files`` (default: all of the
    hour's), unless it was written from the same files already.

    Returns (rows, bad lines skipped) when written, None when unchanged or when the
    hour has no raw file. Does not check that the hour is closed (see :func:`compact`).
    """
    if files is None:
        files = raw_hours(directory).get(hour, [])
    if not files:
        return None
    sizes = [(f.name, f.stat().st_size) for f in files]
    target = parquet_path(directory, hour)
    if target.exists() and (_BUILT.get(target) == sizes or _sources(target) == sizes):
        _BUILT[target] = sizes
        return None
    records: list[ServedRecord] = []
    bad = 0
    for f, (_, size) in zip(files, sizes, strict=True):
        with open(f, "rb") as fh:
            data = fh.read(size)
        got, skipped = _decode_lines(data)
        records += got
        bad += skipped
    records.sort(key=lambda r: (r.time, r.request_id))
    table = records_table(records).replace_schema_metadata(
        {**(SCHEMA.metadata or {}), SOURCES_KEY: json.dumps(sizes).encode()})
    _write_atomically(table, target)
    _BUILT[target] = sizes
    return len(records), bad


def _decode_lines(data: bytes) -> tuple[list[ServedRecord], int]:
    """Records of whole lines in ``data``; a line that does not decode (a torn tail, a
    corrupt line) is skipped and counted."""
    out: list[ServedRecord] = []
    bad = 0
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: empty, or a torn line
    if tail.strip():
        bad += 1
    for line in lines:
        if not line.strip():
            continue
        try:
            out.append(decode_record(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            bad += 1
    return out, bad


def _sources(path: Path) -> list[tuple[str, int]] | None:
    try:
        meta = pq.read_schema(path).metadata or {}
        raw = meta.get(SOURCES_KEY)
        return [(str(n), int(s)) for n, s in json.loads(raw)] if raw is not None else None
    except (OSError, ValueError, pa.ArrowInvalid):
        return None  # unreadable: rebuild it


def _write_atomically(table: pa.Table, target: Path) -> None:
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(folder)
    tmp = folder / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    with contextlib.suppress(OSError):  # make the rename durable where the OS allows
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove_stale_tmp(folder: Path) -> None:
    cutoff = time.time() - _STALE_TMP_S  # file ages: the machine's clock, like mtimes
    for f in folder.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if f.stat().st_mtime < cutoff:
                f.unlink()
