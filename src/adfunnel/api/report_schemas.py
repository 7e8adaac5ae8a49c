"""Response bodies of the advertiser reports (pydantic v2): the ledger report of a
campaign and the rollup reports (``adfunnel.api.campaigns``, ``adfunnel.api.reports``).
"""

from __future__ import annotations

from datetime import date, datetime

from pydantic import BaseModel, ConfigDict, Field

# --- report ------------------------------------------------------------------------------


class ReportDay(BaseModel):
    day: date
    impressions: int
    clicks: int
    billed_micros: int
    absorbed_overspend_micros: int
    ctr: float
    ecpm_micros: int
    conversions: int = 0
    cost_per_conversion_micros: int | None = None
    #: reason code -> invalid events that day (never billed), from the rollups
    ivt: dict[str, int] = Field(default_factory=dict)
    #: valid render (/i) and viewable (/vi) events that day, from the rollups
    rendered: int = 0
    viewable: int = 0
    #: viewable / rendered; null without renders
    viewability_rate: float | None = None


class PlannedDayOut(BaseModel):
    """What a flight plan gives one local day up to now, micros."""

    day: date
    planned_micros: int


class PeriodTodayOut(BaseModel):
    """The budget service's figures of the period's current local day
    (:mod:`adfunnel.api.period_today`), micros: ``allotment_micros`` the day's budget the
    re-planned period gives it; for a flight ``planned_micros`` (the plan's cumulative
    target now) and ``spent_micros`` (the flight's spend so far), null for an average
    day."""

    day: date
    allotment_micros: int
    planned_micros: int | None = None
    spent_micros: int | None = None
    #: what the plan gives yesterday and today up to now (a flight's; null otherwise)
    planned_days: list[PlannedDayOut] | None = None


class PeriodProgressOut(BaseModel):
    """A guaranteed line's progress against its flight plan, in goal events
    (:mod:`adfunnel.api.period_progress`, rule and limits in
    :mod:`adfunnel.pacing.progress`): ``delivered`` the ledger's goal events to date (up
    to the goal), ``planned_to_date`` the budget service's plan's cumulative target now,
    ``plan_total`` the whole plan, ``projected_final`` = min(goal, delivered + the plan's
    rest × ``recent_ratio``), ``pace`` = delivered / planned_to_date (null with nothing
    planned), ``state``: ``on_track`` (pace within ±5 %), ``behind``, ``ahead``,
    ``not_started``, or after the flight ``met`` / ``missed``."""

    metric: str
    delivered: int
    planned_to_date: int
    plan_total: int
    goal: int
    projected_final: int
    pace: float | None
    recent_ratio: float
    state: str


class PeriodOut(BaseModel):
    """The budget period's figures (:mod:`adfunnel.billing.period_report`), micros: its
    span ``from``..``to`` (local days), ``budget_micros`` its money limit (null: none),
    what it billed, absorbed and has left; a goal's total, delivered events (up to the
    goal), ``over_delivery`` (beyond it, never billed) and ``goal_shortfall``; ``today``
    the budget service's current day of a flight or average day (null for a ``day``
    period, or where the service does not hold the campaign); ``progress`` a guaranteed
    line's delivered vs planned to date and projected final delivery."""

    model_config = ConfigDict(populate_by_name=True)

    budget_period: str
    from_: date = Field(alias="from")
    to: date
    budget_micros: int | None
    billed_micros: int
    absorbed_micros: int
    remaining_micros: int | None
    goal_total: int | None = None
    goal_delivered: int | None = None
    over_delivery: int | None = None
    goal_shortfall: int | None = None
    today: PeriodTodayOut | None = None
    #: a guaranteed line's progress against its plan (null for another campaign)
    progress: PeriodProgressOut | None = None


