"""Request and response bodies of the advertiser API (pydantic v2).

Input models forbid unknown fields. Money fields are strict integers of micros: a
float (``1.0``, ``NaN``), a bool or a string is refused, never coerced. Dates are
``YYYY-MM-DD`` strings. ``landing_url`` is validated as a plain string and never
normalised: an IRI (non-ASCII host, path or query) is stored as given and must have a
URI form (:func:`adfunnel.campaigns.landing.to_uri`, used by the click redirect).
``targeting`` is the raw JSON tree; the route validates it with
``adfunnel.targeting.parse_expr`` so errors can name the offending node.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any

import pycountry
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict

from adfunnel.campaigns.landing import landing_url_problem, uri_problem
from adfunnel.campaigns.model import (
    DEFAULT_ATTRIBUTION_WINDOW_S,
    MAX_ATTRIBUTION_WINDOW_S,
    MAX_COOLDOWN_S,
    AdStatus,
    BidType,
    CampaignStatus,
    CapLevel,
    CapWindow,
    Objective,
    PacingMode,
    ReviewState,
)
from adfunnel.campaigns.schedule import is_valid_zone
from adfunnel.campaigns.validate import (
    MAX_ALLOWED,
    MAX_QUALITY_MICROS,
    MAX_RESERVE_CPM_MICROS,
    PLACEMENT_ID,
    SIZE,
)
from adfunnel.clock import day_problem

_MAX_MICROS = 2**63 - 1
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

#: Non-negative integer micros (budgets).
Micros = Annotated[int, Strict(), Field(ge=0, le=_MAX_MICROS)]
#: Positive integer micros (bids).
PositiveMicros = Annotated[int, Strict(), Field(gt=0, le=_MAX_MICROS)]
Version = Annotated[int, Strict(), Field(ge=1)]
Name = Annotated[str, Strict(), Field(min_length=1, max_length=200)]


def _iso_date(value: Any) -> Any:
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("must be a date YYYY-MM-DD")
    if not isinstance(value, str | date):
        raise ValueError("must be a date YYYY-MM-DD")
    return value


def _zone(value: str) -> str:
    if not is_valid_zone(value):
        raise ValueError(f"unknown time zone {value!r} (expected an IANA name)")
    return value


def _url(value: str) -> str:
    # an IRI is accepted and stored as given; it must have a URI form for the redirect
    problem = landing_url_problem(value) or uri_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _in_domain(value: date) -> date:
    problem = day_problem(value)  # the domain adds days to it (flights, local days)
    if problem:
        raise ValueError(problem)
    return value


#: A calendar day the domain can represent (also the report ranges' ``from``/``to``).
DomainDay = Annotated[date, AfterValidator(_in_domain)]
LocalDate = Annotated[DomainDay, BeforeValidator(_iso_date)]
TimeZone = Annotated[str, Strict(), AfterValidator(_zone)]
LandingUrl = Annotated[str, Strict(), AfterValidator(_url)]
Text = Annotated[str, Strict(), Field(min_length=1, max_length=500), AfterValidator(_not_blank)]
Size = Annotated[int, Strict(), Field(gt=0, le=100_000)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class CampaignIn(_In):
    """A new campaign. Money in micros; flight dates are local dates in ``time_zone``."""

    advertiser_id: Annotated[int, Strict(), Field(ge=1)]
    name: Annotated[Name, AfterValidator(_not_blank)]
    objective: Objective
    bid_type: BidType
    bid_micros: PositiveMicros
    daily_budget_micros: Micros
    lifetime_budget_micros: Micros | None = None
    time_zone: TimeZone
    flight_start: LocalDate
    flight_end: LocalDate | None = None
    dayparts: Annotated[list[DaypartIn], Field(max_length=100)] = []
    status: CampaignStatus = CampaignStatus.ACTIVE
    pacing_mode: PacingMode = PacingMode.EVEN
    frequency_caps: Annotated[list[FrequencyCapIn], Field(max_length=20)] = []
    targeting: dict[str, Any] | None = None
    attribution_window_s: AttributionWindow = DEFAULT_ATTRIBUTION_WINDOW_S


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


#: Patch fields that may be set to ``null``.
CAMPAIGN_NULLABLE = frozenset({"lifetime_budget_micros", "flight_end", "targeting"})


class BudgetIn(_In):
    """``PUT /v1/campaigns/{id}/budget``; an absent ``lifetime_budget_micros`` is kept."""

    daily_budget_micros: Micros
    lifetime_budget_micros: Micros | None = None
    version: Version | None = None


class VersionIn(_In):
    """Optional body of pause/resume: the version the client last read."""

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
    version: int


class FieldProblemOut(BaseModel):
    field: str
    problem: str


class CampaignWritten(CampaignOut):
    """Answer of a campaign write: the campaign, plus ``warnings`` when it cannot deliver
    as written (flight already over, one charge above the daily budget; see
    ``adfunnel.campaigns.checks``). Omitted when there is nothing to warn about, so the
    answer equals a later GET."""

    warnings: list[FieldProblemOut] = []


# --- ads ---------------------------------------------------------------------------------


class AdIn(_In):
    """A new ad; ``landing_url`` (http/https URL or IRI) is stored byte-for-byte."""

    landing_url: LandingUrl
    creative_ref: Text
    format: Annotated[str, Strict(), Field(min_length=1, max_length=64)]
    width: Size
    height: Size
    review_state: ReviewState = ReviewState.APPROVED
    status: AdStatus = AdStatus.ACTIVE


class AdPatch(_In):
    version: Version | None = None
    landing_url: LandingUrl | None = None
    creative_ref: Text | None = None
    format: Annotated[str, Strict(), Field(min_length=1, max_length=64)] | None = None
    width: Size | None = None
    height: Size | None = None
    review_state: ReviewState | None = None
    status: AdStatus | None = None


class AdOut(BaseModel):
    id: int
    campaign_id: int
    landing_url: str
    creative_ref: str
    format: str
    width: int
    height: int
    review_state: str
    status: str
    quality_micros: int  # set by the operator (PUT /v1/ads/{id}/quality)
    version: int


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
    days: list[ReportDay]
    ivt: dict[str, int] | None = None
    lifetime_budget_micros: int | None = None
    lifetime_billed_micros: int = 0
    lifetime_remaining_micros: int | None = None


class RollupTotalsOut(BaseModel):
    """Counts and money (micros) of rollups; ``ivt``: reason code -> invalid events (never
    billed). Metrics are null without their denominator: ``ctr`` = clicks / impressions,
    ``ecpm_micros`` = billed × 1000 // impressions, ``cost_per_conversion_micros`` =
    billed // conversions."""

    impressions: int
    clicks: int
    conversions: int
    billed_micros: int
    absorbed_micros: int
    ivt: dict[str, int]
    ctr: float | None
    ecpm_micros: int | None
    cost_per_conversion_micros: int | None


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
    from_: date = Field(alias="from")
    to: date
    time_zone: str
    granularity: str
    group_by: str
    totals: RollupTotalsOut
    rows: list[RollupRowOut]


