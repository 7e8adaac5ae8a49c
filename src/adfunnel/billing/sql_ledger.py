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

The rows and statements it reads and writes: :mod:`adfunnel.billing.sql_ledger_rows`;
where SQLite and PostgreSQL differ (inserts, ``IN`` lists, the locks):
:mod:`adfunnel.billing.sql_ledger_dialect`; its reads: :mod:`adfunnel.billing.sql_ledger_reads`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, Engine, and_, select, tuple_

from adfunnel.billing.batch import plan_batch
from adfunnel.billing.batch_model import BatchPlan, LedgerWrite
from adfunnel.billing.charges import validate
from adfunnel.billing.model import EVENT_TYPES, EventType, LedgerEvent, Outcome, Recorded
from adfunnel.billing.sql_ledger_dialect import LedgerDialect
from adfunnel.billing.sql_ledger_reads import SqlLedgerReads
from adfunnel.billing.sql_ledger_rows import (
    PG_UNHOLD,
    LedgerConflict,
    LoadedView,
    aware,
    held_of,
    held_row,
    ivt_row,
    ledger_row,
    load_period_totals,
    pg_copy_ledger,
    write_totals,
)
from adfunnel.billing.tables import (
    campaign_day_spend,
    campaign_spend,
    ledger,
    ledger_counters,
    ledger_held,
    ledger_ivt,
)


class SqlLedger(SqlLedgerReads):
    """Billing ledger over the tables of :mod:`adfunnel.billing.tables`.

    The tables must exist (Alembic migrations, or ``metadata.create_all`` in tests).

    Raises:
        ValueError: on construction, for an engine that is neither SQLite nor PostgreSQL.
    """

    def __init__(self, engine: Engine) -> None:
        self._sql = LedgerDialect(engine)
        super().__init__(engine)
        self._lock = self._sql.lock
        self._pg = self._sql.pg

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

    def _load(self, conn: Connection, writes: Sequence[LedgerWrite]) -> LoadedView:
        """Lock the batch's campaign rows (in id order) and then its campaign-day rows,
        and read what it touches: with every writer of a campaign queued on its row,
        what this reads stays true until the commit."""
        view = LoadedView()
        campaigns = {w.event.campaign_id for w in writes}
        view.lifetime = self._sql.lock_campaigns(conn, campaigns)
        ids = sorted({w.event.impression_id for w in writes})
        h = ledger_held.c
        for row in conn.execute(select(ledger_held).where(self._sql.in_ids(h.impression_id, ids))):
            view.held_rows[(row.impression_id, EVENT_TYPES[row.event_type])] = held_of(row)
        extra = {held.write.event.campaign_id for held in view.held_rows.values()} - campaigns
        if extra:  # (never for signed tokens: one impression id, one campaign)
            view.lifetime.update(self._sql.lock_campaigns(conn, extra))
        day_keys = {(w.event.campaign_id, w.event.day) for w in writes if w.ivt_reason is None}
        day_keys |= {(held.write.event.campaign_id, held.write.event.day)
                     for held in view.held_rows.values() if held.waiting}
        view.days = self._sql.lock_days(conn, day_keys)
        t = ledger.c
        for iid, etype, at in conn.execute(
                select(t.impression_id, t.event_type, t.occurred_at)
                .where(self._sql.in_ids(t.impression_id, ids))):
            view.rows[(iid, EVENT_TYPES[etype])] = aware(at)
        load_period_totals(conn, view, writes)
        v = ledger_ivt.c
        for iid, etype, reason in conn.execute(
                select(v.impression_id, v.event_type, v.reason)
                .where(self._sql.in_ids(v.impression_id, ids))):
            view.invalid[(iid, EVENT_TYPES[etype])] = reason
        return view


    def _write(self, conn: Connection, plan: BatchPlan) -> None:
        """Apply a plan: a handful of set-based statements, whatever the batch size.

        Raises:
            LedgerConflict: a row the plan inserts exists already (a writer that did not
                queue on the campaign's row); the transaction is rolled back.
        """
        key = ("impression_id", "event_type")
        if self._pg:
            pg_copy_ledger(conn, plan.rows)
        else:
            inserted = self._sql.insert_rows(conn, ledger, [ledger_row(r) for r in plan.rows],
                                         conflict=key, returning="id")
            if len(inserted) != len(plan.rows):
                raise LedgerConflict("a ledger row of this batch was recorded concurrently")
        self._sql.insert_rows(conn, ledger_ivt, [ivt_row(e, why) for e, why in plan.invalid],
                          conflict=key)
        if plan.held:
            keys = [(iid, etype.value) for iid, etype in plan.held]
            if self._pg:
                conn.execute(PG_UNHOLD, {"ids": [k[0] for k in keys],
                                          "types": [k[1] for k in keys]})
            else:
                h = ledger_held.c
                conn.execute(ledger_held.delete().where(
                    tuple_(h.impression_id, h.event_type).in_(keys)))
            self._sql.insert_rows(conn, ledger_held, [
                held_row(held) for held in plan.held.values() if held is not None])
        write_totals(conn, plan, pg=self._pg)
        if plan.counters:
            stmt = self._sql.insert(ledger_counters)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["name"],
                    set_={"value": ledger_counters.c.value + stmt.excluded.value}),
                [{"name": name, "value": n} for name, n in sorted(plan.counters.items())])

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
            self._sql.lock_campaigns(conn, {found[0]})  # the same lock order as record()
            row = conn.execute(select(ledger).where(key)).first()
            if row is None or (now - aware(row.occurred_at)).total_seconds() >= hold_s:
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
                self._sql.insert(ledger_ivt)
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
                self._sql.add(conn, name, 1)
            return Recorded(Outcome.INVALID, row.billed_micros, row.absorbed_micros)
    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the named durable counter (e.g. ``invalid_tokens``)."""
        with self._lock, self._guard, self._engine.begin() as conn:
            self._sql.add(conn, name, n)

