"""Ads carry a creative with content (image, native or html) as JSON text, or NULL.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ads") as batch:
        batch.add_column(sa.Column("creative", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ads") as batch:
        batch.drop_column("creative")
