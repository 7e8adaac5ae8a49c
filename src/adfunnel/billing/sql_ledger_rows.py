"""The SQL ledger's rows and statements: events to rows and back, the set-based writes.

What :class:`~adfunnel.billing.sql_ledger.SqlLedger` reads and writes, apart from its
transaction: the dicts of ``ledger``, ``ledger_ivt`` and ``ledger_held`` rows, a held
row back as its event, the binary ``COPY`` of new ledger rows and the array statements
of PostgreSQL, the totals a plan adds, and the view of what a batch read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any

import psycopg.errors
from sqlalchemy import Connection, Row, bindparam, func, select, text

from adfunnel.billing.batch_model import BatchPlan, DayKey, Held, Key, LedgerWrite, NewRow
from adfunnel.billing.limits import month_of
from adfunnel.billing.model import EVENT_TYPES, EventType, LedgerEvent
from adfunnel.billing.tables import campaign_day_spend, campaign_spend


def write_totals(conn: Connection, plan: BatchPlan, *, pg: bool) -> None:
    """Add the plan's totals to its campaign-days' and campaigns' rows (locked by the
    ledger's load); on PostgreSQL (``pg``) one ``UPDATE … FROM unnest(…)`` each."""
    if pg:
        _pg_write_totals(conn, plan)
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

def _pg_write_totals(conn: Connection, plan: BatchPlan) -> None:
    if plan.days:
        days = sorted(plan.days.items())
        conn.execute(PG_ADD_DAYS, {
            "cids": [cid for (cid, _), _ in days], "days": [day for (_, day), _ in days],
            "imp": [c.impressions for _, c in days], "clk": [c.clicks for _, c in days],
            "conv": [c.conversions for _, c in days], "billed": [c.billed for _, c in days],
            "absorbed": [c.absorbed for _, c in days], "carry": [c.carry for _, c in days]})
    if plan.lifetime:
        life = sorted(plan.lifetime.items())
        conn.execute(PG_ADD_LIFETIME, {
            "cids": [cid for cid, _ in life], "billed": [b for _, (b, _) in life],
            "absorbed": [a for _, (_, a) in life]})


def ledger_row(row: NewRow) -> dict[str, object]:
    e = row.event
    return {"impression_id": e.impression_id, "event_type": EVENT_TYPES[e.event_type].value,
            "campaign_id": e.campaign_id, "ad_id": e.ad_id, "placement": e.placement,
            "billing_type": e.billing_type, "charge_micros": row.charge,
            "charge_millimicros": row.exact, "billed_micros": row.billed,
            "absorbed_micros": row.absorbed, "day": e.day, "occurred_at": e.occurred_at,
            "served_at": e.served_at, "settles_micros": e.expected_micros,
            "notice_micros": e.notice_micros, "loss_reason": e.loss_reason}


