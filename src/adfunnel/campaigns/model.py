"""Domain records of the advertiser side: advertiser, campaign, ad.

These are immutable values shared by every plane: the store returns them, the
change log carries them, ad servers hold them in memory. Money is integer micros
of the deployment's currency (``adfunnel.money``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum


class Objective(StrEnum):
    IMPRESSIONS = "impressions"
    CLICKS = "clicks"
    CONVERSIONS = "conversions"


class BidType(StrEnum):
    """What the bid buys: a thousand impressions, a click, or a conversion."""

    CPM = "CPM"
    CPC = "CPC"
    CPA = "CPA"


class CampaignStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    ENDED = "ended"


class PacingMode(StrEnum):
    EVEN = "even"
    ACCELERATED = "accelerated"


class ReviewState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class AdStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"


class CapWindow(StrEnum):
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"


class CapLevel(StrEnum):
    AD = "ad"
    CAMPAIGN = "campaign"
    ADVERTISER = "advertiser"


@dataclass(frozen=True, slots=True)
class FrequencyCap:
    """At most ``count`` impressions per user per ``window`` at ``level``."""

    count: int
    window: CapWindow
    level: CapLevel


@dataclass(frozen=True, slots=True)
class Daypart:
    """Local hours ``[start_hour, end_hour)`` on ``weekdays`` (0 = Monday … 6 = Sunday)."""

    weekdays: tuple[int, ...]
    start_hour: int
    end_hour: int


@dataclass(frozen=True, slots=True)
class Advertiser:
    id: int
    name: str
    version: int = 1


@dataclass(frozen=True, slots=True)
class Campaign:
    """One campaign.

    ``bid_micros`` is per thousand impressions (CPM), per click (CPC) or per
    conversion (CPA). ``flight_start``/``flight_end`` are *local* dates in
    ``time_zone`` (end inclusive, ``None`` = open-ended). Empty ``dayparts`` means
    every hour. ``targeting`` is the canonical JSON text of the expression
    (``adfunnel.targeting.expr``); ``None`` targets everyone.
    """

    id: int
    advertiser_id: int
    name: str
    objective: Objective
    bid_type: BidType
    bid_micros: int
    daily_budget_micros: int
    time_zone: str
    flight_start: date
    flight_end: date | None = None
    lifetime_budget_micros: int | None = None
    dayparts: tuple[Daypart, ...] = ()
    status: CampaignStatus = CampaignStatus.ACTIVE
    pacing_mode: PacingMode = PacingMode.EVEN
    frequency_caps: tuple[FrequencyCap, ...] = ()
    targeting: str | None = None
    version: int = 1


@dataclass(frozen=True, slots=True)
class Ad:
    """One creative of a campaign. Only ``approved`` and ``active`` ads serve.

    ``landing_url`` is http(s) and stored byte-for-byte as given.
    """

    id: int
    campaign_id: int
    landing_url: str
    creative_ref: str
    format: str
    width: int
    height: int
    review_state: ReviewState = ReviewState.APPROVED
    status: AdStatus = AdStatus.ACTIVE
    version: int = 1


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One committed write, in commit order (``seq``), carrying the whole new record.

    Consumers apply a record only if its ``version`` is newer than what they hold,
    so duplicates and reordering are harmless.
    """

    seq: int
    entity: str  # "advertiser" | "campaign" | "ad"
    entity_id: int
    version: int
    record: Advertiser | Campaign | Ad
    committed_at: datetime = field(compare=False)
