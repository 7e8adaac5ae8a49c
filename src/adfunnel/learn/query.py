"""DuckDB over the served log's Parquet files, and the trainer's input.

:func:`connect` opens an in-memory DuckDB connection with a view ``served`` over
``parquet/date=*/hour=*/*.parquet`` under the served-log directory (hive
partitioning: two more columns, ``date`` DATE and ``hour`` INTEGER, UTC); with no
Parquet file yet the view is empty with the same columns. Only compacted hours are
visible (:mod:`adfunnel.events.compactor`). Columns: :data:`~adfunnel.events.compactor.SCHEMA`.

Example::

    query(d, "SELECT placement, count(*) FROM served GROUP BY ALL")
    query(d, "SELECT w.ad_id, w.pctr FROM (SELECT unnest(winners) AS w FROM served)")

:func:`join_served_with_billed` is the one documented join of the served log with the
billed events: the click model's training rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlalchemy import Engine, select

from adfunnel.billing.tables import ledger
from adfunnel.events.compactor import SCHEMA

#: Columns ``billed`` must have for :func:`join_served_with_billed`.
BILLED_COLUMNS = ("impression_id", "event_type", "billed_micros")
#: The column of billed rows that will flag invalid traffic (bool, true = IVT); the
#: ledger has none yet, the aggregator's IVT verdicts will add it.
IVT_COLUMN = "ivt"

_BILLED_SCHEMA = pa.schema([
    ("impression_id", pa.string()), ("event_type", pa.string()), ("campaign_id", pa.int64()),
    ("ad_id", pa.int64()), ("billing_type", pa.string()), ("billed_micros", pa.int64()),
    ("absorbed_micros", pa.int64()), ("occurred_at", pa.timestamp("us", tz="UTC")),
])


def connect(directory: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB connection with the view ``served`` (module doc).

    The caller closes it.
    """
    con = duckdb.connect()
    files = Path(directory) / "parquet"
    if any(files.glob("date=*/hour=*/*.parquet")):
        glob = str(files / "date=*" / "hour=*" / "*.parquet").replace("'", "''")
        con.execute(
            "CREATE VIEW served AS SELECT * FROM read_parquet("
            f"'{glob}', hive_partitioning = true, union_by_name = true, "
            "hive_types = {'date': DATE, 'hour': INTEGER})"
        )
    else:
        empty = SCHEMA.empty_table()
        con.register("served_empty", empty)
        con.execute("CREATE VIEW served AS SELECT *, NULL::DATE AS date, NULL::INTEGER AS hour"
                    " FROM served_empty")
    return con


