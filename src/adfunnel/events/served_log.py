"""The served log: one record per committed ad decision, for the click model to learn
from (DESIGN.md §Events and billing; issue 8, "Served log").

Shape of the plane::

    ServedLog.record(decision, request)   # request path: O(1), never blocks, may drop
        └─ bounded queue ─▶ writer thread ─▶ raw/YYYY-MM-DD/HH.<writer>.jsonl (append-only)
    compactor.compact(...)                # closed hours ─▶ parquet/date=…/hour=…/part-0.parquet
    query.query(...) / query.join_served_with_billed(...)   # DuckDB over the Parquet files

``record`` takes the time from the injected clock, reads the winners' pacing rates and
puts one tuple on a bounded queue; everything else (hashing the user key, building the
:class:`ServedRecord`, JSON encoding, file I/O) happens on the writer thread. When the
queue is full the record is dropped and counted (:attr:`ServedLog.dropped` and the
Prometheus counter ``adfunnel_served_log_dropped_total{reason}``): the answer is never
delayed for the log.

Raw files are newline-delimited JSON (msgspec), one :class:`ServedRecord` per line,
filed by the record's own time (UTC hour), one file per writer and hour, so several
server processes can share a directory without sharing a file. A line is written
whole or, after a crash, left as a torn tail that the compactor skips; a writer that
reopens a file ending in a torn line starts a new line first.

The user key is never stored: only ``HMAC-SHA256(salt, key)`` in hex (``user_hash``).

This module does not import :mod:`adfunnel.serving` at run time (the serving plane
imports the event plane, not the reverse); the decision and request types appear in
type hints only.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import queue
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import msgspec
from prometheus_client import Counter

from adfunnel.clock import Clock

if TYPE_CHECKING:
    from adfunnel.serving.decision import Decision
    from adfunnel.serving.request import SelectRequest

log = logging.getLogger(__name__)

#: Version of the record layout; bumped when a field changes meaning or type.
SCHEMA_VERSION = 1
#: Suffix of raw hour files (``raw/YYYY-MM-DD/HH.<writer>.jsonl``).
RAW_SUFFIX = ".jsonl"
#: Default bound of the record queue (records waiting for the writer thread).
DEFAULT_MAX_QUEUE = 10_000
#: Default number of per-candidate rejections kept per record (explain decisions).
DEFAULT_MAX_REJECTIONS = 100
#: Most raw files the writer keeps open at once (the current hour and late records).
_MAX_OPEN_FILES = 4
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


class SlotRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One requested slot as the request gave it (sizes in pixels, reserve in micros per
    thousand impressions; None: the placement's)."""

    id: str
    position: int
    width: int
    height: int
    format: str
    reserve_cpm_micros: int | None = None


class RejectionRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One rejected candidate with its reason code (``detail``: e.g. the cap that bound)."""

    ad_id: int
    campaign_id: int
    reason: str
    detail: str | None = None


class WinnerRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One filled slot (a paid ad; house fills are in ``ServedRecord.house_slots``).

    Money is integer micros: ``bid_micros`` and ``price_micros`` in the bid's unit (per
    mille for CPM, per click for CPC, per conversion for CPA), ``charge_micros`` the
    most its billable event can bill, ``expected_micros`` the serve's expected cost;
    ``quality_micros`` and ``total_micros`` are micros per impression (floats, as the
    auction ranks them). ``pctr``/``pcvr`` are probabilities. ``pacing_p`` is the
    campaign's participation probability when it was served (None: not given);
    ``propensity`` the probability that this ad was shown in this slot (None until the
    model issue adds exploration). ``impression_id`` is the id in the ad's token: the
    key of its ledger rows.
    """

    slot_id: str
    position: int
    impression_id: str
    ad_id: int
    campaign_id: int
    advertiser_id: int
    bid_type: str
    bid_micros: int
    price_micros: int
    charge_micros: int
    expected_micros: int
    pctr: float
    pcvr: float
    quality_micros: float
    total_micros: float
    pacing_p: float | None = None
    propensity: float | None = None


class ServedRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One committed decision as the served log keeps it.

    ``time``: Unix seconds from the injected clock when the decision was recorded.
    ``user_hash``: hex HMAC-SHA256 of the user key under the log's salt (None: the
    request had no key). ``attributes``: the request's user attributes, each value a
    list of strings (a single string becomes a one-item list). ``reason_counts``:
    rejected candidates per reason code (always; the columnar path keeps only these).
    ``rejections``: the first ``max_rejections`` per-candidate rejections where the
    decision kept them (explain requests, the reference path), ``rejections_total`` how
    many it had. The decision keeps no score for a rejected candidate, so scores are
    the winners' (:class:`WinnerRecord`). ``truncated``: retrieval stopped at its limit.
    ``exploration``/``model_version``: None until the model issue fills them;
    ``index_version``: the targeting index version the decision read.
    """

    request_id: str
    time: float
    user_hash: str | None
    attributes: dict[str, list[str]]
    placement: str
    exchange: str | None
    domain: str | None
    placement_reserve_cpm_micros: int
    slots: list[SlotRecord]
    winners: list[WinnerRecord]
    house_slots: list[str]
    reason_counts: dict[str, int]
    rejections: list[RejectionRecord]
    rejections_total: int
    truncated: bool
    index_version: int
    exploration: bool | None = None
    model_version: str | None = None
    schema_version: int = SCHEMA_VERSION


_encoder = msgspec.json.Encoder()
#: Decodes one raw line (``msgspec.DecodeError`` / ``ValidationError`` on a bad one).
decode_record = msgspec.json.Decoder(ServedRecord).decode


def hash_user_key(key: str | None, salt: bytes) -> str | None:
    """Hex HMAC-SHA256 of ``key`` under ``salt`` (64 characters); None for no key."""
    if key is None:
        return None
    return hmac.new(salt, key.encode("utf-8"), hashlib.sha256).hexdigest()


def build_record(
    decision: Decision,
    request: SelectRequest,
    time_s: float,
    salt: bytes,
    *,
    pacing: Mapping[int, float] | None = None,
    exploration: bool | None = None,
    propensities: Mapping[str, float] | None = None,
    model_version: str | None = None,
    max_rejections: int = DEFAULT_MAX_REJECTIONS,
) -> ServedRecord:
    """The :class:`ServedRecord` of ``decision`` made for ``request`` at ``time_s``.

    ``pacing``: campaign id -> pacing probability at decision time; ``propensities``:
    slot id -> propensity of the ad shown there. Pure: reads its arguments only.
    """
    positions = {s.id: s.position for s in request.slots}
    pacing = pacing or {}
    propensities = propensities or {}
    winners = []
    for p in decision.placed:
        cand = p.win.candidate
        winners.append(WinnerRecord(
            slot_id=p.win.slot_id,
            position=positions.get(p.win.slot_id, 0),
            impression_id=p.served.impression_id,
            ad_id=p.ad.id,
            campaign_id=p.campaign.id,
            advertiser_id=p.campaign.advertiser_id,
            bid_type=p.campaign.bid_type.value,
            bid_micros=cand.bid_micros,
            price_micros=p.win.price_micros,
            charge_micros=p.charge_micros,
            expected_micros=p.served.expected_micros,
            pctr=float(cand.pctr),
            pcvr=float(cand.pcvr),
            quality_micros=float(cand.quality_micros),
            total_micros=float(cand.total),
            pacing_p=pacing.get(p.campaign.id),
            propensity=propensities.get(p.win.slot_id),
        ))
    kept = decision.rejections[:max_rejections]
    return ServedRecord(
        request_id=decision.request_id,
        time=time_s,
        user_hash=hash_user_key(request.user.key, salt),
        attributes={k: _as_list(v) for k, v in request.user.attributes.items()},
        placement=request.placement.id,
        exchange=request.placement.exchange,
        domain=request.placement.domain,
        placement_reserve_cpm_micros=request.placement.reserve_cpm_micros,
        slots=[SlotRecord(s.id, s.position, s.width, s.height, s.format, s.reserve_cpm_micros)
               for s in request.slots],
        winners=winners,
        house_slots=[h.slot_id for h in decision.house],
        reason_counts=decision.rejection_counts(),
        rejections=[RejectionRecord(r.ad_id, r.campaign_id, r.reason, r.detail) for r in kept],
        rejections_total=len(decision.rejections),
        truncated=decision.truncated,
        index_version=decision.index_version,
        exploration=exploration,
        model_version=model_version,
    )


def _as_list(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def hour_of(time_s: float) -> tuple[str, str]:
    """(``YYYY-MM-DD``, ``HH``) of Unix seconds ``time_s`` in UTC: the raw file's day
    folder and hour."""
    at = datetime.fromtimestamp(time_s, UTC)
    return at.strftime("%Y-%m-%d"), at.strftime("%H")


class _Pending(NamedTuple):
    time_s: float
    decision: Decision
    request: SelectRequest
    pacing: dict[int, float] | None
    exploration: bool | None
    propensities: Mapping[str, float] | None
    model_version: str | None


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
        self._files: dict[Path, IO[bytes]] = {}  # open raw files, oldest first
        # test hook (:meth:`paused`): the writer parks while ``_pause`` is set
        self._pause_cond = threading.Condition()
        self._pause = False
        self._parked = False
        self._thread = threading.Thread(target=self._run, name="served-log-writer", daemon=True)
        self._thread.start()

    # -- request path -------------------------------------------------------------

    def record(
        self,
        decision: Decision,
        request: SelectRequest,
        *,
        pacing_rate: Callable[[int], float] | None = None,
        exploration: bool | None = None,
        propensities: Mapping[str, float] | None = None,
        model_version: str | None = None,
    ) -> bool:
        """Queue ``decision`` (made for ``request``) for the log; never blocks or raises
        for a full queue.

        Call it for a committed decision only, and do not mutate the decision or the
        request afterwards: the writer thread reads them later. ``pacing_rate``:
        campaign id -> participation probability now (e.g. the spend gate's
        ``pacing_rate``), read here for each winner; ``propensities``: slot id ->
        propensity; ``exploration``, ``model_version``: stored as given.

        Returns True when queued, False when dropped (queue full, or the log closed).
        """
        if self._closed:
            self._drop(CLOSED)
            return False
        time_s = self.clock.now().timestamp()
        pacing = ({p.campaign.id: float(pacing_rate(p.campaign.id)) for p in decision.placed}
                  if pacing_rate is not None else None)
        item = _Pending(time_s, decision, request, pacing, exploration, propensities,
                        model_version)
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
            self._close_files()  # the writer is parked: its files are ours to close
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
            self._close_files()
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
            self._flush_files()
            item.done.set()
        self._write(pending)
        return False

    def _write(self, items: list[_Pending]) -> None:
        if not items:
            return
        lines: dict[Path, list[bytes]] = {}
        for it in items:
            try:
                rec = build_record(
                    it.decision, it.request, it.time_s, self._salt, pacing=it.pacing,
                    exploration=it.exploration, propensities=it.propensities,
                    model_version=it.model_version, max_rejections=self.max_rejections)
                line = _encoder.encode(rec) + b"\n"
            except Exception:  # a record that cannot be built must not stop the writer
                log.exception("served log: record %r not encodable", it.decision.request_id)
                self._write_errors += 1
                self._drop(WRITE_ERROR)
                continue
            day, hour = hour_of(it.time_s)
            path = self.directory / "raw" / day / f"{hour}.{self.writer_id}{RAW_SUFFIX}"
            lines.setdefault(path, []).append(line)
        for path, chunk in lines.items():
            try:
                f = self._file(path)
                f.write(b"".join(chunk))
                f.flush()
            except OSError:
                log.exception("served log: writing %s failed", path)
                self._write_errors += 1
                self._drop(WRITE_ERROR, len(chunk))
                self._forget(path)
                continue
            self._written += len(chunk)

    def _file(self, path: Path) -> IO[bytes]:
        f = self._files.pop(path, None)
        if f is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            f = open(path, "ab")  # noqa: SIM115 - kept open across batches
            if f.tell() > 0 and not _ends_with_newline(path):
                f.write(b"\n")  # a torn line from a crash: start a new one
            while len(self._files) >= _MAX_OPEN_FILES:
                oldest = next(iter(self._files))
                self._forget(oldest)
        self._files[path] = f  # most recently used last
        return f

    def _forget(self, path: Path) -> None:
        f = self._files.pop(path, None)
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()

    def _flush_files(self) -> None:
        for path in list(self._files):
            try:
                self._files[path].flush()
            except OSError:
                log.exception("served log: flushing %s failed", path)
                self._forget(path)

    def _close_files(self) -> None:
        for path in list(self._files):
            self._forget(path)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
