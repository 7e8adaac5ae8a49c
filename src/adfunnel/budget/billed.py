"""What the budget room reads of billing: billed totals by campaign, as a protocol.

The billed feed (:mod:`adfunnel.budget.feed`) and the budget processes read the ledger
through :class:`BilledTotals` only, so the budget room, below billing on the ladder,
imports nothing of it; every ledger of ``adfunnel.billing`` has these methods and is
passed in by whoever builds the feeder.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Protocol


class BilledTotals(Protocol):
    """Billed totals per campaign, read from a ledger."""

    def billed_on(self, day: date) -> dict[int, int]:
        """campaign id -> billed micros on local ``day`` (what budgets count as spent)."""
        ...

    def settled_since(self, day: date, since: datetime) -> dict[int, int]:
        """campaign id -> expected cost settled by the events on local ``day`` of serves at
        or after ``since`` (serve time): what the budget service takes out of its
        in-flight estimates."""
        ...

    def lifetime_billed(self, campaign_id: int | None = None) -> dict[int, int]:
        """campaign id -> billed micros over every day (one campaign, or all; none without
        billed spend)."""
        ...
