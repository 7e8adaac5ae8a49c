"""The ledger on SQL (SQLite or PostgreSQL via psycopg 3), SQLAlchemy 2 Core.

Same rules as :class:`adfunnel.billing.ledger.MemoryLedger`, made durable and safe
across threads and processes. A batch (``record_many``; ``record`` is a batch of one)
runs in ONE transaction with a fixed number of statements, whatever its size:

1. upsert the ``campaign_spend`` rows of its campaigns and lock them in id order
   (``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite the first write takes the
   database's write lock, ``BEGIN IMMEDIATE`` semantics): every writer of a campaign —
   on any of its days, so two local days racing at midnight too — queues on that row
   and sees the previous one's totals;
2. the same for the ``campaign_day_spend`` rows of its (campaign, local day)s;
3. read the ledger, invalid-traffic and held rows of its impression ids;
4. plan every write in log order in Python (:func:`adfunnel.billing.batch.plan_batch`:
   duplicates, held clicks released, budgets split, per-mille carry);
5. insert the new rows (``ON CONFLICT DO NOTHING RETURNING``: a missing row means a
   writer that skipped the locks — the batch is rolled back, never half-applied), and
   add to the totals and counters with one executemany each.

Invariants: billed + absorbed == the whole micros the event made due for every row
(its charge; for a per-mille charge floor((carry + price) / 1000), never rounded up);
a campaign-day's billed total never exceeds the daily budget passed with each charge
(when the same budget is passed; a lowered budget bills nothing more, it never un-bills).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, date, datetime
from typing import Any

import psycopg.errors
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    Row,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    func,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite

from adfunnel.billing.batch import (
    DUPLICATES_REJECTED,
    BatchPlan,
    DayKey,
    Held,
    Key,
    LedgerWrite,
    NewRow,
    plan_batch,
    validate,
)
from adfunnel.billing.model import (
    EVENT_TYPES,
    DayTotals,
    EventType,
    LedgerEvent,
    LedgerStats,
    Outcome,
    Recorded,
)
from adfunnel.billing.tables import (
    campaign_day_spend,
    campaign_spend,
    ledger,
    ledger_counters,
    ledger_held,
    ledger_ivt,
)
from adfunnel.db import connection_guard, pg_insert_columns, sqlite_lock


class SqlLedger:
    """Billing ledger over the tables of :mod:`adfunnel.billing.tables`.

    The tables must exist (Alembic migrations, or ``metadata.create_all`` in tests).

    Raises:
        ValueError: on construction, for an engine that is neither SQLite nor PostgreSQL.
    """

    def __init__(self, engine: Engine) -> None:
        dialect = engine.dialect.name
        if dialect == "postgresql":
            self._insert: Callable[..., Any] = postgresql.insert
            self._lock: AbstractContextManager[object] = nullcontext()
        elif dialect == "sqlite":
            self._insert = sqlite.insert
            self._lock = sqlite_lock(engine)  # one per database in this process (adfunnel.db)
        else:
            raise ValueError(f"SqlLedger supports sqlite and postgresql, not {dialect!r}")
        self._engine = engine
        self._guard = connection_guard(engine)
        self._for_update = self._pg = dialect == "postgresql"

    def record(
        self, event: LedgerEvent, daily_budget_micros: int,
        lifetime_budget_micros: int | None = None,
    ) -> Recorded:
        """Record ``event`` at most once, billing no more than the remaining budget (a
        batch of one, :meth:`record_many`).

        ``daily_budget_micros`` is the campaign's budget for ``event.day`` in micros;
        ``lifetime_budget_micros`` its lifetime budget (None: none). Remaining =
        min(daily − billed on the day, lifetime − billed on every day).
        Returns BILLED (a new row; ``billed + absorbed == charge``), DUPLICATE (the
        (impression id, event type) row exists; counted as ``duplicates_rejected``),
        HELD (a click before its impression; ``clicks_without_impression``) or
        NOT_BILLABLE (a conversion after its window; ``conversions_outside_window``).

        Raises:
            MoneyError: for a negative or non-integer charge or budget.
            sqlalchemy.exc.SQLAlchemyError: database errors (on SQLite also "database is
                locked" after the 30 s busy timeout under heavy multi-process load); the
                transaction is rolled back and nothing is recorded, so retrying is safe.
        """
        write = LedgerWrite(event, daily_budget_micros, lifetime_budget_micros)
        return self.record_many([write]).recorded[0]

    def record_invalid(self, event: LedgerEvent, reason: str) -> bool:
        """See :meth:`adfunnel.billing.ledger.Ledger.record_invalid`.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: database errors; nothing is recorded.
        """
        write = LedgerWrite(event, ivt_reason=reason)
        return self.record_many([write]).recorded[0].outcome is Outcome.INVALID

    def record_many(self, writes: Sequence[LedgerWrite]) -> BatchPlan:
        """Record a batch in ONE transaction (:meth:`Ledger.record_many`): lock its
        campaigns' and campaign-days' totals, load its impression ids' rows, plan in
        Python (:func:`adfunnel.billing.batch.plan_batch`), write set-based.

        Raises:
            MoneyError: for a negative or non-integer charge or budget (nothing is
                recorded).
            sqlalchemy.exc.SQLAlchemyError: database errors; the transaction is rolled
                back and nothing is recorded, so retrying is safe.
        """
        validate(writes)
        if not writes:
            return BatchPlan()
        with self._lock, self._guard, self._engine.begin() as conn:
            view = self._load(conn, writes)
            plan = plan_batch(view, writes)
            self._write(conn, plan)
            return plan

    def _load(self, conn: Connection, writes: Sequence[LedgerWrite]) -> _LoadedView:
        """Lock the batch's campaign rows (in id order) and then its campaign-day rows,
        and read what it touches: with every writer of a campaign queued on its row,
        what this reads stays true until the commit."""
        view = _LoadedView()
        campaigns = {w.event.campaign_id for w in writes}
        view.lifetime = self._lock_campaigns(conn, campaigns)
        ids = sorted({w.event.impression_id for w in writes})
        h = ledger_held.c
        for row in conn.execute(select(ledger_held).where(self._in_ids(h.impression_id, ids))):
            view.held_rows[(row.impression_id, EVENT_TYPES[row.event_type])] = _held(row)
        extra = {held.write.event.campaign_id for held in view.held_rows.values()} - campaigns
        if extra:  # (never for signed tokens: one impression id, one campaign)
            view.lifetime.update(self._lock_campaigns(conn, extra))
        day_keys = {(w.event.campaign_id, w.event.day) for w in writes if w.ivt_reason is None}
        day_keys |= {(held.write.event.campaign_id, held.write.event.day)
                     for held in view.held_rows.values() if held.waiting}
        view.days = self._lock_days(conn, day_keys)
        t = ledger.c
        for iid, etype, at in conn.execute(
                select(t.impression_id, t.event_type, t.occurred_at)
                .where(self._in_ids(t.impression_id, ids))):
            view.rows[(iid, EVENT_TYPES[etype])] = _aware(at)
        v = ledger_ivt.c
        for iid, etype, reason in conn.execute(
                select(v.impression_id, v.event_type, v.reason)
                .where(self._in_ids(v.impression_id, ids))):
            view.invalid[(iid, EVENT_TYPES[etype])] = reason
        return view

    def _lock_campaigns(self, conn: Connection, campaign_ids: set[int]) -> dict[int, int]:
        """Make the campaigns' lifetime rows exist and lock them in id order; campaign
        id -> billed micros so far."""
        ordered = sorted(campaign_ids)
        self._insert_rows(
            conn, campaign_spend,
            [{"campaign_id": cid, "billed_micros": 0, "absorbed_micros": 0} for cid in ordered],
            conflict=("campaign_id",))
        c = campaign_spend.c
        query = (select(c.campaign_id, c.billed_micros).where(self._in(c.campaign_id, ordered))
                 .order_by(c.campaign_id))
        if self._for_update:
            query = query.with_for_update()
        return {cid: int(billed) for cid, billed in conn.execute(query)}

    def _lock_days(self, conn: Connection, keys: set[DayKey]) -> dict[DayKey, tuple[int, int]]:
        """Make the campaign-days' rows exist and lock them; key -> (billed, carry)."""
        if not keys:
            return {}
        ordered = sorted(keys)
        self._insert_rows(
            conn, campaign_day_spend,
            [{"campaign_id": cid, "day": day, "impressions": 0, "clicks": 0,
              "conversions": 0, "billed_micros": 0, "absorbed_micros": 0,
              "carry_millimicros": 0} for cid, day in ordered],
            conflict=("campaign_id", "day"))
        if self._pg:
            found = conn.execute(_PG_LOCK_DAYS, {"cids": [k[0] for k in ordered],
                                                 "days": [k[1] for k in ordered]})
        else:
            d = campaign_day_spend.c
            found = conn.execute(
                select(d.campaign_id, d.day, d.billed_micros, d.carry_millimicros)
                .where(tuple_(d.campaign_id, d.day).in_(ordered)))
        return {(cid, day): (int(billed), int(carry)) for cid, day, billed, carry in found}

    def _write(self, conn: Connection, plan: BatchPlan) -> None:
        """Apply a plan: a handful of set-based statements, whatever the batch size.

        Raises:
            LedgerConflict: a row the plan inserts exists already (a writer that did not
                queue on the campaign's row); the transaction is rolled back.
        """
        key = ("impression_id", "event_type")
        if self._pg:
            _pg_copy_ledger(conn, plan.rows)
        else:
            inserted = self._insert_rows(conn, ledger, [_ledger_row(r) for r in plan.rows],
                                         conflict=key, returning="id")
            if len(inserted) != len(plan.rows):
                raise LedgerConflict("a ledger row of this batch was recorded concurrently")
        self._insert_rows(conn, ledger_ivt, [_ivt_row(e, why) for e, why in plan.invalid],
                          conflict=key)
        if plan.held:
            keys = [(iid, etype.value) for iid, etype in plan.held]
            if self._pg:
                conn.execute(_PG_UNHOLD, {"ids": [k[0] for k in keys],
                                          "types": [k[1] for k in keys]})
            else:
                h = ledger_held.c
                conn.execute(ledger_held.delete().where(
                    tuple_(h.impression_id, h.event_type).in_(keys)))
            self._insert_rows(conn, ledger_held, [
                _held_row(held) for held in plan.held.values() if held is not None])
        self._write_totals(conn, plan)
        if plan.counters:
            stmt = self._insert(ledger_counters)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["name"],
                    set_={"value": ledger_counters.c.value + stmt.excluded.value}),
                [{"name": name, "value": n} for name, n in sorted(plan.counters.items())])

    def _insert_rows(self, conn: Connection, table: Table, rows: list[dict[str, object]], *,
                     conflict: tuple[str, ...] = (), returning: str | None = None
                     ) -> Sequence[Any]:
        """Insert ``rows`` (dicts with the same keys) in one statement, skipping those
        that conflict on ``conflict``; the ``returning`` column of those inserted."""
        if not rows:
            return []
        if self._pg:
            return pg_insert_columns(conn, table, rows, conflict=conflict, returning=returning)
        stmt = self._insert(table)
        if conflict:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(conflict))
        if returning:
            stmt = stmt.returning(table.c[returning])
        result = conn.execute(stmt, rows)
        return list(result.all()) if returning else []

    def _in_ids(self, column: Column[Any], ids: Sequence[str]) -> ColumnElement[bool]:
        """``column IN ids`` for text ``ids``; on PostgreSQL, when no id is empty or holds
        a comma, ``column = ANY(string_to_array(:ids, ','))``: one text parameter,
        which the driver sends as it is, where an array of a batch's 2,000 ids costs it
        a regular-expression search per element to quote."""
        if self._pg and ids:
            joined = ",".join(ids)
            if joined.count(",") == len(ids) - 1 and all(ids):
                return column == any_(func.string_to_array(
                    bindparam(f"{column.name}_csv", joined, type_=Text()), ","))
        return self._in(column, ids)

    def _in(self, column: Column[Any], values: Sequence[object]) -> ColumnElement[bool]:
        """``column IN values``; on PostgreSQL ``column = ANY(:array)``, one short query
        text whatever the number of values."""
        if self._pg:
            return column == any_(bindparam(f"{column.name}_any", list(values),
                                            type_=postgresql.ARRAY(column.type)))
        return column.in_(values)

    def _write_totals(self, conn: Connection, plan: BatchPlan) -> None:
        """Add the plan's totals to its campaign-days' and campaigns' rows (locked by
        :meth:`_load`); on PostgreSQL one ``UPDATE … FROM unnest(…)`` each."""
        if self._pg:
            self._pg_write_totals(conn, plan)
            return
        d = campaign_day_spend.c
        if plan.days:
            conn.execute(
                campaign_day_spend.update()
                .where(d.campaign_id == bindparam("k_cid"), d.day == bindparam("k_day"))
                .values(impressions=d.impressions + bindparam("k_imp"),
                        clicks=d.clicks + bindparam("k_clk"),
                        conversions=d.conversions + bindparam("k_conv"),
                        billed_micros=d.billed_micros + bindparam("k_billed"),
                        absorbed_micros=d.absorbed_micros + bindparam("k_absorbed"),
                        carry_millimicros=bindparam("k_carry")),
                [{"k_cid": cid, "k_day": day, "k_imp": c.impressions, "k_clk": c.clicks,
                  "k_conv": c.conversions, "k_billed": c.billed, "k_absorbed": c.absorbed,
                  "k_carry": c.carry} for (cid, day), c in sorted(plan.days.items())])
        c = campaign_spend.c
        if plan.lifetime:
            conn.execute(
                campaign_spend.update()
                .where(c.campaign_id == bindparam("k_cid"))
                .values(billed_micros=c.billed_micros + bindparam("k_billed"),
                        absorbed_micros=c.absorbed_micros + bindparam("k_absorbed")),
                [{"k_cid": cid, "k_billed": b, "k_absorbed": a}
                 for cid, (b, a) in sorted(plan.lifetime.items())])

    def _pg_write_totals(self, conn: Connection, plan: BatchPlan) -> None:
        if plan.days:
            days = sorted(plan.days.items())
            conn.execute(_PG_ADD_DAYS, {
                "cids": [cid for (cid, _), _ in days], "days": [day for (_, day), _ in days],
                "imp": [c.impressions for _, c in days], "clk": [c.clicks for _, c in days],
                "conv": [c.conversions for _, c in days], "billed": [c.billed for _, c in days],
                "absorbed": [c.absorbed for _, c in days], "carry": [c.carry for _, c in days]})
        if plan.lifetime:
            life = sorted(plan.lifetime.items())
            conn.execute(_PG_ADD_LIFETIME, {
                "cids": [cid for cid, _ in life], "billed": [b for _, (b, _) in life],
                "absorbed": [a for _, (_, a) in life]})

    def reverse(self, impression_id: str, event_type: EventType, reason: str,
                now: datetime, hold_s: float) -> Recorded | None:
        """See :meth:`adfunnel.billing.ledger.Ledger.reverse`.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: database errors; nothing is changed.
        """
        event_type = EventType(event_type)
        key = and_(ledger.c.impression_id == impression_id,
                   ledger.c.event_type == event_type.value)
        with self._lock, self._guard, self._engine.begin() as conn:
            found = conn.execute(select(ledger.c.campaign_id).where(key)).first()
            if found is None:
                return None
            self._lock_campaigns(conn, {found[0]})  # the same lock order as record()
            row = conn.execute(select(ledger).where(key)).first()
            if row is None or (now - _aware(row.occurred_at)).total_seconds() >= hold_s:
                return None
            conn.execute(ledger.delete().where(ledger.c.id == row.id))
            d = campaign_day_spend.c
            conn.execute(
                campaign_day_spend.update()
                .where(d.campaign_id == row.campaign_id, d.day == row.day)
                .values(
                    impressions=d.impressions - int(event_type is EventType.IMPRESSION),
                    clicks=d.clicks - int(event_type is EventType.CLICK),
                    conversions=d.conversions - int(event_type is EventType.CONVERSION),
                    billed_micros=d.billed_micros - row.billed_micros,
                    absorbed_micros=d.absorbed_micros - row.absorbed_micros,
                )
            )
            conn.execute(
                campaign_spend.update()
                .where(campaign_spend.c.campaign_id == row.campaign_id)
                .values(billed_micros=campaign_spend.c.billed_micros - row.billed_micros,
                        absorbed_micros=campaign_spend.c.absorbed_micros - row.absorbed_micros)
            )
            conn.execute(
                self._insert(ledger_ivt)
                .values(impression_id=impression_id, event_type=event_type.value,
                        reason=reason, campaign_id=row.campaign_id, ad_id=row.ad_id,
                        placement=row.placement, day=row.day, occurred_at=row.occurred_at)
                # a flagged event of the same slot came first: the record now says
                # the slot was reversed (it never bills again)
                .on_conflict_do_update(index_elements=["impression_id", "event_type"],
                                       set_={"reason": reason})
            )
            for name in (f"ivt_{event_type.value}", f"ivt_{event_type.value}_{reason}",
                         "ivt_reversed"):
                self._add(conn, name, 1)
            return Recorded(Outcome.INVALID, row.billed_micros, row.absorbed_micros)

    def lifetime_billed(self, campaign_id: int | None = None) -> dict[int, int]:
        """campaign id -> billed micros over every day (one campaign, or all; none
        without billed spend)."""
        t = campaign_spend.c
        query = select(t.campaign_id, t.billed_micros).where(t.billed_micros > 0)
        if campaign_id is not None:
            query = query.where(t.campaign_id == campaign_id)
        with self._guard, self._engine.connect() as conn:
            return {cid: int(billed) for cid, billed in conn.execute(query)}

    def day_totals(self, campaign_id: int, first: date, last: date) -> list[DayTotals]:
        """Totals for local days ``first``..``last`` inclusive that have any row, by day."""
        t = campaign_day_spend.c
        query = (
            select(t.day, t.impressions, t.clicks, t.billed_micros, t.absorbed_micros,
                   t.conversions)
            .where(t.campaign_id == campaign_id, t.day >= first, t.day <= last)
            # leave out rows upserted for rejected events
            .where(t.impressions + t.clicks + t.conversions > 0)
            .order_by(t.day)
        )
        with self._guard, self._engine.connect() as conn:
            return [DayTotals(*row[:5], conversions=row[5]) for row in conn.execute(query)]

    def billed_on(self, day: date) -> dict[int, int]:
        """campaign id -> billed micros on local ``day`` (what budgets count as spent)."""
        t = campaign_day_spend.c
        query = select(t.campaign_id, t.billed_micros).where(
            t.day == day, t.impressions + t.clicks + t.conversions > 0
        )
        with self._guard, self._engine.connect() as conn:
            return {cid: billed for cid, billed in conn.execute(query)}

    def settled_since(self, day: date, since: datetime) -> dict[int, int]:
        """campaign id -> expected cost settled by the events on local ``day`` of serves
        at or after ``since`` (serve time; event time for rows without one), micros."""
        t = ledger
        settles = func.coalesce(t.c.settles_micros, t.c.billed_micros)
        query = (
            select(t.c.campaign_id, func.sum(settles))
            .where(t.c.day == day, func.coalesce(t.c.served_at, t.c.occurred_at) >= since)
            .group_by(t.c.campaign_id)
            .having(func.sum(settles) > 0)
        )
        with self._guard, self._engine.connect() as conn:
            return {cid: int(total) for cid, total in conn.execute(query)}

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the named durable counter (e.g. ``invalid_tokens``)."""
        with self._lock, self._guard, self._engine.begin() as conn:
            self._add(conn, name, n)

    def stats(self) -> LedgerStats:
        """Ledger rows and duplicates rejected so far (durable)."""
        with self._guard, self._engine.connect() as conn:
            rows = conn.execute(select(func.count()).select_from(ledger)).scalar_one()
            dups = conn.execute(
                select(ledger_counters.c.value).where(ledger_counters.c.name == DUPLICATES_REJECTED)
            ).scalar_one_or_none()
        return LedgerStats(rows, dups or 0)

    def counters(self) -> dict[str, int]:
        """Every durable counter by name."""
        with self._guard, self._engine.connect() as conn:
            return dict(conn.execute(select(ledger_counters.c.name, ledger_counters.c.value)).all())

    def _add(self, conn: Connection, name: str, n: int) -> None:
        stmt = self._insert(ledger_counters).values(name=name, value=n)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["name"],
                set_={"value": ledger_counters.c.value + stmt.excluded.value},
            )
        )


def _ledger_row(row: NewRow) -> dict[str, object]:
    e = row.event
    return {"impression_id": e.impression_id, "event_type": EVENT_TYPES[e.event_type].value,
            "campaign_id": e.campaign_id, "ad_id": e.ad_id, "placement": e.placement,
            "billing_type": e.billing_type, "charge_micros": row.charge,
            "charge_millimicros": row.exact, "billed_micros": row.billed,
            "absorbed_micros": row.absorbed, "day": e.day, "occurred_at": e.occurred_at,
            "served_at": e.served_at, "settles_micros": e.expected_micros}


def _pg_copy_ledger(conn: Connection, rows: Sequence[NewRow]) -> None:
    """Insert the new ledger rows with one binary ``COPY`` (PostgreSQL), values dumped
    by the driver's C code, column by column as :func:`_ledger_row` names them.

    Raises:
        LedgerConflict: one of them exists already (a writer that did not queue on the
            campaign's row): the unique (impression id, event type) refused the COPY,
            and the transaction is rolled back.
    """
    if not rows:
        return
    driver = conn.connection.driver_connection
    assert driver is not None
    names = _EVENT_TYPE_TEXT
    try:
        with driver.cursor() as cursor, cursor.copy(_PG_COPY_LEDGER) as copy:
            copy.set_types(_PG_COPY_LEDGER_TYPES)
            write = copy.write_row
            for r in rows:
                e = r.event
                write((e.impression_id, names[e.event_type], e.campaign_id, e.ad_id,
                       e.placement, e.billing_type, r.charge, r.exact, r.billed, r.absorbed,
                       e.day, e.occurred_at, e.served_at, e.expected_micros))
    except psycopg.errors.UniqueViolation as exc:
        raise LedgerConflict("a ledger row of this batch was recorded concurrently") from exc


#: event type (member or value) -> its column text
_EVENT_TYPE_TEXT: dict[str, str] = {t.value: t.value for t in EventType}
_PG_COPY_LEDGER = (
    "COPY ledger (impression_id, event_type, campaign_id, ad_id, placement, billing_type,"
    " charge_micros, charge_millimicros, billed_micros, absorbed_micros, day, occurred_at,"
    " served_at, settles_micros) FROM STDIN (FORMAT BINARY)")
_PG_COPY_LEDGER_TYPES = ("text", "text", "int8", "int8", "text", "text", "int8", "int8",
                         "int8", "int8", "date", "timestamptz", "timestamptz", "int8")


def _ivt_row(e: LedgerEvent, reason: str) -> dict[str, object]:
    return {"impression_id": e.impression_id, "event_type": EVENT_TYPES[e.event_type].value,
            "reason": reason, "campaign_id": e.campaign_id, "ad_id": e.ad_id,
            "placement": e.placement, "day": e.day, "occurred_at": e.occurred_at}


def _held_row(held: Held) -> dict[str, object]:
    e = held.write.event
    return {"impression_id": e.impression_id, "event_type": EVENT_TYPES[e.event_type].value,
            "reason": held.reason, "campaign_id": e.campaign_id, "ad_id": e.ad_id,
            "placement": e.placement, "billing_type": e.billing_type,
            "charge_micros": e.charge_micros, "charge_per_mille": e.charge_per_mille,
            "day": e.day, "occurred_at": e.occurred_at, "served_at": e.served_at,
            "expected_micros": e.expected_micros,
            "attribution_window_s": e.attribution_window_s}


def _held(row: Row[Any]) -> Held:
    """A ``ledger_held`` row back as the event it holds (budgets come with its release)."""
    event = LedgerEvent(
        impression_id=row.impression_id, event_type=EventType(row.event_type),
        campaign_id=row.campaign_id, ad_id=row.ad_id, placement=row.placement,
        billing_type=row.billing_type, charge_micros=row.charge_micros,
        occurred_at=_aware(row.occurred_at), day=row.day,
        charge_per_mille=bool(row.charge_per_mille),
        served_at=None if row.served_at is None else _aware(row.served_at),
        expected_micros=row.expected_micros, attribution_window_s=row.attribution_window_s)
    return Held(LedgerWrite(event), row.reason)


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes for timezone-aware columns: they are UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


# Lock campaign-day rows given as two arrays, in key order (PostgreSQL).
_PG_LOCK_DAYS = text(
    "SELECT d.campaign_id, d.day, d.billed_micros, d.carry_millimicros"
    " FROM campaign_day_spend d"
    " JOIN unnest(CAST(:cids AS bigint[]), CAST(:days AS date[])) AS k(campaign_id, day)"
    " ON d.campaign_id = k.campaign_id AND d.day = k.day"
    " ORDER BY d.campaign_id, d.day FOR UPDATE OF d")
# Add a batch's totals to its (locked) campaign-day and campaign rows, given as arrays.
_PG_ADD_DAYS = text(
    "UPDATE campaign_day_spend AS d SET impressions = d.impressions + k.imp,"
    " clicks = d.clicks + k.clk, conversions = d.conversions + k.conv,"
    " billed_micros = d.billed_micros + k.billed,"
    " absorbed_micros = d.absorbed_micros + k.absorbed, carry_millimicros = k.carry"
    " FROM unnest(CAST(:cids AS bigint[]), CAST(:days AS date[]), CAST(:imp AS bigint[]),"
    " CAST(:clk AS bigint[]), CAST(:conv AS bigint[]), CAST(:billed AS bigint[]),"
    " CAST(:absorbed AS bigint[]), CAST(:carry AS bigint[]))"
    " AS k(campaign_id, day, imp, clk, conv, billed, absorbed, carry)"
    " WHERE d.campaign_id = k.campaign_id AND d.day = k.day")
_PG_ADD_LIFETIME = text(
    "UPDATE campaign_spend AS c SET billed_micros = c.billed_micros + k.billed,"
    " absorbed_micros = c.absorbed_micros + k.absorbed"
    " FROM unnest(CAST(:cids AS bigint[]), CAST(:billed AS bigint[]),"
    " CAST(:absorbed AS bigint[])) AS k(campaign_id, billed, absorbed)"
    " WHERE c.campaign_id = k.campaign_id")
_PG_UNHOLD = text(
    "DELETE FROM ledger_held WHERE (impression_id, event_type) IN"
    " (SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:types AS text[])))")


class LedgerConflict(RuntimeError):
    """A ledger row a batch planned to insert was recorded meanwhile by a writer that
    did not lock its campaign first; the batch was rolled back (retrying is safe)."""


class _LoadedView:
    """What :meth:`SqlLedger._load` read, as a :class:`~adfunnel.billing.batch.LedgerView`."""

    def __init__(self) -> None:
        self.rows: dict[Key, datetime] = {}
        self.invalid: dict[Key, str] = {}  # key -> reason
        self.held_rows: dict[Key, Held] = {}
        self.days: dict[DayKey, tuple[int, int]] = {}
        self.lifetime: dict[int, int] = {}

    def held(self, key: Key) -> Held | None:
        return self.held_rows.get(key)

    def row_time(self, key: Key) -> datetime | None:
        return self.rows.get(key)

    def invalid_reason(self, key: Key) -> str | None:
        return self.invalid.get(key)

    def day(self, key: DayKey) -> tuple[int, int]:
        return self.days.get(key, (0, 0))

    def lifetime_billed(self, campaign_id: int) -> int:
        return self.lifetime.get(campaign_id, 0)
