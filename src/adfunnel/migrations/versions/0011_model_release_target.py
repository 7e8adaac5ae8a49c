"""Model releases say what they predict: click (pCTR) or conversion (pCVR).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("model_releases") as batch:
        batch.add_column(sa.Column("target", sa.String(16), nullable=False,
                                   server_default="click"))


def downgrade() -> None:
    with op.batch_alter_table("model_releases") as batch:
        batch.drop_column("target")
