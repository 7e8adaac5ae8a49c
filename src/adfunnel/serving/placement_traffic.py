"""Ad requests and filled slots per placement: counted on the serving path, persisted
per UTC quarter-hour (the operator's placement report, ``GET /v1/placements/{id}/report``).

What is counted, once per ad request the select route answers (``POST /v1/ads:select``
with a valid body; a 4xx or a 503 ``not_ready`` is no request of the placement):

- ``requests``: the request — filled, no fill, shed or late alike (a shed or late
  answer is a 204: an unfilled request);
- ``slots``: the slots it asked for;
- ``filled_<tier>``: the slots its sent answer filled, by the tier that filled each
  (``sponsorship``, ``guaranteed``, ``auction``, ``house``:
  :mod:`adfunnel.serving.tiers`); a shed or late answer fills none.

Fill rate is per slot (the standard): filled slots / slots requested.

Each ad-server process counts in memory (:class:`PlacementCounter`, O(1) per request,
no database on the request path) and adds its counts to the ``placement_traffic`` table
(:class:`SqlPlacementTraffic`) every ``traffic_flush_s`` of the injected clock and at
shutdown: the upsert adds, so many processes and restarts sum. Buckets are UTC
quarter-hours, so every local hour and day in every zone (:30 and :45 offsets included)
is a whole number of them, as in the ledger rollups (:mod:`adfunnel.billing.rollups`).
A request counts in the quarter-hour of the injected clock when it is answered.

The select route is open, and its placement id is the client's: each id would become a
row per quarter-hour. So one process counts at most :data:`MAX_PLACEMENTS_PER_QUARTER`
distinct ids in a quarter-hour; requests of further ids that the operator has not
created count under :data:`OTHER` (nothing is lost from the totals, and a flood of
made-up ids adds one row). A created placement always counts under its own id, so no
flood can empty its report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from sqlalchemy import Engine, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from adfunnel.clock import Clock
from adfunnel.db import connection_guard
from adfunnel.serving.placement_tables import placement_traffic
from adfunnel.serving.tiers import TIERS

QUARTER_S = 900
#: Distinct placement ids one process counts per quarter-hour (the replay's busiest
#: quarter-hour of the iPinYou trace, whose slot ids are its placements, has far fewer).
MAX_PLACEMENTS_PER_QUARTER = 2_000
#: Where requests of ids beyond that count: no placement the operator creates has this
#: id (created ids are 1-200 of ``[A-Za-z0-9._:-]``).
OTHER = "(other)"
#: The counted columns, in the order of a count list: requests, slots, then the slots
#: filled by each tier in serving order (:data:`adfunnel.serving.tiers.TIERS`).
COLUMNS = ("requests", "slots", *(f"filled_{t}" for t in TIERS))
_TIER_COLUMN = {t: 2 + i for i, t in enumerate(TIERS)}

#: (placement id, UTC quarter-hour start) -> counts in :data:`COLUMNS` order.
Counts = dict[tuple[str, datetime], list[int]]


def quarter_of(at: datetime) -> datetime:
    """The start of the UTC quarter-hour holding the aware instant ``at``."""
    t = int(at.timestamp()) // QUARTER_S * QUARTER_S
    return datetime.fromtimestamp(t, UTC)


class PlacementCounter:
    """In-memory counts of one process, per (placement, UTC quarter-hour); thread-safe."""

    def __init__(self, clock: Clock, configured: Callable[[str], bool] = lambda _: False
                 ) -> None:
        self.clock = clock
        self.configured = configured  # a placement the operator created (never OTHER)
        self._counts: Counts = {}
        self._lock = threading.Lock()
        self._quarter: tuple[float, datetime] | None = None  # the last quarter used
        self._names: tuple[datetime | None, set[str]] = (None, set())  # ids counted in it

    def add(self, placement: str, slots: int, tiers: Iterable[str] = ()) -> None:
        """One answered request of ``placement`` asking for ``slots`` slots; ``tiers``:
        the tier of each slot its answer filled (none for a no fill, shed or late).

        Raises:
            KeyError: a tier not in :data:`adfunnel.serving.tiers.TIERS`.
        """
        t = self.clock.now().timestamp()
        held = self._quarter
        if held is None or not held[0] <= t < held[0] + QUARTER_S:  # most adds share it
            quarter = quarter_of(datetime.fromtimestamp(t, UTC))
            held = self._quarter = (quarter.timestamp(), quarter)
        with self._lock:
            quarter, names = self._names
            if quarter != held[1]:
                quarter, names = self._names = (held[1], set())
            if placement not in names:
                if len(names) >= MAX_PLACEMENTS_PER_QUARTER and not self.configured(placement):
                    placement = OTHER
                names.add(placement)
            key = (placement, held[1])
            row = self._counts.get(key)
            if row is None:
                row = self._counts[key] = [0] * len(COLUMNS)
            row[0] += 1
            row[1] += slots
            for tier in tiers:
                row[_TIER_COLUMN[tier]] += 1

    def drain(self) -> Counts:
        """The counts held, taken (the next drain starts from zero)."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts

    def give_back(self, counts: Counts) -> None:
        """Add ``counts`` (a drain that could not be stored) back to those held."""
        with self._lock:
            for key, n in counts.items():
                row = self._counts.get(key)
                if row is None:
                    self._counts[key] = list(n)
                else:
                    row[:] = [a + b for a, b in zip(row, n, strict=True)]


