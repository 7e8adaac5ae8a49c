"""The request sample of availability forecasts (#26): ``request_sample``, a bounded
sample of recent ad requests (``adfunnel.forecast.store``). Starts empty; ad servers fill
it as they serve and prune what is older than the history they keep.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "request_sample",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  primary_key=True, autoincrement=True),
        sa.Column("hour_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("placement", sa.String(200), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("attributes", sa.Text(), nullable=False),
    )
    op.create_index("ix_request_sample_hour", "request_sample", ["hour_start"])


def downgrade() -> None:
    op.drop_index("ix_request_sample_hour", table_name="request_sample")
    op.drop_table("request_sample")
