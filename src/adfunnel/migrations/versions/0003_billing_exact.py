"""Billing: CPM charges billed exactly (fraction carried per campaign-day); lifetime spend.

``ledger.charge_millimicros``: each row's exact charge in thousandths of a micro (a
CPM price per mille as the token carried it); ``charge_micros`` stays the whole micros
the row made due. ``campaign_day_spend.carry_millimicros``: the not yet billed
fraction of the day's per-mille charges. Existing rows were billed in whole micros:
their exact charge is ``charge_micros × 1000`` and their carry 0.
``campaign_spend``: billed and absorbed micros per campaign over every day (lifetime
budgets), filled from the existing day totals.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(
            sa.Column("charge_millimicros", sa.BigInteger(), nullable=False, server_default="0")
        )
    op.execute("UPDATE ledger SET charge_millimicros = charge_micros * 1000")
    with op.batch_alter_table("campaign_day_spend") as batch:
        batch.add_column(
            sa.Column("carry_millimicros", sa.BigInteger(), nullable=False, server_default="0")
        )
    op.create_table(
        "campaign_spend",
        sa.Column("campaign_id", sa.BigInteger(), primary_key=True),
        sa.Column("billed_micros", sa.BigInteger(), nullable=False),
        sa.Column("absorbed_micros", sa.BigInteger(), nullable=False),
    )
    op.execute(
        "INSERT INTO campaign_spend (campaign_id, billed_micros, absorbed_micros) "
        "SELECT campaign_id, SUM(billed_micros), SUM(absorbed_micros) "
        "FROM campaign_day_spend GROUP BY campaign_id"
    )


def downgrade() -> None:
    op.drop_table("campaign_spend")
    with op.batch_alter_table("campaign_day_spend") as batch:
        batch.drop_column("carry_millimicros")
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("charge_millimicros")