class SqlPlacementTraffic:
    """The ``placement_traffic`` table: additive writes from every ad-server process."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert

    def add(self, counts: Counts) -> None:
        """Add ``counts`` to the stored totals (an upsert per row, one transaction)."""
        if not counts:
            return
        rows = [{"placement": p, "quarter_start": q, **dict(zip(COLUMNS, n, strict=True))}
                for (p, q), n in counts.items()]
        stmt = self._insert(placement_traffic).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=["quarter_start", "placement"],
            set_={c: placement_traffic.c[c] + stmt.excluded[c] for c in COLUMNS},
        )
        with connection_guard(self.engine), self.engine.begin() as conn:
            conn.execute(stmt)

    def quarters(self, placement: str, start: datetime, end: datetime
                 ) -> list[tuple[datetime, dict[str, int]]]:
        """(UTC quarter start, {column: count}) of ``placement`` for the quarters
        starting in [``start``, ``end``) (aware), sorted by quarter."""
        t = placement_traffic.c
        q = (select(t.quarter_start, *(t[c] for c in COLUMNS))
             .where(t.placement == placement,
                    t.quarter_start >= _utc(start), t.quarter_start < _utc(end))
             .order_by(t.quarter_start))
        with connection_guard(self.engine), self.engine.connect() as conn:
            return [(_utc(row[0]), {c: int(v) for c, v in zip(COLUMNS, row[1:], strict=True)})
                    for row in conn.execute(q)]

    def seen(self, placement: str) -> bool:
        """Whether ``placement`` was ever counted (in any process that flushed)."""
        t = placement_traffic.c
        q = select(t.placement).where(t.placement == placement).limit(1)
        with connection_guard(self.engine), self.engine.connect() as conn:
            return conn.execute(q).first() is not None


class PlacementTraffic:
    """One process's counter and the shared table: what the select route counts into
    and what the report reads (after adding this process's counts, so one process's
    report is exact; other processes' counts arrive within their flush period)."""

    def __init__(self, clock: Clock, engine: Engine,
                 configured: Callable[[str], bool] = lambda _: False) -> None:
        self.counter = PlacementCounter(clock, configured)
        self.table = SqlPlacementTraffic(engine)

    def flush(self) -> None:
        """Add this process's counts to the table; counts the database refused stay
        held for the next flush.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the write failed (nothing is lost).
        """
        counts = self.counter.drain()
        try:
            self.table.add(counts)
        except Exception:
            self.counter.give_back(counts)
            raise

    def quarters(self, placement: str, start: datetime, end: datetime
                 ) -> list[tuple[datetime, dict[str, int]]]:
        """:meth:`SqlPlacementTraffic.quarters`, after a :meth:`flush`."""
        self.flush()
        return self.table.quarters(placement, start, end)


def _utc(at: datetime) -> datetime:
    """An instant as aware UTC (SQLite gives back naive UTC wall time)."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
