"""SQL table of the answers kept for ``Idempotency-Key`` (:mod:`adfunnel.api.idempotency`)."""

from __future__ import annotations

from sqlalchemy import Column, Double, Integer, LargeBinary, PrimaryKeyConstraint, Table, Text

from adfunnel.db import metadata

# One row per (caller, key). ``fingerprint``: SHA-256 of the method, path, query and body
# the key was first used with; ``status`` NULL while the first request runs;
# ``created_at`` Unix seconds of the domain clock (kept ``IDEMPOTENCY_TTL_S``).
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("caller", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("status", Integer, nullable=True),
    Column("content_type", Text, nullable=True),
    Column("location", Text, nullable=True),
    Column("body", LargeBinary, nullable=True),
    Column("created_at", Double, nullable=False),
    PrimaryKeyConstraint("caller", "key", name="pk_idempotency_keys"),
)
