"""Uploaded creative images (``POST /v1/creatives``): one record per advertiser and
SHA-256 digest of the stored bytes, which also name the file.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "creative_uploads",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("advertiser_id", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("content_type", sa.String(32), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("advertiser_id", "digest",
                            name="uq_creative_uploads_advertiser_digest"),
    )


def downgrade() -> None:
    op.drop_table("creative_uploads")