# --- operator settings: placements, ad quality ----------------------------------------------


def _placement_id(value: str) -> str:
    if not PLACEMENT_ID.fullmatch(value):
        raise ValueError("must be 1-200 of [A-Za-z0-9._:-], starting alphanumeric")
    return value


def _countries(value: dict[str, int]) -> dict[str, int]:
    """Codes upper-cased (``us`` → ``US``) and checked against ISO 3166-1 alpha-2."""
    out: dict[str, int] = {}
    for code, micros in value.items():
        upper = code.upper()
        if len(upper) != 2 or pycountry.countries.get(alpha_2=upper) is None:
            raise ValueError(f"{code!r} is not an ISO 3166-1 alpha-2 country code")
        if upper in out:
            raise ValueError(f"{upper} is given twice")
        out[upper] = micros
    return out


def _size(value: str) -> str:
    if not SIZE.fullmatch(value):
        raise ValueError("must be WIDTHxHEIGHT in pixels, e.g. 300x250")
    return value


def _unique(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError("must not repeat a value")
    return values


PlacementId = Annotated[str, Strict(), AfterValidator(_placement_id)]
#: Reserve price, integer micros per thousand impressions.
ReserveMicros = Annotated[int, Strict(), Field(ge=0, le=MAX_RESERVE_CPM_MICROS)]
CountryReserves = Annotated[
    dict[str, ReserveMicros], Field(max_length=300), AfterValidator(_countries)
]
FormatName = Annotated[
    str, Strict(), Field(min_length=1, max_length=64), AfterValidator(_not_blank)
]
Sizes = Annotated[
    list[Annotated[str, Strict(), AfterValidator(_size)]],
    Field(max_length=MAX_ALLOWED), AfterValidator(_unique),
]
Formats = Annotated[list[FormatName], Field(max_length=MAX_ALLOWED), AfterValidator(_unique)]


class HouseAdIn(_In):
    """The operator's own creative; it must have an allowed size and format."""

    creative_ref: Text
    landing_url: LandingUrl
    format: FormatName
    width: Size
    height: Size


class PlacementIn(_In):
    """A new placement. ``id`` is what ad requests send as ``placement.id``; reserves are
    micros per mille; country codes ISO 3166-1 alpha-2 (any case, stored upper case);
    empty ``allowed_sizes``/``allowed_formats`` allow everything."""

    id: PlacementId
    name: Annotated[Name, AfterValidator(_not_blank)]
    reserve_cpm_micros: ReserveMicros = 0
    country_reserves_cpm_micros: CountryReserves = {}
    allowed_sizes: Sizes = []
    allowed_formats: Formats = []
    house_ad: HouseAdIn | None = None


class PlacementPatch(_In):
    """Fields to change; ``house_ad: null`` removes the house ad. ``version`` as for
    :class:`CampaignPatch` (stale: HTTP 409)."""

    version: Version | None = None
    name: Annotated[Name, AfterValidator(_not_blank)] | None = None
    reserve_cpm_micros: ReserveMicros | None = None
    country_reserves_cpm_micros: CountryReserves | None = None
    allowed_sizes: Sizes | None = None
    allowed_formats: Formats | None = None
    house_ad: HouseAdIn | None = None


#: Placement patch fields that may be set to ``null``.
PLACEMENT_NULLABLE = frozenset({"house_ad"})


class HouseAdOut(BaseModel):
    creative_ref: str
    landing_url: str
    format: str
    width: int
    height: int


class PlacementOut(BaseModel):
    id: str
    name: str
    reserve_cpm_micros: int
    country_reserves_cpm_micros: dict[str, int]
    allowed_sizes: list[str]
    allowed_formats: list[str]
    house_ad: HouseAdOut | None
    version: int


class QualityIn(_In):
    """``PUT /v1/ads/{id}/quality``: the operator's quality, micros per impression (±)."""

    quality_micros: Annotated[
        int, Strict(), Field(ge=-MAX_QUALITY_MICROS, le=MAX_QUALITY_MICROS)
    ]
    version: Version | None = None


# --- click models ----------------------------------------------------------------------


class ModelIn(_In):
    """A click model artifact to serve with: its directory as the ad servers see it
    (written by ``adfunnel model train --out DIR``)."""

    path: Annotated[str, Field(min_length=1, max_length=1024)]


class ModelOut(BaseModel):
    id: int
    model_version: str
    path: str
    dataset: str
    active: bool
    version: int
    target: str = "click"
    #: the artifact's held-out figures (only when registering: read from the artifact)
    metrics: dict[str, Any] | None = None
