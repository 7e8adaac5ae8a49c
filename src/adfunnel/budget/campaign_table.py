"""The campaign table's budget columns in one query: the budget service's bulk start-up read.

At 10⁶ campaigns making record objects alone takes longer than the whole start may, so
the store's rows go straight into :class:`~adfunnel.budget.columns.CampaignColumns`:
the database turns codes and dates into integers, fetched as one int64 matrix.
"""

from __future__ import annotations

import json
from datetime import date

import numpy as np
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Date,
    Engine,
    Integer,
    case,
    cast,
    func,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB

from adfunnel.budget.columns import BID_TYPES, NO_END, PERIODS, PRIORITIES, CampaignColumns
from adfunnel.campaigns.model import BidStrategy, BudgetPeriod, CampaignStatus, Daypart, PacingMode
from adfunnel.campaigns.tables import campaigns as campaigns_table
from adfunnel.db import connection_guard


def read_campaign_columns(engine: Engine) -> CampaignColumns:
    """Every campaign's budget fields as columns (no record objects: at 10⁶ campaigns
    making them alone takes longer than the whole start may). Two queries: the time
    zones in use, then one row of integers per campaign (the database turns codes and
    dates into integers), fetched through the driver's cursor into one int64 matrix."""
    t = campaigns_table.c
    with connection_guard(engine), engine.connect() as conn:
        zones = [z for (z,) in conn.execute(select(t.time_zone).distinct())]
        q = select(
            t.id, t.version, _code(t.bid_type, [b.value for b in BID_TYPES]), t.bid_micros,
            t.daily_budget_micros, func.coalesce(t.lifetime_budget_micros, -1),
            _code(t.status, [CampaignStatus.ACTIVE.value], 1),
            _code(t.pacing_mode, [PacingMode.ACCELERATED.value, PacingMode.EVEN.value,
                                  PacingMode.FRONTLOADED.value]),
            _ordinal(engine, t.flight_start),
            func.coalesce(_ordinal(engine, t.flight_end), NO_END),
            _code(t.time_zone, zones),
            _code(t.priority, [p.value for p in PRIORITIES]),
            _code(t.budget_period, [p.value for p in PERIODS]),
            func.coalesce(t.flight_budget_micros, -1),
            func.coalesce(_goal_total(engine, t.goal), -1),
            _code(t.bid_strategy, [BidStrategy.MANUAL.value]))
        sql = str(q.compile(engine, compile_kwargs={"literal_binds": True}))
        cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cur.execute(sql)
            rows = cur.fetchall()
        finally:
            cur.close()
        # the few campaigns with dayparts (their curves keep to them): one more query
        parts = {int(i): _dayparts(text) for i, text in conn.execute(
            select(t.id, t.dayparts).where(t.dayparts != "[]"))}
    m = np.array(rows, dtype=np.int64).reshape(len(rows), 16)
    pacing = m[:, 7]
    dayparts = {k: v for k, v in parts.items() if v}
    return CampaignColumns(
        ids=m[:, 0].copy(), versions=m[:, 1].copy(), bid=m[:, 2].astype(np.int8),
        bid_micros=m[:, 3].copy(), daily=m[:, 4].copy(), lifetime=m[:, 5].copy(),
        active=m[:, 6] == 0, even=(pacing == 1) | (pacing == 2), accel=pacing == 0,
        fstart=m[:, 8].copy(), fend=m[:, 9].copy(), tz=m[:, 10].copy(), zones=zones,
        priority=m[:, 11].astype(np.int8), period=m[:, 12].astype(np.int8),
        flight_budget=m[:, 13].copy(), goal_total=m[:, 14].copy(), front=pacing == 2,
        dayparts=dayparts,
        # the campaigns whose record the service reads (their periods, dayparts,
        # frontloading: adfunnel.budget.periods.special; an automatic strategy: λ)
        special=(m[:, 12] != PERIODS.index(BudgetPeriod.DAY)) | (pacing == 2) | (m[:, 15] != 0)
        | np.isin(m[:, 0], np.fromiter(dayparts, dtype=np.int64, count=len(dayparts))))


def _dayparts(text: str) -> tuple[Daypart, ...]:
    """The ``dayparts`` column (a JSON list of {weekdays, start_hour, end_hour})."""
    return tuple(Daypart(tuple(int(d) for d in p["weekdays"]), int(p["start_hour"]),
                         int(p["end_hour"])) for p in json.loads(text or "[]"))


def _code(col: ColumnElement[str], values: list[str], other: int | None = None,
          ) -> ColumnElement[int]:
    """``values.index(col)`` in SQL (``other``, default ``len(values)``, for the rest)."""
    if not values:
        return literal(0)
    return case(*((col == v, i) for i, v in enumerate(values)),
                else_=len(values) if other is None else other)


def _goal_total(engine: Engine, col: ColumnElement[str]) -> ColumnElement[int]:
    """The ``total`` of a goal's JSON text in SQL (NULL without a goal or a total: a
    share goal's JSON has none)."""
    if engine.dialect.name == "postgresql":
        path = func.jsonb_extract_path_text(cast(col, JSONB), literal("total"))
        return cast(path, BigInteger)
    return cast(func.json_extract(col, literal("$.total")), BigInteger)


def _ordinal(engine: Engine, col: ColumnElement[date]) -> ColumnElement[int]:
    """``date.toordinal()`` of a DATE column in SQL (NULL stays NULL)."""
    if engine.dialect.name == "postgresql":
        return cast(col - literal(date(1, 1, 1), Date), Integer) + 1
    return cast(func.julianday(col) - 1721424.5, Integer)
