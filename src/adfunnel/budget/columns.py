"""Campaigns as numpy columns: what the budget service reads of the catalogue.

:class:`CampaignColumns` is the bulk input (start-up reads the store straight into it, no
record objects); :class:`OwnedCampaigns` is a shard's campaigns as the billed feed
(:mod:`adfunnel.budget.feed`) and the traffic shapes read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from adfunnel.campaigns.model import (
    BidStrategy,
    BidType,
    BudgetPeriod,
    Campaign,
    CampaignStatus,
    Daypart,
    GoalMetric,
    PacingMode,
    Priority,
)

#: Bid types by code (the ``bid`` column, :class:`CampaignColumns`).
BID_TYPES = (BidType.CPM, BidType.CPC, BidType.CPA)
BID_CODE = {b: i for i, b in enumerate(BID_TYPES)}
#: Priorities by code (the ``priority`` column).
PRIORITIES = (Priority.AUCTION, Priority.GUARANTEED, Priority.SPONSORSHIP)
PRIORITY_CODE = {p: i for i, p in enumerate(PRIORITIES)}
#: Budget periods by code (the ``period`` column).
PERIODS = (BudgetPeriod.DAY, BudgetPeriod.FLIGHT, BudgetPeriod.AVERAGE_DAY)
PERIOD_CODE = {p: i for i, p in enumerate(PERIODS)}
#: ``fend`` of a campaign without a flight end.
NO_END = 1 << 40


@dataclass(frozen=True, slots=True)
class CampaignColumns:
    """What the budget service needs of many campaign records, as numpy columns of one
    length (bulk start-up from the store, no record objects): ids, versions, bid type
    codes (``BID_TYPES``), bid, daily and lifetime budgets (micros; lifetime -1 = none),
    status active, pacing even / accelerated, flight start and end (local date
    ordinals; ``NO_END`` = open-ended) and time zone (index into ``zones``).

    How it is sold (#25; columns only, read by the budget periods): ``priority``
    (``PRIORITIES`` code), ``period`` (``PERIODS`` code), ``flight_budget`` (micros; -1
    = none), ``goal_total`` (impressions or clicks of a guaranteed line's goal; -1 =
    none, as for a sponsorship's share) and ``front`` (pacing frontloaded); the dayparts
    of the few campaigns that have any, by campaign id."""

    ids: np.ndarray
    versions: np.ndarray
    bid: np.ndarray
    bid_micros: np.ndarray
    daily: np.ndarray
    lifetime: np.ndarray
    active: np.ndarray
    even: np.ndarray
    accel: np.ndarray
    fstart: np.ndarray
    fend: np.ndarray
    tz: np.ndarray
    zones: list[str]
    priority: np.ndarray
    period: np.ndarray
    flight_budget: np.ndarray
    goal_total: np.ndarray
    front: np.ndarray
    dayparts: dict[int, tuple[Daypart, ...]] = field(default_factory=dict)
    #: campaigns whose record the service reads once loaded (a budget period other
    #: than day, dayparts, frontloading, an automatic bid strategy; bool); None: none
    #: (a table read without the columns)
    special: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def charges(self) -> np.ndarray:
        """:func:`charge_micros` of each campaign (int64 micros)."""
        cpm = np.maximum(1, -(-self.bid_micros // 1000))
        return np.where(self.bid == BID_CODE[BidType.CPM], cpm, np.maximum(1, self.bid_micros))

    @classmethod
    def of(cls, campaigns: Sequence[Campaign]) -> CampaignColumns:
        """The columns of record objects."""
        zones: dict[str, int] = {}
        tz = [zones.setdefault(c.time_zone, len(zones)) for c in campaigns]

        def col(values: Iterable[object], dtype: type) -> np.ndarray:
            return np.fromiter(values, dtype=dtype, count=len(campaigns))

        return cls(
            col((c.id for c in campaigns), np.int64),
            col((c.version for c in campaigns), np.int64),
            col((BID_CODE[c.bid_type] for c in campaigns), np.int8),
            col((c.bid_micros for c in campaigns), np.int64),
            col((c.daily_budget_micros for c in campaigns), np.int64),
            col((-1 if c.lifetime_budget_micros is None else c.lifetime_budget_micros
                 for c in campaigns), np.int64),
            col((c.status is CampaignStatus.ACTIVE for c in campaigns), np.bool_),
            col((c.pacing_mode in (PacingMode.EVEN, PacingMode.FRONTLOADED)
                 for c in campaigns), np.bool_),
            col((c.pacing_mode is PacingMode.ACCELERATED for c in campaigns), np.bool_),
            col((c.flight_start.toordinal() for c in campaigns), np.int64),
            col((NO_END if c.flight_end is None else c.flight_end.toordinal()
                 for c in campaigns), np.int64),
            np.array(tz, dtype=np.int64), list(zones),
            col((PRIORITY_CODE[c.priority] for c in campaigns), np.int8),
            col((PERIOD_CODE[c.budget_period] for c in campaigns), np.int8),
            col((-1 if c.flight_budget_micros is None else c.flight_budget_micros
                 for c in campaigns), np.int64),
            col((_goal_total(c) for c in campaigns), np.int64),
            col((c.pacing_mode is PacingMode.FRONTLOADED for c in campaigns), np.bool_),
            {c.id: tuple(c.dayparts) for c in campaigns if c.dayparts},
            col((c.budget_period is not BudgetPeriod.DAY or bool(c.dayparts)
                 or c.pacing_mode is PacingMode.FRONTLOADED
                 or c.bid_strategy is not BidStrategy.MANUAL for c in campaigns), np.bool_))


def _goal_total(c: Campaign) -> int:
    """A goal's impressions or clicks (-1: no goal, or a sponsorship's share)."""
    goal = c.goal
    if goal is None or goal.metric is GoalMetric.SHARE or goal.total is None:
        return -1
    return goal.total


@dataclass(frozen=True, slots=True)
class OwnedCampaigns:
    """The campaigns of a shard as columns (the billed feed and traffic shapes read
    them): ids, time zone index into ``zones``, bid type code, whether a lifetime budget
    is set; ``order`` sorts ``ids`` (for :meth:`positions`)."""

    ids: np.ndarray
    tz: np.ndarray
    zones: list[str]
    bid: np.ndarray
    lifetime: np.ndarray
    order: np.ndarray
    slots: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def positions(self, campaign_ids: np.ndarray) -> np.ndarray:
        """Index of each id in ``ids`` (-1 where absent)."""
        sorted_ids = self.ids[self.order]
        i = np.searchsorted(sorted_ids, campaign_ids)
        i = np.minimum(i, max(len(sorted_ids) - 1, 0))
        if not len(sorted_ids):
            return np.full(len(campaign_ids), -1, dtype=np.int64)
        return np.where(sorted_ids[i] == campaign_ids, self.order[i], -1)
