"""Ledger records: what a billable event is and what recording it did."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum


class EventType(StrEnum):
    IMPRESSION = "impression"
    CLICK = "click"


class Outcome(StrEnum):
    BILLED = "billed"  # a new ledger row; billed_micros may be 0 when the budget was spent
    DUPLICATE = "duplicate"  # the (impression id, event type) row exists already
    NOT_BILLABLE = "not_billable"  # e.g. a click whose impression was never billed


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """A validated beacon ready for the ledger.

    ``charge_micros`` is what this event costs when it is the billable event of its
    billing type (per impression for CPM, per click for CPC), else 0.
    ``day`` is the campaign's local budget day of ``occurred_at``.
    """

    impression_id: str
    event_type: EventType
    campaign_id: int
    ad_id: int
    placement: str
    billing_type: str
    charge_micros: int
    occurred_at: datetime
    day: date


@dataclass(frozen=True, slots=True)
class Recorded:
    """What ``Ledger.record`` did: ``billed + absorbed == charge`` for a new billed row."""

    outcome: Outcome
    billed_micros: int = 0
    absorbed_micros: int = 0


@dataclass(frozen=True, slots=True)
class DayTotals:
    """One campaign's ledger totals for one local day."""

    day: date
    impressions: int
    clicks: int
    billed_micros: int
    absorbed_micros: int


@dataclass(frozen=True, slots=True)
class LedgerStats:
    rows: int
    duplicates_rejected: int