def query(directory: str | os.PathLike[str], sql: str,
          params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Run ``sql`` (DuckDB dialect, ``?`` parameters from ``params``) with the view
    ``served`` over ``directory``; its rows as tuples (nested values as Python lists,
    dicts).

    Raises:
        duckdb.Error: the statement failed (syntax, unknown column, …).
    """
    con = connect(directory)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def query_table(directory: str | os.PathLike[str], sql: str,
                params: list[Any] | None = None) -> pa.Table:
    """:func:`query` answering an Arrow table (column types kept).

    Raises:
        duckdb.Error: the statement failed.
    """
    con = connect(directory)
    try:
        rel = con.sql(sql, params=params or None)
        return rel.to_arrow_table() if rel is not None else pa.table({})
    finally:
        con.close()


def billed_events(engine: Engine, *, since: datetime | None = None,
                  until: datetime | None = None) -> pa.Table:
    """The ledger's rows (SQLite or PostgreSQL, :mod:`adfunnel.billing.tables`) as an
    Arrow table for :func:`join_served_with_billed`: impression id, event type,
    campaign id, ad id, billing type, billed and absorbed micros, ``occurred_at`` (UTC),
    optionally only those that occurred in [``since``, ``until``).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the read failed.
    """
    cols = [ledger.c[name] for name in _BILLED_SCHEMA.names]
    stmt = select(*cols)
    if since is not None:
        stmt = stmt.where(ledger.c.occurred_at >= since)
    if until is not None:
        stmt = stmt.where(ledger.c.occurred_at < until)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(stmt)]
    return pa.Table.from_pylist(rows, schema=_BILLED_SCHEMA)


def join_served_with_billed(
    directory: str | os.PathLike[str],
    billed: pa.Table | Iterable[Mapping[str, Any]],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pa.Table:
    """The trainer's input: one row per winner of the served log (per request and slot),
    joined with its billed events by impression id.

    ``billed``: ledger rows (e.g. :func:`billed_events`), an Arrow table or mappings,
    with at least :data:`BILLED_COLUMNS` (``event_type`` ``impression`` / ``click``,
    ``billed_micros`` integer micros). ``since``/``until``: only decisions recorded in
    [since, until) (timezone-aware).

    Columns, one row per (request id, slot id) that a paid ad won: the decision's
    ``request_id``, ``time`` (Unix s), ``date``, ``hour``, ``user_hash``, ``attributes``,
    ``placement``, ``exchange``, ``domain``, ``index_version``, ``model_version``,
    ``exploration``; the winner's ``slot_id``, ``position``, ``impression_id``,
    ``ad_id``, ``campaign_id``, ``advertiser_id``, ``bid_type``, ``bid_micros``,
    ``price_micros``, ``charge_micros``, ``expected_micros``, ``pctr``, ``pcvr``,
    ``quality_micros``, ``total_micros``, ``pacing_p``, ``propensity``, ``model_pctr``
    (the model's raw pCTR before recalibration; ``pctr`` is the one used); and from the
    billed rows ``impressed`` (an impression row exists), ``clicked`` (a click row
    exists), ``converted`` (a billed conversion row exists), ``billed_micros`` (sum
    over the impression's rows, 0 without any). A winner never rendered keeps its row
    with ``impressed`` false: the trainer filters.
    Ordered by time, request id, slot position.

    Invalid traffic: when ``billed`` has the bool column :data:`IVT_COLUMN` (``ivt``),
    every winner with an IVT row is left out entirely (IVT is never used for
    training). The ledger has no such column yet; the aggregator's verdicts add it.

    Raises:
        ValueError: ``billed`` lacks a column of :data:`BILLED_COLUMNS`.
        duckdb.Error: the query failed.
    """
    table = billed if isinstance(billed, pa.Table) else pa.Table.from_pylist(list(billed))
    if table.num_rows == 0 and not table.column_names:
        table = _BILLED_SCHEMA.empty_table()
    missing = [c for c in BILLED_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"billed rows lack columns: {', '.join(missing)}")
    has_ivt = IVT_COLUMN in table.column_names
    ivt = f"bool_or(coalesce({IVT_COLUMN}, false))" if has_ivt else "false"
    where, params = [], []
    if since is not None:
        where.append("time >= ?")
        params.append(since.timestamp())
    if until is not None:
        where.append("time < ?")
        params.append(until.timestamp())
    sql = f"""
        WITH won AS (
            SELECT request_id, time, date, hour, user_hash, attributes, placement, exchange,
                   domain, index_version, model_version, exploration, unnest(winners) AS w
            FROM served {"WHERE " + " AND ".join(where) if where else ""}
        ), per_impression AS (
            SELECT impression_id,
                   bool_or(event_type = 'impression') AS impressed,
                   bool_or(event_type = 'click') AS clicked,
                   bool_or(event_type = 'conversion') AS converted,
                   sum(billed_micros)::BIGINT AS billed_micros,
                   {ivt} AS ivt
            FROM billed_rows GROUP BY impression_id
        )
        SELECT won.request_id, won.time, won.date, won.hour, won.user_hash, won.attributes,
               won.placement, won.exchange, won.domain, won.index_version,
               won.model_version, won.exploration,
               w.slot_id, w.position, w.impression_id, w.ad_id, w.campaign_id,
               w.advertiser_id, w.bid_type, w.bid_micros, w.price_micros, w.charge_micros,
               w.expected_micros, w.pctr, w.pcvr, w.quality_micros, w.total_micros,
               w.pacing_p, w.propensity, w.model_pctr,
               coalesce(b.impressed, false) AS impressed,
               coalesce(b.clicked, false) AS clicked,
               coalesce(b.converted, false) AS converted,
               coalesce(b.billed_micros, 0)::BIGINT AS billed_micros
        FROM won LEFT JOIN per_impression b ON b.impression_id = w.impression_id
        WHERE NOT coalesce(b.ivt, false)
        ORDER BY won.time, won.request_id, w.position, w.slot_id
    """
    con = connect(directory)
    try:
        con.register("billed_rows", table)
        return con.sql(sql, params=params or None).to_arrow_table()
    finally:
        con.close()
