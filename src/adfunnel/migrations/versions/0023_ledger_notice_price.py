"""Ledger rows of OpenRTB win and loss notices keep the price the exchange named
(``notice_micros``: a win's clearing price, a loss's minimum bid to win, CPM micros
rounded down; NULL for every other row and a loss that named none) and a loss's
OpenRTB loss reason code (``loss_reason``; NULL = none): the win-price history that
first-price shading reads beside the served log.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("notice_micros", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("loss_reason", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("loss_reason")
        batch.drop_column("notice_micros")
