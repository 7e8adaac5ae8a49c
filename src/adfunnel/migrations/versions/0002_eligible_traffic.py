"""Eligible-traffic log (requests per campaign and UTC hour) for pacing target curves.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "eligible_traffic",
        sa.Column("campaign_id", sa.BigInteger(), primary_key=True),
        sa.Column("hour_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("requests", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("eligible_traffic")
