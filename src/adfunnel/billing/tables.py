"""SQL tables of the ledger. Alembic migrations create them (``adfunnel/migrations``)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Index,
    Integer,
    String,
    Table,
    UniqueConstraint,
)

from adfunnel.db import metadata

ledger = Table(
    "ledger",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("impression_id", String(64), nullable=False),
    Column("event_type", String(16), nullable=False),
    Column("campaign_id", BigInteger, nullable=False),
    Column("ad_id", BigInteger, nullable=False),
    Column("placement", String(200), nullable=False),
    Column("billing_type", String(8), nullable=False),
    # whole micros this event made due (billed + absorbed) ...
    Column("charge_micros", BigInteger, nullable=False),
    # ... of its exact charge in thousandths of a micro (a CPM price per mille as is)
    Column("charge_millimicros", BigInteger, nullable=False, server_default="0"),
    Column("billed_micros", BigInteger, nullable=False),
    Column("absorbed_micros", BigInteger, nullable=False),
    Column("day", Date, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    # when its impression was served (token issue time); NULL in rows from before 0005
    Column("served_at", DateTime(timezone=True), nullable=True),
    # the serve's expected cost this row settles (LedgerEvent.expected_micros); NULL =
    # unknown, billed_micros stands in
    Column("settles_micros", BigInteger, nullable=True),
    # an OpenRTB win or loss notice's price (a win's clearing price, a loss's minimum bid
    # to win; CPM micros) and a loss's reason code: the win-price history (0022)
    Column("notice_micros", BigInteger, nullable=True),
    Column("loss_reason", Integer, nullable=True),
    # The double-billing guard: replaying any event stream is always safe.
    UniqueConstraint("impression_id", "event_type", name="uq_ledger_impression_event"),
    Index("ix_ledger_campaign_day", "campaign_id", "day"),
    # the budget feed's settled_since: one day's rows of serves since a watermark (0025)
    Index("ix_ledger_day_served", "day", "served_at"),
)

# Invalid traffic, once per (impression id, event type), with its reason code: never
# billed, never in budgets; a redelivered event finds its row and counts nothing again.
ledger_ivt = Table(
    "ledger_ivt",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("impression_id", String(64), nullable=False),
    Column("event_type", String(16), nullable=False),
    Column("reason", String(32), nullable=False),
    Column("campaign_id", BigInteger, nullable=False),
    Column("ad_id", BigInteger, nullable=False),
    Column("placement", String(200), nullable=False),
    Column("day", Date, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("impression_id", "event_type", name="uq_ledger_ivt_impression_event"),
    Index("ix_ledger_ivt_occurred_at", "occurred_at"),
)

# Running totals per campaign and local day; the row lock serialises budget checks.
campaign_day_spend = Table(
    "campaign_day_spend",
    metadata,
    Column("campaign_id", BigInteger, primary_key=True),
    Column("day", Date, primary_key=True),
    Column("impressions", BigInteger, nullable=False, default=0),
    Column("clicks", BigInteger, nullable=False, default=0),
    Column("billed_micros", BigInteger, nullable=False, default=0),
    Column("absorbed_micros", BigInteger, nullable=False, default=0),
    # not yet billed fraction of the day's per-mille charges, thousandths of a micro
    Column("carry_millimicros", BigInteger, nullable=False, default=0, server_default="0"),
    # last, as migration 0006 added it
    Column("conversions", BigInteger, nullable=False, default=0, server_default="0"),
)

# Running totals per campaign over every day (lifetime budgets); its row lock serialises
# a campaign's charges across days (two local days racing at midnight).
campaign_spend = Table(
    "campaign_spend",
    metadata,
    Column("campaign_id", BigInteger, primary_key=True),
    Column("billed_micros", BigInteger, nullable=False, default=0),
    Column("absorbed_micros", BigInteger, nullable=False, default=0),
)

# Counters that must survive restarts (duplicates rejected, invalid tokens, ...).
ledger_counters = Table(
    "ledger_counters",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False, default=0),
)

# Events recorded but not billed, once per (impression id, event type): a click whose
# impression has not come yet (billed when it comes), or a conversion past its click's
# attribution window (never billed). A redelivered one finds its row and counts nothing.
ledger_held = Table(
    "ledger_held",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("impression_id", String(64), nullable=False),
    Column("event_type", String(16), nullable=False),
    Column("reason", String(32), nullable=False),
    Column("campaign_id", BigInteger, nullable=False),
    Column("ad_id", BigInteger, nullable=False),
    Column("placement", String(200), nullable=False),
    Column("billing_type", String(8), nullable=False),
    # LedgerEvent.charge_micros as the event carried it (per mille when charge_per_mille)
    Column("charge_micros", BigInteger, nullable=False),
    Column("charge_per_mille", Boolean, nullable=False),
    Column("day", Date, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("served_at", DateTime(timezone=True), nullable=True),
    Column("expected_micros", BigInteger, nullable=True),
    Column("attribution_window_s", Integer, nullable=True),
    UniqueConstraint("impression_id", "event_type", name="uq_ledger_held_impression_event"),
)
