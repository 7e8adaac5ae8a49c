"""SQL tables of the quarter-hour ledger rollups (``adfunnel.billing.sql_rollups``).

Alembic migration 0007 creates them. Both are derived from ``ledger`` and ``ledger_ivt``
and may be dropped and rebuilt at any time (``refresh`` of every hour):

- ``rollup_hourly``: per UTC quarter-hour and (campaign, ad, placement) the valid events and
  their billed and absorbed micros, and the valid render and viewable events (0017);
  ``advertiser_id`` is the campaign's (0 when the campaign row is missing);
- ``rollup_hourly_ivt``: per UTC quarter-hour, (campaign, ad, placement), event type and reason
  code, the number of invalid events (never billed).

``hour`` is the start of the UTC quarter-hour (``occurred_at`` of the ledger rows in
[hour, hour + 15 min)); the table and column names date from hourly buckets (migration
0007), kept because the rows are derived and the reports only sum them (quarters make
every local hour and day exact: see :mod:`adfunnel.billing.rollups`). A key has a row in
either table only when it has events of that kind.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Index, PrimaryKeyConstraint, String, Table

from adfunnel.billing.tables import ledger
from adfunnel.db import metadata

rollup_hourly = Table(
    "rollup_hourly",
    metadata,
    Column("hour", DateTime(timezone=True), nullable=False),
    Column("advertiser_id", BigInteger, nullable=False),
    Column("campaign_id", BigInteger, nullable=False),
    Column("ad_id", BigInteger, nullable=False),
    Column("placement", String(200), nullable=False),
    Column("impressions", BigInteger, nullable=False),
    Column("clicks", BigInteger, nullable=False),
    Column("conversions", BigInteger, nullable=False),
    Column("billed_micros", BigInteger, nullable=False),
    Column("absorbed_micros", BigInteger, nullable=False),
    # migration 0017: valid render and viewable events (measurement, never billed)
    Column("rendered", BigInteger, nullable=False, server_default="0"),
    Column("viewable", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("hour", "campaign_id", "ad_id", "placement", name="pk_rollup_hourly"),
    Index("ix_rollup_hourly_campaign_hour", "campaign_id", "hour"),
    Index("ix_rollup_hourly_advertiser_hour", "advertiser_id", "hour"),
)

rollup_hourly_ivt = Table(
    "rollup_hourly_ivt",
    metadata,
    Column("hour", DateTime(timezone=True), nullable=False),
    Column("advertiser_id", BigInteger, nullable=False),
    Column("campaign_id", BigInteger, nullable=False),
    Column("ad_id", BigInteger, nullable=False),
    Column("placement", String(200), nullable=False),
    Column("event_type", String(16), nullable=False),
    Column("reason", String(32), nullable=False),
    Column("events", BigInteger, nullable=False),
    PrimaryKeyConstraint(
        "hour", "campaign_id", "ad_id", "placement", "event_type", "reason",
        name="pk_rollup_hourly_ivt",
    ),
    Index("ix_rollup_hourly_ivt_campaign_hour", "campaign_id", "hour"),
    Index("ix_rollup_hourly_ivt_advertiser_hour", "advertiser_id", "hour"),
)

#: A refresh reads the ledger by event time, one hour at a time (ledger_ivt has its own).
ix_ledger_occurred_at = Index("ix_ledger_occurred_at", ledger.c.occurred_at)

ROLLUP_TABLES = [rollup_hourly, rollup_hourly_ivt]
