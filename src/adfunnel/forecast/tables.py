"""SQL table of the request sample (:mod:`adfunnel.forecast.store`, migration 0019)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Float, Index, Integer, String, Table, Text

from adfunnel.db import metadata

# One sampled ad request: when (``at_ms``, Unix milliseconds: read back without parsing
# dates; ``hour_start`` its UTC hour), its placement, its
# targeting view (JSON {attribute: [values]}, placement and slot sizes included) and the
# requests it stands for (``weight`` = requests seen / rows kept by its writer that hour).
request_sample = Table(
    "request_sample",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("hour_start", DateTime(timezone=True), nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("placement", String(200), nullable=False),
    Column("weight", Float, nullable=False),
    Column("attributes", Text, nullable=False),
    Index("ix_request_sample_hour", "hour_start"),
)
