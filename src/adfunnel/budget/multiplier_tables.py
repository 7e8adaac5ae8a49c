"""SQL table of the bid multiplier λ kept per automatic campaign-day (issue #27): what a
restarted budget service resumes from (:mod:`adfunnel.budget.kept_lams`)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Date, Double, LargeBinary, PrimaryKeyConstraint, Table

from adfunnel.db import metadata

# One row per automatic campaign and local day, rewritten as its λ steps. ``stepped_at``
# and ``strategy_since`` are Unix seconds of the domain clock; ``strategy_since`` is the
# campaign's ``bid_strategy_since`` the λ belongs to (NULL: none); ``quarters`` λ by
# quarter hour of the day as float32 (NaN: no step in it; NULL: none kept).
budget_multipliers = Table(
    "budget_multipliers",
    metadata,
    Column("campaign_id", BigInteger, nullable=False),
    Column("day", Date, nullable=False),
    Column("lam", Double, nullable=False),
    Column("integral", Double, nullable=False),
    Column("spend_avg", Double, nullable=False),
    Column("target_avg", Double, nullable=False),
    Column("charges_avg", Double, nullable=False),
    Column("stepped_at", Double, nullable=False),
    Column("strategy_since", Double, nullable=True),
    Column("quarters", LargeBinary, nullable=True),
    PrimaryKeyConstraint("campaign_id", "day", name="pk_budget_multipliers"),
)
