"""Ledger rows keep the serve time of their impression and the expected cost they
settle (the billed feed nets in-flight estimates by them).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("served_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("settles_micros", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("settles_micros")
        batch.drop_column("served_at")
