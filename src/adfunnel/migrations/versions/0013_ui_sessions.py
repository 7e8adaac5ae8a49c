"""Dashboard sessions kept on the server: the digest of a random session id, the prefix
of the API key it acts for, and its expiry (the browser's cookie holds only the id).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("key_prefix", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_ui_sessions_key_prefix", "ui_sessions", ["key_prefix"])


def downgrade() -> None:
    op.drop_index("ix_ui_sessions_key_prefix", table_name="ui_sessions")
    op.drop_table("ui_sessions")
