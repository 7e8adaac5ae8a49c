"""The SQL ledger's statements where SQLite and PostgreSQL differ: inserts that skip
conflicting rows, ``IN`` lists, the durable counters' upsert, and the locks on the spend
rows every writer of a campaign queues on (in id order).

:class:`LedgerDialect` is what :class:`~adfunnel.billing.sql_ledger.SqlLedger` writes
through; the row dicts and PostgreSQL's array statements are in
:mod:`adfunnel.billing.sql_ledger_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    Table,
    Text,
    any_,
    bindparam,
    func,
    select,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite

from adfunnel.billing.batch_model import DayKey
from adfunnel.billing.sql_ledger_rows import PG_LOCK_DAYS
from adfunnel.billing.tables import campaign_day_spend, campaign_spend, ledger_counters
from adfunnel.db import pg_insert_columns, sqlite_lock


class LedgerDialect:
    """The ledger's dialect-dependent statements over ``engine``.

    ``lock`` serialises this process's writers on SQLite (one per database,
    :func:`adfunnel.db.sqlite_lock`); on PostgreSQL it is a no-op and rows are locked with
    ``SELECT … FOR UPDATE``.

    Raises:
        ValueError: on construction, for an engine that is neither SQLite nor PostgreSQL.
    """

    def __init__(self, engine: Engine) -> None:
        dialect = engine.dialect.name
        if dialect == "postgresql":
            self.insert: Callable[..., Any] = postgresql.insert
            self.lock: AbstractContextManager[object] = nullcontext()
        elif dialect == "sqlite":
            self.insert = sqlite.insert
            self.lock = sqlite_lock(engine)  # one per database in this process (adfunnel.db)
        else:
            raise ValueError(f"SqlLedger supports sqlite and postgresql, not {dialect!r}")
        self.pg = dialect == "postgresql"

    def lock_campaigns(self, conn: Connection, campaign_ids: set[int]) -> dict[int, int]:
        """Make the campaigns' lifetime rows exist and lock them in id order; campaign
        id -> billed micros so far."""
        ordered = sorted(campaign_ids)
        self.insert_rows(
            conn, campaign_spend,
            [{"campaign_id": cid, "billed_micros": 0, "absorbed_micros": 0} for cid in ordered],
            conflict=("campaign_id",))
        c = campaign_spend.c
        query = (select(c.campaign_id, c.billed_micros).where(self.in_(c.campaign_id, ordered))
                 .order_by(c.campaign_id))
        if self.pg:
            query = query.with_for_update()
        return {cid: int(billed) for cid, billed in conn.execute(query)}

    def lock_days(self, conn: Connection, keys: set[DayKey]) -> dict[DayKey, tuple[int, int]]:
        """Make the campaign-days' rows exist and lock them; key -> (billed, carry)."""
        if not keys:
            return {}
        ordered = sorted(keys)
        self.insert_rows(
            conn, campaign_day_spend,
            [{"campaign_id": cid, "day": day, "impressions": 0, "clicks": 0,
              "conversions": 0, "billed_micros": 0, "absorbed_micros": 0,
              "carry_millimicros": 0} for cid, day in ordered],
            conflict=("campaign_id", "day"))
        if self.pg:
            found = conn.execute(PG_LOCK_DAYS, {"cids": [k[0] for k in ordered],
                                                 "days": [k[1] for k in ordered]})
        else:
            d = campaign_day_spend.c
            found = conn.execute(
                select(d.campaign_id, d.day, d.billed_micros, d.carry_millimicros)
                .where(tuple_(d.campaign_id, d.day).in_(ordered)))
        return {(cid, day): (int(billed), int(carry)) for cid, day, billed, carry in found}

    def insert_rows(self, conn: Connection, table: Table, rows: list[dict[str, object]], *,
                     conflict: tuple[str, ...] = (), returning: str | None = None
                     ) -> Sequence[Any]:
        """Insert ``rows`` (dicts with the same keys) in one statement, skipping those
        that conflict on ``conflict``; the ``returning`` column of those inserted."""
        if not rows:
            return []
        if self.pg:
            return pg_insert_columns(conn, table, rows, conflict=conflict, returning=returning)
        stmt = self.insert(table)
        if conflict:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(conflict))
        if returning:
            stmt = stmt.returning(table.c[returning])
        result = conn.execute(stmt, rows)
        return list(result.all()) if returning else []

    def in_ids(self, column: Column[Any], ids: Sequence[str]) -> ColumnElement[bool]:
        """``column IN ids`` for text ``ids``; on PostgreSQL, when no id is empty or holds
        a comma, ``column = ANY(string_to_array(:ids, ','))``: one text parameter,
        which the driver sends as it is, where an array of a batch's 2,000 ids costs it
        a regular-expression search per element to quote."""
        if self.pg and ids:
            joined = ",".join(ids)
            if joined.count(",") == len(ids) - 1 and all(ids):
                return column == any_(func.string_to_array(
                    bindparam(f"{column.name}_csv", joined, type_=Text()), ","))
        return self.in_(column, ids)

    def in_(self, column: Column[Any], values: Sequence[object]) -> ColumnElement[bool]:
        """``column IN values``; on PostgreSQL ``column = ANY(:array)``, one short query
        text whatever the number of values."""
        if self.pg:
            return column == any_(bindparam(f"{column.name}_any", list(values),
                                            type_=postgresql.ARRAY(column.type)))
        return column.in_(values)

    def add(self, conn: Connection, name: str, n: int) -> None:
        stmt = self.insert(ledger_counters).values(name=name, value=n)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["name"],
                set_={"value": ledger_counters.c.value + stmt.excluded.value},
            )
        )