class ReportOut(BaseModel):
    """Ledger totals of one campaign over local days ``from``..``to`` inclusive.

    ``ctr`` = clicks / impressions (0 without impressions); ``ecpm_micros`` = billed
    micros per 1000 impressions, rounded down (0 without impressions);
    ``cost_per_conversion_micros`` = billed micros per conversion, rounded down (null
    without conversions).
    ``lifetime_*``: the lifetime budget, what was billed on every day (not only this
    span) and what remains; ``lifetime_remaining_micros`` is null without one.
    ``ivt`` (here and per day): reason code -> invalid events, never billed, counted
    beside the billed figures; read from the rollups, which follow the ledger within
    one refresh (5 s of the server's clock); ``null`` where the server keeps no rollups.
    ``rendered`` and ``viewable`` (here and per day): valid render (``/i``) and viewable
    (``/vi``) events, measurement never billed, from the rollups likewise;
    ``viewability_rate`` = viewable / rendered, null without renders.
    """

    model_config = ConfigDict(populate_by_name=True)

    campaign_id: int
    from_: date = Field(alias="from")
    to: date
    impressions: int
    clicks: int
    billed_micros: int
    absorbed_overspend_micros: int
    ctr: float
    ecpm_micros: int
    conversions: int = 0
    cost_per_conversion_micros: int | None = None
    rendered: int = 0
    viewable: int = 0
    viewability_rate: float | None = None
    days: list[ReportDay]
    ivt: dict[str, int] | None = None
    lifetime_budget_micros: int | None = None
    lifetime_billed_micros: int = 0
    lifetime_remaining_micros: int | None = None
    #: the budget period's figures (PeriodOut)
    period: PeriodOut | None = None
    #: the currency of every ``*_micros`` figure: the server's (setting ``currency``)
    currency: str = "USD"


class RollupTotalsOut(BaseModel):
    """Counts and money (micros) of rollups; ``ivt``: reason code -> invalid impressions,
    clicks and conversions (never billed); ``rendered``, ``viewable``: valid render
    (``/i``) and viewable (``/vi``) events (measurement, never billed). Metrics are null
    without their denominator: ``ctr`` = clicks / impressions, ``ecpm_micros`` = billed ×
    1000 // impressions, ``cost_per_conversion_micros`` = billed // conversions,
    ``viewability_rate`` = viewable / rendered."""

    impressions: int
    clicks: int
    conversions: int
    billed_micros: int
    absorbed_micros: int
    ivt: dict[str, int]
    ctr: float | None
    ecpm_micros: int | None
    cost_per_conversion_micros: int | None
    rendered: int = 0
    viewable: int = 0
    viewability_rate: float | None = None


class _RollupPeriodOut(BaseModel):
    period_start: datetime
    campaign_id: int | None
    ad_id: int | None
    placement: str | None


class RollupRowOut(RollupTotalsOut, _RollupPeriodOut):
    """One period of one group (its fields first). ``period_start``: the start of the
    local hour, or the local midnight of the day, in the report's zone (its offset). Only
    the group's keys are set: ``ad`` → campaign_id and ad_id, ``campaign`` → campaign_id,
    ``placement`` → placement."""


class RollupReportOut(BaseModel):
    """Rollups over local days ``from``..``to`` inclusive in ``time_zone``, per local hour
    or day there."""

    model_config = ConfigDict(populate_by_name=True)

    campaign_id: int | None = None
    advertiser_id: int | None = None
    #: the placement of an operator's placement report (every campaign's events there)
    placement: str | None = None
    from_: date = Field(alias="from")
    to: date
    time_zone: str
    granularity: str
    group_by: str
    totals: RollupTotalsOut
    rows: list[RollupRowOut]
    #: the currency of every ``*_micros`` figure: the server's (setting ``currency``)
    currency: str = "USD"


# --- placement report (the operator's view) ------------------------------------------------


class TierFiguresOut(BaseModel):
    """One tier's figures in a placement report (:mod:`adfunnel.api.placement_figures`):
    slots it filled, its share of the slots requested (null without slots), billable
    impressions, micros billed and eCPM (revenue × 1000 // impressions, null without
    impressions)."""

    filled_slots: int
    fill_rate: float | None
    impressions: int
    revenue_micros: int
    ecpm_micros: int | None


class PlacementFiguresOut(TierFiguresOut):
    """A placement's figures over a span or a period: ad requests answered, slots they
    asked for, and by tier (``sponsorship``, ``guaranteed``, ``auction``, ``house``)."""

    requests: int
    slots_requested: int
    by_tier: dict[str, TierFiguresOut]


class PlacementDayOut(PlacementFiguresOut):
    day: date


class PlacementHourOut(PlacementFiguresOut):
    #: the start of the local hour, with the zone's offset
    hour: datetime


class PlacementReportOut(PlacementFiguresOut):
    """``GET /v1/placements/{id}/report``: totals over local days ``from``..``to`` in
    ``time_zone``, and ``days`` (``granularity=day``) or ``hours`` (``granularity=hour``;
    then there is no ``days``). Money in integer micros of ``currency``."""

    model_config = ConfigDict(populate_by_name=True)

    placement: str
    from_: date = Field(alias="from")
    to: date
    time_zone: str
    granularity: str
    currency: str
    days: list[PlacementDayOut] | None = None
    hours: list[PlacementHourOut] | None = None
