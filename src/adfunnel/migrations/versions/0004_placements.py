"""Placements as operator records (reserves, allowed sizes and formats, house ad) and
the operator's per-ad quality.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Written by hand and kept equal to ``adfunnel.campaigns.tables`` (placements,
ads.quality_micros); tests/campaigns/test_migrations.py compares the two.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "placements",
        sa.Column("row_id", ID, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("reserve_cpm_micros", sa.BigInteger(), nullable=False),
        sa.Column("country_reserves_cpm_micros", sa.Text(), nullable=False),
        sa.Column("allowed_sizes", sa.Text(), nullable=False),
        sa.Column("allowed_formats", sa.Text(), nullable=False),
        sa.Column("house_ad", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("id", name="uq_placements_id"),
        sqlite_autoincrement=True,
    )
    # existing ads keep a neutral quality
    op.add_column(
        "ads",
        sa.Column("quality_micros", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("ads") as batch:
        batch.drop_column("quality_micros")
    op.drop_table("placements")