def pg_copy_ledger(conn: Connection, rows: Sequence[NewRow]) -> None:
    """Insert the new ledger rows with one binary ``COPY`` (PostgreSQL), values dumped
    by the driver's C code, column by column as :func:`ledger_row` names them.

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
                       e.day, e.occurred_at, e.served_at, e.expected_micros,
                       e.notice_micros, e.loss_reason))
    except psycopg.errors.UniqueViolation as exc:
        raise LedgerConflict("a ledger row of this batch was recorded concurrently") from exc


#: event type (member or value) -> its column text
_EVENT_TYPE_TEXT: dict[str, str] = {t.value: t.value for t in EventType}
_PG_COPY_LEDGER = (
    "COPY ledger (impression_id, event_type, campaign_id, ad_id, placement, billing_type,"
    " charge_micros, charge_millimicros, billed_micros, absorbed_micros, day, occurred_at,"
    " served_at, settles_micros, notice_micros, loss_reason) FROM STDIN (FORMAT BINARY)")
_PG_COPY_LEDGER_TYPES = ("text", "text", "int8", "int8", "text", "text", "int8", "int8",
                         "int8", "int8", "date", "timestamptz", "timestamptz", "int8", "int8",
                         "int4")


def ivt_row(e: LedgerEvent, reason: str) -> dict[str, object]:
    return {"impression_id": e.impression_id, "event_type": EVENT_TYPES[e.event_type].value,
            "reason": reason, "campaign_id": e.campaign_id, "ad_id": e.ad_id,
            "placement": e.placement, "day": e.day, "occurred_at": e.occurred_at}


def held_row(held: Held) -> dict[str, object]:
    e = held.write.event
    return {"impression_id": e.impression_id, "event_type": EVENT_TYPES[e.event_type].value,
            "reason": held.reason, "campaign_id": e.campaign_id, "ad_id": e.ad_id,
            "placement": e.placement, "billing_type": e.billing_type,
            "charge_micros": e.charge_micros, "charge_per_mille": e.charge_per_mille,
            "day": e.day, "occurred_at": e.occurred_at, "served_at": e.served_at,
            "expected_micros": e.expected_micros,
            "attribution_window_s": e.attribution_window_s}


def held_of(row: Row[Any]) -> Held:
    """A ``ledger_held`` row back as the event it holds (budgets come with its release)."""
    event = LedgerEvent(
        impression_id=row.impression_id, event_type=EventType(row.event_type),
        campaign_id=row.campaign_id, ad_id=row.ad_id, placement=row.placement,
        billing_type=row.billing_type, charge_micros=row.charge_micros,
        occurred_at=aware(row.occurred_at), day=row.day,
        charge_per_mille=bool(row.charge_per_mille),
        served_at=None if row.served_at is None else aware(row.served_at),
        expected_micros=row.expected_micros, attribution_window_s=row.attribution_window_s)
    return Held(LedgerWrite(event), row.reason)


def aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes for timezone-aware columns: they are UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


# Lock campaign-day rows given as two arrays, in key order (PostgreSQL).
PG_LOCK_DAYS = text(
    "SELECT d.campaign_id, d.day, d.billed_micros, d.carry_millimicros"
    " FROM campaign_day_spend d"
    " JOIN unnest(CAST(:cids AS bigint[]), CAST(:days AS date[])) AS k(campaign_id, day)"
    " ON d.campaign_id = k.campaign_id AND d.day = k.day"
    " ORDER BY d.campaign_id, d.day FOR UPDATE OF d")
# Add a batch's totals to its (locked) campaign-day and campaign rows, given as arrays.
PG_ADD_DAYS = text(
    "UPDATE campaign_day_spend AS d SET impressions = d.impressions + k.imp,"
    " clicks = d.clicks + k.clk, conversions = d.conversions + k.conv,"
    " billed_micros = d.billed_micros + k.billed,"
    " absorbed_micros = d.absorbed_micros + k.absorbed, carry_millimicros = k.carry"
    " FROM unnest(CAST(:cids AS bigint[]), CAST(:days AS date[]), CAST(:imp AS bigint[]),"
    " CAST(:clk AS bigint[]), CAST(:conv AS bigint[]), CAST(:billed AS bigint[]),"
    " CAST(:absorbed AS bigint[]), CAST(:carry AS bigint[]))"
    " AS k(campaign_id, day, imp, clk, conv, billed, absorbed, carry)"
    " WHERE d.campaign_id = k.campaign_id AND d.day = k.day")
PG_ADD_LIFETIME = text(
    "UPDATE campaign_spend AS c SET billed_micros = c.billed_micros + k.billed,"
    " absorbed_micros = c.absorbed_micros + k.absorbed"
    " FROM unnest(CAST(:cids AS bigint[]), CAST(:billed AS bigint[]),"
    " CAST(:absorbed AS bigint[])) AS k(campaign_id, billed, absorbed)"
    " WHERE c.campaign_id = k.campaign_id")
PG_UNHOLD = text(
    "DELETE FROM ledger_held WHERE (impression_id, event_type) IN"
    " (SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:types AS text[])))")


class LedgerConflict(RuntimeError):
    """A ledger row a batch planned to insert was recorded meanwhile by a writer that
    did not lock its campaign first; the batch was rolled back (retrying is safe)."""


class LoadedView:
    """What the ledger's load read (locked rows, a batch's impression ids' rows), as a
    :class:`~adfunnel.billing.batch.LedgerView`."""

    def __init__(self) -> None:
        self.rows: dict[Key, datetime] = {}
        self.invalid: dict[Key, str] = {}  # key -> reason
        self.held_rows: dict[Key, Held] = {}
        self.days: dict[DayKey, tuple[int, int]] = {}
        self.lifetime: dict[int, int] = {}
        #: (campaign, first, last) -> billed on those days; (campaign, event type, first,
        #: last) -> events recorded on them (read for the writes with period limits)
        self.months: dict[tuple[int, date, date], int] = {}
        self.goals: dict[tuple[int, EventType, date | None, date | None], int] = {}

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

    def month_billed(self, campaign_id: int, first: date, last: date) -> int:
        return self.months.get((campaign_id, first, last), 0)

    def goal_events(self, campaign_id: int, event_type: EventType, first: date | None,
                    last: date | None) -> int:
        return self.goals.get((campaign_id, event_type, first, last), 0)


def load_period_totals(conn: Connection, view: LoadedView,
                       writes: Sequence[LedgerWrite]) -> None:
    """Read into ``view`` the month billed and goal event totals the writes with period
    limits need (their campaigns' rows are locked: these stay true until the commit).
    One small query per distinct (campaign, span): few campaigns have periods. A held
    event a write may release is billed within that write's limits: its spans too."""
    d = campaign_day_spend.c
    by_campaign = {w.event.campaign_id: w.period for w in writes if w.period is not None}
    held = [(h.write.event, by_campaign.get(h.write.event.campaign_id))
            for h in view.held_rows.values() if h.waiting]
    for e, limits in [(w.event, w.period) for w in writes if w.ivt_reason is None] + held:
        if limits is None:
            continue
        if limits.month_budget_micros is not None:
            first, last = month_of(e.day)
            mk = (e.campaign_id, first, last)
            if mk not in view.months:
                view.months[mk] = int(conn.execute(
                    select(func.coalesce(func.sum(d.billed_micros), 0))
                    .where(d.campaign_id == e.campaign_id, d.day >= first, d.day <= last)
                ).scalar_one())
        if limits.goal_event is not None:
            etype = limits.goal_event
            gk = (e.campaign_id, etype, limits.flight_first, limits.flight_last)
            if gk not in view.goals:
                col = d.impressions if etype is EventType.IMPRESSION else d.clicks
                q = select(func.coalesce(func.sum(col), 0)).where(
                    d.campaign_id == e.campaign_id)
                if limits.flight_first is not None:
                    q = q.where(d.day >= limits.flight_first)
                if limits.flight_last is not None:
                    q = q.where(d.day <= limits.flight_last)
                view.goals[gk] = int(conn.execute(q).scalar_one())
