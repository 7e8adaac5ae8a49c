"""SQL table of the ad requests and filled slots counted per placement (the operator's
placement report, :mod:`adfunnel.serving.placement_traffic`); migration 0019."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, PrimaryKeyConstraint, String, Table

from adfunnel.db import metadata

# Per UTC quarter-hour and placement: ad requests answered, slots they asked for, and the
# slots filled by each tier. Additive: every ad-server process adds what it counted.
placement_traffic = Table(
    "placement_traffic",
    metadata,
    Column("quarter_start", DateTime(timezone=True), nullable=False),
    Column("placement", String(200), nullable=False),
    Column("requests", BigInteger, nullable=False),
    Column("slots", BigInteger, nullable=False),
    Column("filled_sponsorship", BigInteger, nullable=False),
    Column("filled_guaranteed", BigInteger, nullable=False),
    Column("filled_auction", BigInteger, nullable=False),
    Column("filled_house", BigInteger, nullable=False),
    PrimaryKeyConstraint("quarter_start", "placement", name="pk_placement_traffic"),
)
