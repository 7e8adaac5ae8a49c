"""Viewable impressions: a campaign's ``billable_event`` and the rollups' rendered and
viewable counts.

``campaigns.billable_event`` (``viewable`` | ``rendered``): the beacon that bills an
impression. Rows that exist when this runs get ``rendered``, so campaigns created before
keep billing every rendered impression; new campaigns are created ``viewable`` by the
API (the column default only fills older rows).

``rollup_hourly.rendered`` and ``.viewable``: valid render and viewable events per
quarter-hour (measurement, never billed). The ledger has none before this revision, so
existing rollup rows are right with 0.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.add_column(sa.Column("billable_event", sa.String(16), nullable=False,
                                   server_default="rendered"))
    with op.batch_alter_table("rollup_hourly") as batch:
        batch.add_column(sa.Column("rendered", sa.BigInteger(), nullable=False,
                                   server_default="0"))
        batch.add_column(sa.Column("viewable", sa.BigInteger(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("rollup_hourly") as batch:
        batch.drop_column("viewable")
        batch.drop_column("rendered")
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("billable_event")
