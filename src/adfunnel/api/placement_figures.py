"""The operator's placement figures (pure): requests, fill, billed impressions, revenue and
eCPM of one placement, in total, by tier and per local day or hour.

Inputs are UTC quarter-hours: the placement's counted traffic
(:mod:`adfunnel.serving.placement_traffic`: requests, slots asked for, slots filled per
tier) and its ledger rollups (:mod:`adfunnel.billing.rollups`: billed impressions and
micros per campaign). Every UTC offset in use is a whole number of quarter-hours, so each
quarter lies in exactly one local hour and day of any zone.

Figures of a cell (the totals, a tier, a period):

- ``requests``: ad requests answered (not in a tier's figures: a request is not a tier's);
- ``slots_requested``: slots those requests asked for (likewise);
- ``filled_slots``: slots filled with an ad (a tier's: those it filled; ``house`` counts
  the placement's house ad);
- ``fill_rate`` = filled_slots / slots_requested (per slot; a tier's is its share of the
  slots requested, so the tiers' rates add up to the total's); null without slots;
- ``impressions``: billable impressions in the ledger (valid, first per impression id);
- ``revenue_micros``: micros billed (impressions, clicks, conversions) by the ledger;
- ``ecpm_micros`` = revenue × 1000 // impressions, rounded down; null without impressions.

A campaign's billed figures count in its tier by the campaign's priority (``sponsorship``,
``guaranteed``, ``auction``); house ads are never billed, so ``house`` has no impressions
or revenue. Integer micros throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from adfunnel.billing.rollups import QUARTER, Granularity, HourRollup, local_hour
from adfunnel.campaigns.schedule import zone
from adfunnel.serving.tiers import TIERS

#: A traffic quarter: (UTC quarter start, {column: count}) as
#: :meth:`adfunnel.serving.placement_traffic.SqlPlacementTraffic.quarters` answers.
TrafficQuarter = tuple[datetime, dict[str, int]]


@dataclass(slots=True)
class Cell:
    """Sums of one cell: requests, slots, and per tier filled slots, impressions, micros."""

    requests: int = 0
    slots: int = 0
    filled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    impressions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    revenue: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))

    def add_traffic(self, counts: dict[str, int]) -> None:
        self.requests += counts["requests"]
        self.slots += counts["slots"]
        for t in TIERS:
            self.filled[t] += counts[f"filled_{t}"]

    def add_billed(self, tier: str, impressions: int, micros: int) -> None:
        self.impressions[tier] += impressions
        self.revenue[tier] += micros

    def figures(self) -> dict[str, Any]:
        """The cell's figures (module docstring), with ``by_tier``."""
        out = {"requests": self.requests, "slots_requested": self.slots,
               **_figures(self.slots, sum(self.filled.values()),
                          sum(self.impressions.values()), sum(self.revenue.values()))}
        out["by_tier"] = {t: _figures(self.slots, self.filled[t], self.impressions[t],
                                      self.revenue[t]) for t in TIERS}
        return out


def _figures(slots: int, filled: int, impressions: int, revenue: int) -> dict[str, Any]:
    return {"filled_slots": filled, "fill_rate": filled / slots if slots else None,
            "impressions": impressions, "revenue_micros": revenue,
            "ecpm_micros": revenue * 1000 // impressions if impressions else None}


def placement_figures(
    traffic: Iterable[TrafficQuarter], billed: Iterable[HourRollup],
    tier_of: Callable[[int], str], *, start: datetime, end: datetime,
    granularity: Granularity, time_zone: str,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(totals, periods) of the quarters in [``start``, ``end``) (UTC, aware; the bounds
    of whole local days in ``time_zone``). ``tier_of``: campaign id → its tier. Periods:
    every local day (``{"day": date, …}``) or every local hour (``{"hour": its start
    with the zone's offset, …}``, a DST fold's two hours apart) in the span, in order,
    with zeros where nothing happened.

    Raises:
        ValueError: unknown time zone.
    """
    z = zone(time_zone)

    def period(q: datetime) -> date | datetime:
        return q.astimezone(z).date() if granularity == "day" else local_hour(q, z)

    cells: dict[date | datetime, Cell] = {}
    q = start
    while q < end:  # every period of the span, in order, even an empty one
        cells.setdefault(period(q), Cell())
        q += QUARTER
    total = Cell()
    for q, counts in traffic:
        for cell in (total, cells.setdefault(period(q), Cell())):
            cell.add_traffic(counts)
    for r in billed:
        tier = tier_of(r.campaign_id)
        for cell in (total, cells.setdefault(period(r.hour), Cell())):
            cell.add_billed(tier, r.impressions, r.billed_micros)
    key = "day" if granularity == "day" else "hour"
    periods = [{key: k.astimezone(z) if isinstance(k, datetime) else k, **c.figures()}
               for k, c in sorted(cells.items(), key=lambda kv: _order(kv[0]))]
    return total.figures(), periods


def _order(k: date | datetime) -> float:
    return k.timestamp() if isinstance(k, datetime) else k.toordinal()

