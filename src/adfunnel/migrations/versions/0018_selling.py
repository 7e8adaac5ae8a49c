"""How a campaign is sold (#25): ``campaigns.priority``, ``.goal``, ``.budget_period`` and
``.flight_budget_micros``.

``priority`` (``auction`` | ``guaranteed`` | ``sponsorship``), ``goal`` (JSON
``{"metric", "share" | "total"}`` or NULL), ``budget_period`` (``day`` | ``flight`` |
``average_day``) and ``flight_budget_micros`` (micros, NULL = none). Rows that exist when
this runs get ``auction``, no goal, ``day`` and no flight budget: every campaign made
before keeps selling and pacing exactly as it did.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.add_column(sa.Column("priority", sa.String(16), nullable=False,
                                   server_default="auction"))
        batch.add_column(sa.Column("goal", sa.Text(), nullable=True))
        batch.add_column(sa.Column("budget_period", sa.String(16), nullable=False,
                                   server_default="day"))
        batch.add_column(sa.Column("flight_budget_micros", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("flight_budget_micros")
        batch.drop_column("budget_period")
        batch.drop_column("goal")
        batch.drop_column("priority")
