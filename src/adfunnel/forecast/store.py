"""The request sample in the server's database (``request_sample``, migration 0019).

Every ad-server process writes its own drained hours (:meth:`SqlRequestSample.add`:
inserts only, so many processes never contend on a row) and prunes rows older than the
history kept (:meth:`prune`; any process may, the delete is idempotent). Bounded: at
most ``per_hour`` rows per process and UTC hour, for ``history_days`` days.

:class:`SampleKeeper` is the periodic job that moves a :class:`RequestSampler`'s closed
hours into the table (and prunes at most once per hour of the clock).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

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
    """Reads and writes of ``request_sample`` over ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, rows: Sequence[SampledRequest]) -> None:
        """Insert ``rows`` (one transaction)."""
        if not rows:
            return
        values = [{"hour_start": hour_floor(r.at), "at": r.at, "placement": r.placement,
                   "weight": r.weight,
                   "attributes": json.dumps({k: sorted(v) for k, v in r.attributes.items()},
                                            sort_keys=True, separators=(",", ":"))}
                  for r in rows]
        with connection_guard(self.engine), self.engine.begin() as conn:
            conn.execute(insert(request_sample), values)

    def prune(self, before: datetime) -> int:
        """Delete the rows of hours before ``before``; how many."""
        with connection_guard(self.engine), self.engine.begin() as conn:
            return int(conn.execute(delete(request_sample).where(
                request_sample.c.hour_start < hour_floor(before))).rowcount or 0)

    def first_hour(self, since: datetime) -> datetime | None:
        """The earliest hour start at or after ``since`` with a row (None: none)."""
        t = request_sample.c
        with connection_guard(self.engine), self.engine.connect() as conn:
            got = conn.execute(select(func.min(t.hour_start))
                               .where(t.hour_start >= hour_floor(since))).scalar()
        return None if got is None else _utc(got)

    def rows(self, since: datetime, until: datetime) -> list[SampledRequest]:
        """The rows of hours ``since`` <= hour < ``until``, oldest first."""
        t = request_sample.c
        q = (select(t.at, t.weight, t.attributes)
             .where(t.hour_start >= hour_floor(since), t.hour_start < until)
             .order_by(t.at, t.id))
        with connection_guard(self.engine), self.engine.connect() as conn:
            found = conn.execute(q).all()
        return [SampledRequest(_utc(at), {k: frozenset(v) for k, v in json.loads(a).items()},
                               float(w)) for at, w, a in found]


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
