"""The SQL ledger's reads: billed totals per campaign and per local day, the expected
cost settled since a time, the row counts and the durable counters.

:class:`SqlLedgerReads` is the read half of :class:`~adfunnel.billing.sql_ledger.SqlLedger`;
each read is one query on its own connection.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Engine, and_, func, or_, select

from adfunnel.billing.batch_model import DUPLICATES_REJECTED
from adfunnel.billing.model import MEASUREMENT, DayTotals, LedgerStats
from adfunnel.billing.tables import campaign_day_spend, campaign_spend, ledger, ledger_counters
from adfunnel.db import connection_guard


class SqlLedgerReads:
    """Reads over the tables of :mod:`adfunnel.billing.tables` (which must exist)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._guard = connection_guard(engine)

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
        # coalesce(served_at, occurred_at) >= since, spelled so that the (day, served_at)
        # index reads only the day's rows since the watermark
        recent = or_(t.c.served_at >= since,
                     and_(t.c.served_at.is_(None), t.c.occurred_at >= since))
        query = (
            select(t.c.campaign_id, func.sum(settles))
            .where(t.c.day == day, recent)
            .group_by(t.c.campaign_id)
            .having(func.sum(settles) > 0)
        )
        with self._guard, self._engine.connect() as conn:
            return {cid: int(total) for cid, total in conn.execute(query)}

    def stats(self) -> LedgerStats:
        """Ledger rows and duplicates rejected so far (durable)."""
        with self._guard, self._engine.connect() as conn:
            kinds = dict(conn.execute(select(ledger.c.event_type, func.count())
                                      .group_by(ledger.c.event_type)).all())
            measured = sum(int(kinds.pop(k.value, 0)) for k in MEASUREMENT)
            rows = sum(int(n) for n in kinds.values())
            dups = conn.execute(
                select(ledger_counters.c.value).where(ledger_counters.c.name == DUPLICATES_REJECTED)
            ).scalar_one_or_none()
        return LedgerStats(rows, dups or 0, measured)

    def counters(self) -> dict[str, int]:
        """Every durable counter by name."""
        with self._guard, self._engine.connect() as conn:
            return dict(conn.execute(select(ledger_counters.c.name, ledger_counters.c.value)).all())
