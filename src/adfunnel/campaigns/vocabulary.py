"""The advertiser side's vocabulary: the enumerations its records take their values from
(objective, bid type and strategy, auction type, statuses, billable event, pacing mode,
priority, goal metric, budget period, review state, cap window and level), with the limits
and defaults that go with them (attribution window, cooldown).

The records themselves are in :mod:`adfunnel.campaigns.model`, which also exports these
names.
"""

from __future__ import annotations

from enum import StrEnum


class Objective(StrEnum):
    IMPRESSIONS = "impressions"
    CLICKS = "clicks"
    CONVERSIONS = "conversions"


#: Default seconds after a click within which its first conversion is attributed.
DEFAULT_ATTRIBUTION_WINDOW_S = 7 * 86_400
#: Longest attribution window a campaign may set (the tracker accepts conversion
#: postbacks this long after their token's expiry).
MAX_ATTRIBUTION_WINDOW_S = 30 * 86_400


class BidType(StrEnum):
    """What the bid buys: a thousand impressions, a click, or a conversion."""

    CPM = "CPM"
    CPC = "CPC"
    CPA = "CPA"


class BidStrategy(StrEnum):
    """How the bid of each auction is set (README §Bid strategies and auction types):
    ``manual`` bids ``bid_micros`` as given (pacing throttles); the automatic ones bid
    pCTR × v / λ per auction, v the value of one action (``bid_micros``, derived by
    :mod:`adfunnel.campaigns.bidding_terms`) and λ ≥ 1 the pacing multiplier:
    ``max_clicks`` (CPC) and ``max_conversions`` (CPA) spend the period's budget for the
    most actions, ``target_cpa`` (CPA) keeps the flight's cost per conversion ≤
    ``target_cpa_micros``."""

    MANUAL = "manual"
    MAX_CLICKS = "max_clicks"
    MAX_CONVERSIONS = "max_conversions"
    TARGET_CPA = "target_cpa"


class AuctionType(StrEnum):
    """How a placement's auction prices its winners: ``second_price`` (GSP: the least bid
    that keeps the rank) or ``first_price`` (the winner pays its bid)."""

    SECOND_PRICE = "second_price"
    FIRST_PRICE = "first_price"


class CampaignStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    ENDED = "ended"
    COMPLETED = "completed"  # its lifetime budget is spent (set when billing shows it)
    ARCHIVED = "archived"  # DELETEd: never served or listed by default, history kept


class BillableEvent(StrEnum):
    """Which beacon bills a served impression (a CPM campaign's charge; for CPC and CPA
    the billed impression is the prerequisite of a billed click).

    ``viewable``: the tag's ``/vi``, fired when the ad met the MRC viewable standard
    (50 % of its pixels in view for one continuous second; 30 % for large ads); the
    default for new campaigns. ``rendered``: ``/i``, fired when the ad was rendered in
    the page (every campaign made before the field existed; feeds whose client fires
    only ``/i``).
    """

    VIEWABLE = "viewable"
    RENDERED = "rendered"


#: The billable event of campaigns stored before the field existed (migration 0017)
#: and of change-log payloads without it: they billed every rendered impression.
LEGACY_BILLABLE_EVENT = BillableEvent.RENDERED


class PacingMode(StrEnum):
    """How a budget's plan spreads over its day or flight: ``even`` follows the forecast
    traffic, ``frontloaded`` puts 60 % of it in the first half, ``accelerated`` does not
    pace (spend as traffic comes)."""

    EVEN = "even"
    ACCELERATED = "accelerated"
    FRONTLOADED = "frontloaded"


class Priority(StrEnum):
    """Which tier a campaign sells in (DESIGN.md §How ads are sold): a sponsorship takes
    its share of the matching requests first, a guaranteed line is served ahead of the
    auction as often as its goal's plan needs, the auction gets the rest; the
    placement's house ad fills what none of them does."""

    SPONSORSHIP = "sponsorship"
    GUARANTEED = "guaranteed"
    AUCTION = "auction"


class GoalMetric(StrEnum):
    SHARE = "share"  # sponsorship: a fraction of the matching requests
    IMPRESSIONS = "impressions"  # guaranteed: billed impressions over the flight
    CLICKS = "clicks"  # guaranteed: billed clicks over the flight


class BudgetPeriod(StrEnum):
    """The span a campaign's budget limits (DESIGN.md §How ads are sold): ``day`` (the
    daily budget per local day), ``flight`` (``flight_budget_micros`` or the goal over
    the whole flight), ``average_day`` (the daily budget is an average: a local day
    up to 2×, a calendar month at most 30.4×; Google Ads' rule)."""

    DAY = "day"
    FLIGHT = "flight"
    AVERAGE_DAY = "average_day"


class ReviewState(StrEnum):
    """Where an ad stands with the reviewers; only ``approved`` ads are served."""

    PENDING = "pending_review"
    APPROVED = "approved"
    REJECTED = "rejected"

    @classmethod
    def _missing_(cls, value: object) -> ReviewState | None:
        # change-log records written before migration 0012 spell it "pending"
        return cls.PENDING if value == "pending" else None


class AdStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    ARCHIVED = "archived"  # DELETEd: never served or listed by default, history kept


class CapWindow(StrEnum):
    """The calendar window a counter cap counts over, in the campaign's time zone."""

    HOUR = "hour"
    DAY = "day"
    WEEK = "week"  # ISO week, Monday 00:00 local
    LIFETIME = "lifetime"  # no window: every serve counts (records live 400 days)


class CapLevel(StrEnum):
    AD = "ad"
    CAMPAIGN = "campaign"
    ADVERTISER = "advertiser"


#: Longest cooldown a cap may ask for, in seconds (400 days).
MAX_COOLDOWN_S = 400 * 86_400
