"""API keys (stored as SHA-256 digests with a public prefix), and the review state
``pending_review`` (was ``pending``) of ads awaiting a reviewer.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("prefix", sa.String(32), primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("advertiser_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.execute("UPDATE ads SET review_state = 'pending_review' WHERE review_state = 'pending'")


def downgrade() -> None:
    op.execute("UPDATE ads SET review_state = 'pending' WHERE review_state = 'pending_review'")
    op.drop_table("api_keys")
