"""The bid multiplier λ of each automatic campaign-day and its controller state, kept by
the budget service so a restart resumes it (issue #27): ``budget_multipliers``.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_multipliers",
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("lam", sa.Double(), nullable=False),
        sa.Column("integral", sa.Double(), nullable=False),
        sa.Column("spend_avg", sa.Double(), nullable=False),
        sa.Column("target_avg", sa.Double(), nullable=False),
        sa.Column("charges_avg", sa.Double(), nullable=False),
        sa.Column("stepped_at", sa.Double(), nullable=False),
        sa.Column("strategy_since", sa.Double(), nullable=True),
        sa.Column("quarters", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("campaign_id", "day", name="pk_budget_multipliers"),
    )


def downgrade() -> None:
    op.drop_table("budget_multipliers")
