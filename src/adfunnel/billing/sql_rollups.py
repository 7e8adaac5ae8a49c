"""Quarter-hour ledger rollups on SQL (SQLite or PostgreSQL), SQLAlchemy 2 Core.

Same rules as :class:`adfunnel.billing.rollup_store.MemoryRollupStore`, over the tables of
:mod:`adfunnel.billing.rollup_tables`, read from ``ledger`` and ``ledger_ivt`` of the same
database (joined to ``campaigns`` for the advertiser). :meth:`SqlRollupStore.refresh`
runs in ONE transaction:

1. PostgreSQL: ``pg_advisory_xact_lock`` serialises refreshes (two racing refreshes of an
   hour would otherwise both insert it); SQLite: the database's in-process write lock
   (:func:`adfunnel.db.sqlite_lock`) and its own write lock, taken by the first DELETE;
2. per run of consecutive hours, DELETE the rollup rows of those hours;
3. per quarter-hour of those hours, ``INSERT … SELECT … GROUP BY`` from the ledger rows
   with ``occurred_at`` in [quarter, quarter + 15 min) (index ``ix_ledger_occurred_at``),
   and the same from ``ledger_ivt``.

A ledger row committed before ``refresh`` starts is counted; one committed during it is
counted by the next refresh of its hour. Hours are bound as UTC datetimes: SQLite stores
``DateTime`` without its offset, and the ledger's ``occurred_at`` values are UTC.

Cost: a refresh of one hour is 10 statements (2 deletes, 8 inserts), together reading
that hour's rows once through an index; a report reads the rollups grouped by (quarter,
group) in SQL and buckets local hours and days in Python.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Engine,
    Select,
    and_,
    case,
    false,
    func,
    literal,
    select,
    text,
)

from adfunnel.billing.model import MEASUREMENT, EventType
from adfunnel.billing.rollup_tables import rollup_hourly, rollup_hourly_ivt
from adfunnel.billing.rollups import (
    GROUP_COLUMNS,
    QUARTER,
    Granularity,
    GroupBy,
    HourRollup,
    ReportRow,
    aggregate,
    check_scope,
    check_shape,
    hours_of,
    quarters,
    runs,
)
from adfunnel.billing.tables import ledger, ledger_ivt
from adfunnel.campaigns.tables import campaigns
from adfunnel.db import connection_guard, sqlite_lock

#: Arbitrary constant key of the PostgreSQL advisory lock serialising rollup refreshes.
_PG_REFRESH_LOCK = 0x0ADF0B11


class SqlRollupStore:
    """Rollups over the tables of :mod:`adfunnel.billing.rollup_tables`, which must exist
    (Alembic migration 0007, or ``metadata.create_all`` in tests) with ``ledger``,
    ``ledger_ivt`` and ``campaigns``.

    Raises:
        ValueError: on construction, for an engine that is neither SQLite nor PostgreSQL.
    """

    def __init__(self, engine: Engine) -> None:
        dialect = engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"SqlRollupStore supports sqlite and postgresql, not {dialect!r}")
        self._engine = engine
        self._pg = dialect == "postgresql"
        self._lock: AbstractContextManager[object] = (
            nullcontext() if self._pg else sqlite_lock(engine))
        self._guard = connection_guard(engine)

    def refresh(self, hours: Iterable[datetime]) -> int:
        """See :meth:`adfunnel.billing.rollup_store.RollupStore.refresh`.

        Raises:
            ValueError: for a naive datetime.
            sqlalchemy.exc.SQLAlchemyError: database errors; the transaction is rolled
                back and the old rows of those hours stay (retrying is safe).
        """
        wanted = hours_of(hours)
        if not wanted:
            return 0
        with self._lock, self._guard, self._engine.begin() as conn:
            if self._pg:
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_REFRESH_LOCK})
            for start, end in runs(wanted):
                for table in (rollup_hourly, rollup_hourly_ivt):
                    conn.execute(table.delete().where(table.c.hour >= start,
                                                      table.c.hour < end))
            for q in (q for hour in sorted(wanted) for q in quarters(hour)):
                conn.execute(rollup_hourly.insert().from_select(_VALID_COLUMNS, _valid(q)))
                conn.execute(rollup_hourly_ivt.insert().from_select(_IVT_COLUMNS, _ivt(q)))
        return len(wanted)

    def hours(
        self, *, start: datetime, end: datetime,
        campaign_ids: Collection[int] | None = None, advertiser_id: int | None = None,
        placement: str | None = None,
    ) -> list[HourRollup]:
        """See :meth:`adfunnel.billing.rollup_store.RollupStore.hours`."""
        return self._read(start, end, campaign_ids, advertiser_id, None, placement)

    def query(
        self, *, start: datetime, end: datetime,
        campaign_ids: Collection[int] | None = None, advertiser_id: int | None = None,
        granularity: Granularity = "hour", group_by: GroupBy = "campaign",
        time_zone: str = "UTC", placement: str | None = None,
    ) -> list[ReportRow]:
        """See :meth:`adfunnel.billing.rollup_store.RollupStore.query`; the rollups are summed
        per (quarter-hour, group) in SQL first."""
        check_shape(granularity, group_by, time_zone)
        rows = self._read(start, end, campaign_ids, advertiser_id, group_by, placement)
        return aggregate(rows, granularity, group_by, time_zone)

    def _read(
        self, start: datetime, end: datetime, campaign_ids: Collection[int] | None,
        advertiser_id: int | None, group_by: GroupBy | None, placement: str | None = None,
    ) -> list[HourRollup]:
        """Rollups in scope and range; with ``group_by``, summed per (quarter, group), the
        columns outside the group left as placeholders (advertiser 0, ad 0, placement "")
        that :func:`adfunnel.billing.rollups.aggregate` does not read."""
        check_scope(start, end, campaign_ids, advertiser_id, placement)
        start, end = start.astimezone(UTC), end.astimezone(UTC)
        keys = (("advertiser_id", "campaign_id", "ad_id", "placement") if group_by is None
                else GROUP_COLUMNS[group_by])
        r, i = rollup_hourly.c, rollup_hourly_ivt.c
        valid = _scoped(
            select(r.hour, *(r[k] for k in keys), func.sum(r.impressions), func.sum(r.clicks),
                   func.sum(r.conversions), func.sum(r.billed_micros),
                   func.sum(r.absorbed_micros), func.sum(r.rendered), func.sum(r.viewable)),
            rollup_hourly, start, end, campaign_ids, advertiser_id, placement,
        ).group_by(r.hour, *(r[k] for k in keys))
        invalid = _scoped(
            select(i.hour, *(i[k] for k in keys), i.reason, func.sum(i.events)),
            rollup_hourly_ivt, start, end, campaign_ids, advertiser_id, placement,
        ).group_by(i.hour, *(i[k] for k in keys), i.reason)
        cells: dict[tuple[Any, ...], list[Any]] = {}
        with self._guard, self._engine.connect() as conn:
            for row in conn.execute(valid):
                key = (_utc(row[0]), *row[1:1 + len(keys)])
                cells[key] = [*(int(v) for v in row[1 + len(keys):]), {}]
            for row in conn.execute(invalid):
                key = (_utc(row[0]), *row[1:1 + len(keys)])
                cell = cells.setdefault(key, [0, 0, 0, 0, 0, 0, 0, {}])
                cell[7][row[-2]] = int(row[-1])
        out = []
        for key, (imps, clicks, convs, billed, absorbed, rendered, viewable,
                  ivt) in cells.items():
            named = dict(zip(keys, key[1:], strict=True))
            out.append(HourRollup(
                key[0], int(named.get("advertiser_id", 0)), int(named.get("campaign_id", 0)),
                int(named.get("ad_id", 0)), str(named.get("placement", "")),
                imps, clicks, convs, billed, absorbed, dict(sorted(ivt.items())),
                rendered, viewable,
            ))
        out.sort(key=lambda h: (h.hour, h.campaign_id, h.ad_id, h.placement))
        return out


def make_rollup_store(engine: Engine) -> SqlRollupStore:
    """The rollup store of a runtime's database (the tables come with its migrations)."""
    return SqlRollupStore(engine)


