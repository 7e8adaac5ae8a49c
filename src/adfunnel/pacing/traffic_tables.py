"""SQL table of logged eligible requests, the input of target curves (DESIGN.md §Pacing)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Table

from adfunnel.db import metadata

# Requests per campaign and UTC hour that passed targeting, status and schedule (before
# budget and pacing): the traffic the campaign *could* reach.
eligible_traffic = Table(
    "eligible_traffic",
    metadata,
    Column("campaign_id", BigInteger, primary_key=True),
    Column("hour_start", DateTime(timezone=True), primary_key=True),
    Column("requests", BigInteger, nullable=False),
)
