"""The ledger on SQL (SQLite or PostgreSQL via psycopg 3), SQLAlchemy 2 Core.

Same rules as :class:`adfunnel.billing.ledger.MemoryLedger`, made durable and safe
across threads and processes. ``record`` runs in ONE transaction:

1. upsert the ``campaign_spend`` row of the campaign and then the
   ``campaign_day_spend`` row of (campaign, local day) — on SQLite this first write
   takes the database's write lock, so every following read in the
   transaction sees the latest committed totals and no other writer can interleave
   (``BEGIN IMMEDIATE`` semantics); on PostgreSQL it makes the rows exist so that
2. ``SELECT … FOR UPDATE`` can lock them, campaign row first: concurrent charges to
   one campaign — on any of its days, so two local days racing at midnight too —
   queue on that row lock and each sees the previous one's billed totals;
3. a click whose impression has no ledger row is NOT_BILLABLE;
4. ``INSERT … ON CONFLICT DO NOTHING RETURNING id`` on the unique (impression id,
   event type): no row returned means another request recorded it first →
   DUPLICATE (counted). (RETURNING, not rowcount: psycopg under SQLAlchemy 2.1
   reports rowcount -1 for this statement);
5. the campaign's and the day's totals are increased by the billed and absorbed
   parts (remaining = min(daily − billed today, lifetime − billed ever)), the day's carried
   fraction of per-mille (CPM) charges is replaced (:func:`adfunnel.money.bill_per_mille`).

Invariants: billed + absorbed == the whole micros the event made due for every row
(its charge; for a per-mille charge floor((carry + price) / 1000), never rounded up);
a campaign-day's billed total never exceeds the daily budget passed with each charge
(when the same budget is passed; a lowered budget bills nothing more, it never un-bills).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, and_, func, select
from sqlalchemy.dialects import postgresql, sqlite

from adfunnel.billing.ledger import (
    OUTSIDE_WINDOW,
    PREREQUISITE,
    WITHOUT_PREREQUISITE,
    checked_charge,
    lifetime_left,
    outside_window,
    split_charge,
)
from adfunnel.billing.model import (
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
    ledger_ivt,
)
from adfunnel.db import connection_guard, sqlite_lock
from adfunnel.money import bill_per_mille, micros

DUPLICATES_REJECTED = "duplicates_rejected"

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
        self._for_update = dialect == "postgresql"

    def record(
        self, event: LedgerEvent, daily_budget_micros: int,
        lifetime_budget_micros: int | None = None,
    ) -> Recorded:
        """Record ``event`` at most once, billing no more than the remaining budget.

        ``daily_budget_micros`` is the campaign's budget for ``event.day`` in micros;
        ``lifetime_budget_micros`` its lifetime budget (None: none). Remaining =
        min(daily − billed on the day, lifetime − billed on every day).
        Returns BILLED (a new row; ``billed + absorbed == charge``), DUPLICATE (the
        (impression id, event type) row exists; counted as ``duplicates_rejected``) or
        NOT_BILLABLE (a click without an impression row; ``clicks_without_impression``).

        Raises:
            MoneyError: for a negative or non-integer charge or budget.
            sqlalchemy.exc.SQLAlchemyError: database errors (on SQLite also "database is
                locked" after the 30 s busy timeout under heavy multi-process load); the
                transaction is rolled back and nothing is recorded, so retrying is safe.
        """
        exact = checked_charge(event)
        budget = micros(daily_budget_micros, field="daily_budget_micros")
        if lifetime_budget_micros is not None:
            micros(lifetime_budget_micros, field="lifetime_budget_micros")
        event_type = EventType(event.event_type)
        day_key = and_(
            campaign_day_spend.c.campaign_id == event.campaign_id,
            campaign_day_spend.c.day == event.day,
        )
        with self._lock, self._guard, self._engine.begin() as conn:
            lifetime_billed = self._lock_campaign(conn, event.campaign_id)
            conn.execute(
                self._insert(campaign_day_spend)
                .values(
                    campaign_id=event.campaign_id,
                    day=event.day,
                    impressions=0,
                    clicks=0,
                    billed_micros=0,
                    absorbed_micros=0,
                    carry_millimicros=0,
                )
                .on_conflict_do_nothing(index_elements=["campaign_id", "day"])
            )
            t = campaign_day_spend.c
            query = select(t.billed_micros, t.carry_millimicros).where(day_key)
            if self._for_update:
                query = query.with_for_update()
            billed_so_far, carry = conn.execute(query).one()

            needs = PREREQUISITE.get(event_type)
            before = self._row_time(conn, event.impression_id, needs) if needs else None
            if needs is not None and before is None:
                self._add(conn, WITHOUT_PREREQUISITE[event_type], 1)
                return Recorded(Outcome.NOT_BILLABLE)
            if before is not None and outside_window(event, _aware(before)):
                self._add(conn, OUTSIDE_WINDOW, 1)
                return Recorded(Outcome.NOT_BILLABLE)

            if self._row_exists(conn, event.impression_id, event_type, ledger_ivt):
                self._add(conn, DUPLICATES_REJECTED, 1)  # recorded before, as invalid
                return Recorded(Outcome.DUPLICATE)
            charge, carry = bill_per_mille(carry, exact)
            left = lifetime_left(lifetime_budget_micros, lifetime_billed)
            billed, absorbed = split_charge(charge, billed_so_far, budget, left)
            inserted = conn.execute(
                self._insert(ledger)
                .values(
                    impression_id=event.impression_id,
                    event_type=event_type.value,
                    campaign_id=event.campaign_id,
                    ad_id=event.ad_id,
                    placement=event.placement,
                    billing_type=event.billing_type,
                    charge_micros=charge,
                    charge_millimicros=exact,
                    billed_micros=billed,
                    absorbed_micros=absorbed,
                    day=event.day,
                    occurred_at=event.occurred_at,
                    served_at=event.served_at,
                    settles_micros=event.expected_micros,
                )
                .on_conflict_do_nothing(index_elements=["impression_id", "event_type"])
                .returning(ledger.c.id)
            ).first()
            if inserted is None:
                self._add(conn, DUPLICATES_REJECTED, 1)
                return Recorded(Outcome.DUPLICATE)

            d = campaign_day_spend.c
            conn.execute(
                campaign_day_spend.update()
                .where(day_key)
                .values(
                    impressions=d.impressions + int(event_type is EventType.IMPRESSION),
                    clicks=d.clicks + int(event_type is EventType.CLICK),
                    conversions=d.conversions + int(event_type is EventType.CONVERSION),
                    billed_micros=campaign_day_spend.c.billed_micros + billed,
                    absorbed_micros=campaign_day_spend.c.absorbed_micros + absorbed,
                    carry_millimicros=carry,
                )
            )
            conn.execute(
                campaign_spend.update()
                .where(campaign_spend.c.campaign_id == event.campaign_id)
                .values(
                    billed_micros=campaign_spend.c.billed_micros + billed,
                    absorbed_micros=campaign_spend.c.absorbed_micros + absorbed,
                )
            )
            return Recorded(Outcome.BILLED, billed, absorbed,
                            lifetime_left(lifetime_budget_micros, lifetime_billed + billed))

    def record_invalid(self, event: LedgerEvent, reason: str) -> bool:
        """See :meth:`adfunnel.billing.ledger.Ledger.record_invalid`.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: database errors; nothing is recorded.
        """
        event_type = EventType(event.event_type)
        with self._lock, self._guard, self._engine.begin() as conn:
            if self._row_exists(conn, event.impression_id, event_type):
                return False
            inserted = conn.execute(
                self._insert(ledger_ivt)
                .values(impression_id=event.impression_id, event_type=event_type.value,
                        reason=reason, campaign_id=event.campaign_id, ad_id=event.ad_id,
                        placement=event.placement, day=event.day,
                        occurred_at=event.occurred_at)
                .on_conflict_do_nothing(index_elements=["impression_id", "event_type"])
                .returning(ledger_ivt.c.id)
            ).first()
            if inserted is None:
                return False
            self._add(conn, f"ivt_{event_type.value}", 1)
            self._add(conn, f"ivt_{event_type.value}_{reason}", 1)
            return True

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
            self._lock_campaign(conn, found[0])  # the same lock order as record()
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
                .on_conflict_do_nothing(index_elements=["impression_id", "event_type"])
            )
            for name in (f"ivt_{event_type.value}", f"ivt_{event_type.value}_{reason}",
                         "ivt_reversed"):
                self._add(conn, name, 1)
            return Recorded(Outcome.INVALID, row.billed_micros, row.absorbed_micros)

    def _lock_campaign(self, conn: Connection, campaign_id: int) -> int:
        """Make the campaign's lifetime row exist, lock it; its billed micros so far."""
        conn.execute(
            self._insert(campaign_spend)
            .values(campaign_id=campaign_id, billed_micros=0, absorbed_micros=0)
            .on_conflict_do_nothing(index_elements=["campaign_id"])
        )
        query = select(campaign_spend.c.billed_micros).where(
            campaign_spend.c.campaign_id == campaign_id
        )
        if self._for_update:
            query = query.with_for_update()
        return int(conn.execute(query).scalar_one())

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

    @staticmethod
    def _row_time(conn: Connection, impression_id: str, event_type: EventType
                  ) -> datetime | None:
        """When the ledger row (impression id, event type) occurred; None: no row."""
        query = select(ledger.c.occurred_at).where(
            ledger.c.impression_id == impression_id,
            ledger.c.event_type == event_type.value,
        )
        return conn.execute(query.limit(1)).scalar_one_or_none()

    @staticmethod
    def _row_exists(conn: Connection, impression_id: str, event_type: EventType,
                    table: Table = ledger) -> bool:
        query = select(table.c.id).where(
            table.c.impression_id == impression_id,
            table.c.event_type == event_type.value,
        )
        return conn.execute(query.limit(1)).first() is not None


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes for timezone-aware columns: they are UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
