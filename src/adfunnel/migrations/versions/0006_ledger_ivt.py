"""Conversions are counted per campaign-day. Invalid traffic is recorded once per
(impression id, event type) with its reason, so a redelivered event never counts twice
and rollups can count IVT by reason.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ledger_ivt",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  primary_key=True, autoincrement=True),
        sa.Column("impression_id", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("ad_id", sa.BigInteger(), nullable=False),
        sa.Column("placement", sa.String(200), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("impression_id", "event_type", name="uq_ledger_ivt_impression_event"),
    )
    op.create_index("ix_ledger_ivt_occurred_at", "ledger_ivt", ["occurred_at"])
    with op.batch_alter_table("campaign_day_spend") as batch:
        batch.add_column(sa.Column("conversions", sa.BigInteger(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("campaign_day_spend") as batch:
        batch.drop_column("conversions")
    op.drop_index("ix_ledger_ivt_occurred_at", table_name="ledger_ivt")
    op.drop_table("ledger_ivt")
