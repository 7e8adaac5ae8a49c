"""What a request's block lists refuse (#28, OpenRTB bcat/badv/bapp): ``ads.categories``
(JSON array of IAB content taxonomy 1.0 ids), ``ads.adomain`` (JSON array of advertiser
domains) and ``ads.bundle`` (the app the ad promotes, or NULL).

Ads that exist when this runs declare none (``[]``, ``[]``, NULL): no block list refuses
them, so every ad made before serves exactly as it did.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("ads") as batch:
        batch.add_column(sa.Column("categories", sa.Text(), nullable=False,
                                   server_default="[]"))
        batch.add_column(sa.Column("adomain", sa.Text(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("bundle", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ads") as batch:
        batch.drop_column("bundle")
        batch.drop_column("adomain")
        batch.drop_column("categories")
