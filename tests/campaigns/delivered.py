"""Billed impressions put straight into a runtime's ledger, for the tests of what a
campaign write may change once the campaign has delivered."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from adfunnel.billing.ledger import Ledger
from adfunnel.billing.model import EventType, LedgerEvent


def deliver(ledger: Ledger, campaign_id: int, impressions: int = 1,
            day: date = date(2026, 11, 2)) -> None:
    """``impressions`` billed CPM impressions (2 CPM) of ``campaign_id`` at 01:00 UTC on
    ``day`` (the campaigns here are in UTC: its local day)."""
    at = datetime.combine(day, time(1), tzinfo=UTC)
    for i in range(impressions):
        ledger.record(LedgerEvent(f"{campaign_id}:{day}:i{i}", EventType.IMPRESSION,
                                  campaign_id, 1, "p", "CPM", 2_000_000,
                                  at + timedelta(seconds=i), day), 10**12)
