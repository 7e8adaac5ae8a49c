"""How a campaign bids and how a placement prices (#27): ``campaigns.bid_strategy``,
``.bid_cap_micros``, ``.target_cpa_micros``, ``.bid_strategy_since`` and
``placements.auction_type``.

``bid_strategy`` (``manual`` | ``max_clicks`` | ``max_conversions`` | ``target_cpa``),
the cap and target in micros (NULL = none), ``bid_strategy_since`` the instant the
strategy terms last changed (NULL = not since creation); ``auction_type``
(``second_price`` | ``first_price``). Rows that exist when this runs get ``manual`` and
``second_price``: every campaign and placement made before bids and prices exactly as
it did.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.add_column(sa.Column("bid_strategy", sa.String(16), nullable=False,
                                   server_default="manual"))
        batch.add_column(sa.Column("bid_cap_micros", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("target_cpa_micros", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("bid_strategy_since", sa.DateTime(timezone=True),
                                   nullable=True))
    with op.batch_alter_table("placements") as batch:
        batch.add_column(sa.Column("auction_type", sa.String(16), nullable=False,
                                   server_default="second_price"))


def downgrade() -> None:
    with op.batch_alter_table("placements") as batch:
        batch.drop_column("auction_type")
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("bid_strategy_since")
        batch.drop_column("target_cpa_micros")
        batch.drop_column("bid_cap_micros")
        batch.drop_column("bid_strategy")
