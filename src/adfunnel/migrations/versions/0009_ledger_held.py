"""Events recorded but not billed: a click held until its impression comes, a conversion
past its attribution window; once per (impression id, event type).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ledger_held",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  primary_key=True, autoincrement=True),
        sa.Column("impression_id", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("ad_id", sa.BigInteger(), nullable=False),
        sa.Column("placement", sa.String(200), nullable=False),
        sa.Column("billing_type", sa.String(8), nullable=False),
        sa.Column("charge_micros", sa.BigInteger(), nullable=False),
        sa.Column("charge_per_mille", sa.Boolean(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("served_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expected_micros", sa.BigInteger(), nullable=True),
        sa.Column("attribution_window_s", sa.Integer(), nullable=True),
        sa.UniqueConstraint("impression_id", "event_type",
                            name="uq_ledger_held_impression_event"),
    )


def downgrade() -> None:
    op.drop_table("ledger_held")
