"""Hourly rollups of the ledger (valid events and IVT per reason), derived from ``ledger``
and ``ledger_ivt`` (``adfunnel.billing.sql_rollups``); the ledger gets an index on
``occurred_at`` for the refresh. The new tables start empty: refresh the ledger's hours
once (``adfunnel.billing.rollup_store.refresh_since``) to fill them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _key_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("advertiser_id", sa.BigInteger(), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("ad_id", sa.BigInteger(), nullable=False),
        sa.Column("placement", sa.String(200), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "rollup_hourly",
        *_key_columns(),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in (
            "impressions", "clicks", "conversions", "billed_micros", "absorbed_micros")),
        sa.PrimaryKeyConstraint("hour", "campaign_id", "ad_id", "placement",
                                name="pk_rollup_hourly"),
    )
    op.create_index("ix_rollup_hourly_campaign_hour", "rollup_hourly", ["campaign_id", "hour"])
    op.create_index("ix_rollup_hourly_advertiser_hour", "rollup_hourly",
                    ["advertiser_id", "hour"])
    op.create_table(
        "rollup_hourly_ivt",
        *_key_columns(),
        sa.Column("event_type", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "campaign_id", "ad_id", "placement", "event_type",
                                "reason", name="pk_rollup_hourly_ivt"),
    )
    op.create_index("ix_rollup_hourly_ivt_campaign_hour", "rollup_hourly_ivt",
                    ["campaign_id", "hour"])
    op.create_index("ix_rollup_hourly_ivt_advertiser_hour", "rollup_hourly_ivt",
                    ["advertiser_id", "hour"])
    op.create_index("ix_ledger_occurred_at", "ledger", ["occurred_at"])


def downgrade() -> None:
    op.drop_index("ix_ledger_occurred_at", table_name="ledger")
    op.drop_table("rollup_hourly_ivt")
    op.drop_table("rollup_hourly")