# --- statements ---------------------------------------------------------------------------

_VALID_COLUMNS = ["hour", "advertiser_id", "campaign_id", "ad_id", "placement", "impressions",
                  "clicks", "conversions", "billed_micros", "absorbed_micros", "rendered",
                  "viewable"]
_IVT_COLUMNS = ["hour", "advertiser_id", "campaign_id", "ad_id", "placement", "event_type",
                "reason", "events"]


def _count(event_type: EventType) -> ColumnElement[Any]:
    return func.sum(case((ledger.c.event_type == event_type.value, 1), else_=0))


def _valid(quarter: datetime) -> Select[Any]:
    """The rollup rows of one quarter-hour, from ``ledger``."""
    t = ledger.c
    advertiser = func.coalesce(campaigns.c.advertiser_id, 0)
    return (
        select(literal(quarter, DateTime(timezone=True)), advertiser, t.campaign_id, t.ad_id,
               t.placement, _count(EventType.IMPRESSION), _count(EventType.CLICK),
               _count(EventType.CONVERSION), func.sum(t.billed_micros),
               func.sum(t.absorbed_micros), _count(EventType.RENDER),
               _count(EventType.VIEWABLE))
        .select_from(ledger.outerjoin(campaigns, campaigns.c.id == t.campaign_id))
        .where(t.occurred_at >= quarter, t.occurred_at < quarter + QUARTER)
        .group_by(campaigns.c.advertiser_id, t.campaign_id, t.ad_id, t.placement)
    )


def _ivt(quarter: datetime) -> Select[Any]:
    """The IVT rollup rows of one quarter-hour, from ``ledger_ivt``."""
    t = ledger_ivt.c
    advertiser = func.coalesce(campaigns.c.advertiser_id, 0)
    return (
        select(literal(quarter, DateTime(timezone=True)), advertiser, t.campaign_id, t.ad_id,
               t.placement, t.event_type, t.reason, func.count())
        .select_from(ledger_ivt.outerjoin(campaigns, campaigns.c.id == t.campaign_id))
        .where(t.occurred_at >= quarter, t.occurred_at < quarter + QUARTER,
               # an invalid render or viewable beacon is counted with its impression
               t.event_type.not_in([e.value for e in MEASUREMENT]))
        .group_by(campaigns.c.advertiser_id, t.campaign_id, t.ad_id, t.placement,
                  t.event_type, t.reason)
    )


def _scoped(
    query: Select[Any], table: Any, start: datetime, end: datetime,
    campaign_ids: Collection[int] | None, advertiser_id: int | None,
    placement: str | None = None,
) -> Select[Any]:
    c = table.c
    if campaign_ids is not None:
        ids = sorted(set(campaign_ids))
        scope: ColumnElement[bool] = c.campaign_id.in_(ids) if ids else false()
    elif placement is not None:
        scope = c.placement == placement
    else:
        scope = c.advertiser_id == advertiser_id
    return query.where(and_(scope, c.hour >= start, c.hour < end))


def _utc(t: datetime) -> datetime:
    """A quarter read back: SQLite gives it naive (it was stored as UTC), PostgreSQL aware."""
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
