"""What a budget client holds per campaign-day between reports: its leased slices and
its spend not yet reported (:mod:`adfunnel.budget.client`). Money in integer micros."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass(slots=True)
class HeldSlice:
    """A slice of a campaign-day's budget leased from the service: ``amount`` micros,
    ``used`` of it so far, until ``expires_at`` (Unix s); ``worst_case``: serves take
    their worst-case charge from it, not their expected cost."""

    slice_id: str
    campaign_id: int
    day: date
    amount: int
    expires_at: float
    used: int = 0
    last_used: float = 0.0
    worst_case: bool = False


@dataclass(slots=True)
class Acc:
    """A campaign-day's spend since the last report, micros: expected cost served
    ``open`` (outside slices) and ``sliced``, ``demand`` asked, and ``charges`` served."""

    open: int = 0
    sliced: int = 0
    demand: int = 0
    charges: int = 0
