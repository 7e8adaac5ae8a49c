"""The request sample in the server's database (``request_sample``, migration 0019).

Every ad-server process writes its own drained hours (:meth:`SqlRequestSample.add`:
inserts only, so many processes never contend on a row) and prunes rows older than the
history kept (:meth:`prune`; any process may, the delete is idempotent). Bounded: at
most ``per_hour`` rows per process and UTC hour, for ``history_days`` days.

:class:`SampleKeeper` is the periodic job that moves a :class:`RequestSampler`'s closed
hours into the table (and prunes at most once per hour of the clock).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import msgspec
from sqlalchemy import Engine, delete, func, insert, select

from adfunnel.db import connection_guard
from adfunnel.forecast.sample import RequestSampler, SampledRequest
from adfunnel.forecast.tables import request_sample

#: Default days of requests kept (``forecast_history_days``): four weeks of each hour.
DEFAULT_HISTORY_DAYS = 28


def hour_floor(at: datetime) -> datetime:
    """The UTC hour start of ``at``."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class SqlRequestSample:
    """Reads and writes of ``request_sample`` over ``engine``.

    Hours that closed more than ``SETTLED`` ago are final (every process flushes its
    closed hours within ``forecast_flush_s``): :meth:`rows` keeps them parsed in memory,
    so a forecast reads from the database only the last hours and those it never read
    (168,000 rows, 28 days at the default 250 an hour, take seconds to read and parse)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._settled: dict[datetime, list[SampledRequest]] = {}
        self._lock = threading.Lock()

    def add(self, rows: Sequence[SampledRequest]) -> None:
        """Insert ``rows`` (one transaction)."""
        if not rows:
            return
        values = [{"hour_start": hour_floor(r.at), "at_ms": round(r.at.timestamp() * 1000),
                   "placement": r.placement, "weight": r.weight,
                   "attributes": _encode({k: sorted(v) for k, v in r.attributes.items()}
                                         ).decode()}
                  for r in rows]
        with connection_guard(self.engine), self.engine.begin() as conn:
            conn.execute(insert(request_sample), values)

    def prune(self, before: datetime) -> int:
        """Delete the rows of hours before ``before``; how many."""
        cut = hour_floor(before)
        with self._lock:
            self._settled = {h: rows for h, rows in self._settled.items() if h >= cut}
        with connection_guard(self.engine), self.engine.begin() as conn:
            return int(conn.execute(delete(request_sample).where(
                request_sample.c.hour_start < cut)).rowcount or 0)

    def has_placement(self, placement: str) -> bool:
        """Whether the kept history holds a request of ``placement`` (an id that was
        requested without being created: the replay's slot ids)."""
        t = request_sample.c
        q = select(t.id).where(t.placement == placement).limit(1)
        with connection_guard(self.engine), self.engine.connect() as conn:
            return conn.execute(q).first() is not None

    def first_hour(self, since: datetime) -> datetime | None:
        """The earliest hour start at or after ``since`` with a row (None: none)."""
        t = request_sample.c
        with connection_guard(self.engine), self.engine.connect() as conn:
            got = conn.execute(select(func.min(t.hour_start))
                               .where(t.hour_start >= hour_floor(since))).scalar()
        return None if got is None else _utc(got)

    def rows(self, since: datetime, until: datetime, now: datetime | None = None
             ) -> list[SampledRequest]:
        """The rows of hours ``since`` <= hour < ``until``, by hour. Hours before
        ``now - SETTLED`` (``now`` None: none) are kept parsed and read once."""
        since, until = hour_floor(since), hour_floor(until)
        settled_before = hour_floor(now - SETTLED) if now is not None else since
        with self._lock:
            held = dict(self._settled)
        hours = _hours(since, until)
        missing = [h for h in hours if h not in held]
        if missing:
            fresh = self._read(min(missing), max(missing) + HOUR)
            for h in missing:
                got = fresh.get(h, [])
                held[h] = got
                if h < settled_before:
                    with self._lock:
                        self._settled[h] = got
        return [r for h in hours for r in held[h]]

    def _read(self, since: datetime, until: datetime) -> dict[datetime, list[SampledRequest]]:
        t = request_sample.c
        q = (select(t.at_ms, t.weight, t.attributes)
             .where(t.hour_start >= since, t.hour_start < until).order_by(t.at_ms, t.id))
        with connection_guard(self.engine), self.engine.connect() as conn:
            found = conn.execute(q).all()
        out: dict[datetime, list[SampledRequest]] = defaultdict(list)
        hours: dict[int, datetime] = {}
        for at_ms, w, a in found:
            h = at_ms // 3_600_000
            hour = hours.get(h)
            if hour is None:
                hour = hours[h] = datetime.fromtimestamp(h * 3600, UTC)
            out[hour].append(SampledRequest(
                datetime.fromtimestamp(at_ms / 1000, UTC),
                {k: frozenset(v) for k, v in _decode(a).items()}, float(w)))
        return out


HOUR = timedelta(hours=1)
_encode = msgspec.json.Encoder(order="sorted").encode
_decode = msgspec.json.Decoder(dict[str, list[str]]).decode
#: How long after its end an hour's rows are final (every process's flush is in).
SETTLED = timedelta(hours=1)


def _hours(since: datetime, until: datetime) -> list[datetime]:
    out, at = [], since
    while at < until:
        out.append(at)
        at += HOUR
    return out


def _utc(at: datetime | str) -> datetime:
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


class SampleKeeper:
    """Moves ``sampler``'s closed hours into ``store`` (:meth:`flush`, the periodic job
    and the forecast route's first step) and keeps ``history_days`` of them."""

    def __init__(self, sampler: RequestSampler, store: SqlRequestSample,
                 history_days: int = DEFAULT_HISTORY_DAYS) -> None:
        self.sampler = sampler
        self.store = store
        self.history_days = history_days
        self._pruned_hour: datetime | None = None
        self._lock = threading.Lock()

    def flush(self, *, final: bool = False) -> None:
        with self._lock:  # one writer at a time: the job and a forecast may race
            self.store.add(self.sampler.drain(final=final))
            hour = hour_floor(self.sampler.now())
            if self._pruned_hour != hour:
                self._pruned_hour = hour
                self.store.prune(hour - timedelta(days=self.history_days))
