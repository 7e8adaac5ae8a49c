"""An index on the ledger's (day, served_at): the budget feed's ``settled_since`` reads
one local day's rows of serves since a watermark on every tick, which was a scan of the
whole ledger (the only other index leads with the campaign).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_ledger_day_served", "ledger", ["day", "served_at"])


def downgrade() -> None:
    op.drop_index("ix_ledger_day_served", table_name="ledger")
