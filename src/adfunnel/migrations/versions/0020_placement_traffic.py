"""Ad requests and filled slots per placement and UTC quarter-hour (issue #26, the
operator's placement report): ``placement_traffic``.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "placement_traffic",
        sa.Column("quarter_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("placement", sa.String(200), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("slots", sa.BigInteger(), nullable=False),
        sa.Column("filled_sponsorship", sa.BigInteger(), nullable=False),
        sa.Column("filled_guaranteed", sa.BigInteger(), nullable=False),
        sa.Column("filled_auction", sa.BigInteger(), nullable=False),
        sa.Column("filled_house", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("quarter_start", "placement", name="pk_placement_traffic"),
    )


def downgrade() -> None:
    op.drop_table("placement_traffic")
