"""Request and response bodies of the advertiser API's advertisers and campaigns (pydantic v2).

Field types and the input base are :mod:`adfunnel.api.field_types`: money in strict
integer micros, dates ``YYYY-MM-DD``. ``targeting`` is the raw JSON tree; the route
validates it with ``adfunnel.targeting.parse_expr`` so errors can name the offending
node. The bodies of ads are :mod:`adfunnel.api.ad_schemas`, of the reports
:mod:`adfunnel.api.report_schemas`, of the operator's routes (placements, quality,
models) :mod:`adfunnel.api.operator_schemas`.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, Strict

from adfunnel.api.field_types import (
    LocalDate,
    Micros,
    Name,
    PositiveMicros,
    TimeZone,
    Version,
    _In,
    _not_blank,
)
from adfunnel.campaigns.model import (
    DEFAULT_ATTRIBUTION_WINDOW_S,
    MAX_ATTRIBUTION_WINDOW_S,
    MAX_COOLDOWN_S,
    BidStrategy,
    BidType,
    BillableEvent,
    BudgetPeriod,
    CampaignStatus,
    CapLevel,
    CapWindow,
    GoalMetric,
    Objective,
    PacingMode,
    Priority,
)
from adfunnel.campaigns.sales import MAX_GOAL_TOTAL

# --- advertisers ---------------------------------------------------------------------


class AdvertiserIn(_In):
    name: Annotated[Name, AfterValidator(_not_blank)]


class AdvertiserOut(BaseModel):
    id: int
    name: str
    version: int


# --- campaigns -------------------------------------------------------------------------


class DaypartIn(_In):
    """Local hours ``[start_hour, end_hour)`` on ``weekdays`` (0 = Monday … 6 = Sunday)."""

    weekdays: Annotated[
        list[Annotated[int, Strict(), Field(ge=0, le=6)]], Field(min_length=1, max_length=7)
    ]
    start_hour: Annotated[int, Strict(), Field(ge=0, le=23)]
    end_hour: Annotated[int, Strict(), Field(ge=1, le=24)]


class FrequencyCapIn(_In):
    """A cap per user at ``level``: either ``count`` impressions per ``window``
    (``{"level": "campaign", "count": 5, "window": "day"}``) or ``cooldown_s`` seconds
    between two impressions (``{"level": "campaign", "cooldown_s": 1800}``).

    Types and ranges are checked here; the store refuses a cap that is both kinds or
    neither (``adfunnel.campaigns.validate``, HTTP 422 naming ``count``, ``window`` or
    ``cooldown_s``), so the rule holds for PATCH and direct store writes alike.
    """

    level: CapLevel
    count: Annotated[int, Strict(), Field(gt=0, le=1_000_000)] | None = None
    window: CapWindow | None = None
    cooldown_s: Annotated[int, Strict(), Field(ge=1, le=MAX_COOLDOWN_S)] | None = None


#: Seconds after a click within which a conversion bills: 1 hour to 30 days.
AttributionWindow = Annotated[int, Strict(), Field(ge=3_600, le=MAX_ATTRIBUTION_WINDOW_S)]


class GoalIn(_In):
    """What a sponsorship or guaranteed line is sold for: ``{"metric": "share", "share":
    S}`` (a sponsorship's share of the matching requests, 0 < S <= 1; 1 is a takeover)
    or ``{"metric": "impressions" | "clicks", "total": N}`` (a guaranteed line's
    deliveries over its flight). Which metric fits which priority is the store's check
    (``adfunnel.campaigns.sales``, 422 naming ``goal.metric``, ``goal.share`` or
    ``goal.total``)."""

    metric: GoalMetric
    share: Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    total: Annotated[int, Strict(), Field(ge=1, le=MAX_GOAL_TOTAL)] | None = None


class CampaignIn(_In):
    """A new campaign. Money in micros; flight dates are local dates in ``time_zone``.

    How it is sold (``adfunnel.campaigns.sales``): ``priority`` (``auction``, the default;
    ``guaranteed`` with an impressions or clicks ``goal``; ``sponsorship`` with a share
    ``goal``), ``budget_period`` (``day``; ``flight`` with ``flight_budget_micros`` or a
    goal over the flight; ``average_day``: a day up to 2x the daily budget, a month at
    most 30.4x). A guaranteed line's period defaults to ``flight``, any other's to
    ``day``. ``daily_budget_micros`` may be left out with ``flight`` (stored 0: no daily
    ceiling); given, it caps any one local day.

    How it bids (``adfunnel.campaigns.bidding_terms``): ``bid_strategy`` ``manual`` (the
    default) needs ``bid_micros``; for ``max_clicks`` (CPC), ``max_conversions`` and
    ``target_cpa`` (CPA) ``bid_micros`` is derived and must be left out:
    ``target_cpa_micros``, or ``bid_cap_micros``, or 1 % of the period's budget.
    """

    advertiser_id: Annotated[int, Strict(), Field(ge=1)]
    name: Annotated[Name, AfterValidator(_not_blank)]
    objective: Objective
    bid_type: BidType
    #: required with ``manual``; derived (leave it out) with an automatic strategy
    bid_micros: PositiveMicros | None = None
    daily_budget_micros: Micros | None = None
    lifetime_budget_micros: Micros | None = None
    time_zone: TimeZone
    flight_start: LocalDate
    flight_end: LocalDate | None = None
    # pydantic copies these defaults per instance (ruff cannot see that _In is a model)
    dayparts: Annotated[list[DaypartIn], Field(max_length=100)] = []  # noqa: RUF012
    status: CampaignStatus = CampaignStatus.ACTIVE
    pacing_mode: PacingMode = PacingMode.EVEN
    frequency_caps: Annotated[list[FrequencyCapIn], Field(max_length=20)] = []  # noqa: RUF012
    targeting: dict[str, Any] | None = None
    attribution_window_s: AttributionWindow = DEFAULT_ATTRIBUTION_WINDOW_S
    #: the beacon that bills an impression: ``viewable`` (``/vi``, the MRC standard) or
    #: ``rendered`` (``/i``)
    billable_event: BillableEvent = BillableEvent.VIEWABLE
    priority: Priority = Priority.AUCTION
    goal: GoalIn | None = None
    budget_period: BudgetPeriod | None = None
    #: the budget of the whole flight (``budget_period`` flight), micros
    flight_budget_micros: PositiveMicros | None = None
    bid_strategy: BidStrategy = BidStrategy.MANUAL
    #: max_clicks / max_conversions: the most one click or conversion may be bid, micros
    bid_cap_micros: PositiveMicros | None = None
    #: target_cpa (required): the flight's average cost per conversion at most, micros
    target_cpa_micros: PositiveMicros | None = None


class CampaignPatch(_In):
    """Fields to change; absent fields keep their value, ``null`` clears a nullable one.

    ``version``: the version the client last read; a stale one gets HTTP 409. Omitted,
    the write is unconditional.
    """

    version: Version | None = None
    name: Annotated[Name, AfterValidator(_not_blank)] | None = None
    objective: Objective | None = None
    bid_type: BidType | None = None
    bid_micros: PositiveMicros | None = None
    daily_budget_micros: Micros | None = None
    lifetime_budget_micros: Micros | None = None
    time_zone: TimeZone | None = None
    flight_start: LocalDate | None = None
    flight_end: LocalDate | None = None
    dayparts: Annotated[list[DaypartIn], Field(max_length=100)] | None = None
    status: CampaignStatus | None = None
    pacing_mode: PacingMode | None = None
    frequency_caps: Annotated[list[FrequencyCapIn], Field(max_length=20)] | None = None
    targeting: dict[str, Any] | None = None
    attribution_window_s: AttributionWindow | None = None
    #: applies to serves after the change (each serve's token carries its own)
    billable_event: BillableEvent | None = None
    #: making a line guaranteed sets ``budget_period`` to ``flight`` unless it is given
    priority: Priority | None = None
    goal: GoalIn | None = None
    budget_period: BudgetPeriod | None = None
    flight_budget_micros: PositiveMicros | None = None
    #: a change of strategy, cap or target restarts the pacing multiplier λ; a new
    #: strategy drops the old one's cap or target unless the patch sets it
    bid_strategy: BidStrategy | None = None
    bid_cap_micros: PositiveMicros | None = None
    target_cpa_micros: PositiveMicros | None = None


#: Patch fields that may be set to ``null``.
CAMPAIGN_NULLABLE = frozenset({"lifetime_budget_micros", "flight_end", "targeting", "goal",
                               "flight_budget_micros", "bid_cap_micros", "target_cpa_micros"})


class BudgetIn(_In):
    """``PUT /v1/campaigns/{id}/budget``; an absent ``lifetime_budget_micros`` or
    ``flight_budget_micros`` is kept (``null`` clears it). ``daily_budget_micros`` is
    required but for a campaign of budget period ``flight`` (its daily ceiling, kept
    when absent)."""

    daily_budget_micros: Micros | None = None
    lifetime_budget_micros: Micros | None = None
    flight_budget_micros: PositiveMicros | None = None
    version: Version | None = None



class DaypartOut(BaseModel):
    weekdays: list[int]
    start_hour: int
    end_hour: int


def _is_none(value: object) -> bool:
    return value is None


class FrequencyCapOut(BaseModel):
    """A counter cap ``{"count", "window", "level"}`` or a cooldown cap
    ``{"level", "cooldown_s"}``: the keys of the other kind are left out, not null."""

    count: int | None = Field(default=None, exclude_if=_is_none)
    window: str | None = Field(default=None, exclude_if=_is_none)
    level: str
    cooldown_s: int | None = Field(default=None, exclude_if=_is_none)


class GoalOut(BaseModel):
    """``{"metric": "share", "share"}`` or ``{"metric": "impressions" | "clicks",
    "total"}``: the key of the other kind is left out, not null."""

    metric: str
    share: float | None = Field(default=None, exclude_if=_is_none)
    total: int | None = Field(default=None, exclude_if=_is_none)


class CampaignOut(BaseModel):
    id: int
    advertiser_id: int
    name: str
    objective: str
    bid_type: str
    bid_micros: int
    daily_budget_micros: int
    lifetime_budget_micros: int | None
    time_zone: str
    flight_start: date
    flight_end: date | None
    dayparts: list[DaypartOut]
    status: str
    pacing_mode: str
    frequency_caps: list[FrequencyCapOut]
    targeting: dict[str, Any] | None
    attribution_window_s: int
    billable_event: str
    priority: str
    goal: GoalOut | None
    budget_period: str
    flight_budget_micros: int | None
    bid_strategy: str
    bid_cap_micros: int | None
    target_cpa_micros: int | None
    #: when the strategy, cap or target last changed (UTC; λ restarted then)
    bid_strategy_since: datetime | None
    version: int


class FieldProblemOut(BaseModel):
    field: str
    problem: str
    #: a warning's machine-readable kind, where it has one (``goal_exceeds_availability``)
    code: str | None = None
    #: ``goal_exceeds_availability``: the impressions the forecast leaves to the line
    available_impressions: int | None = None


class CampaignWritten(CampaignOut):
    """Answer of a campaign write: the campaign, plus ``warnings`` when it cannot deliver
    as written (flight already over, one charge above the daily budget; see
    ``adfunnel.campaigns.checks``). Omitted when there is nothing to warn about, so the
    answer equals a later GET."""

    warnings: list[FieldProblemOut] = []
