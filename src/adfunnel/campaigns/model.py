"""Domain records of the advertiser side (advertiser, campaign, ad, with their goals,
frequency caps and dayparts), the operator's (placements and their house ads, model
releases) and the change log's record of each write.

These are immutable values shared by every plane: the store returns them, the
change log carries them, ad servers hold them in memory. Money is integer micros
of the deployment's currency (``adfunnel.money``). The enumerations they take values
from are in :mod:`adfunnel.campaigns.vocabulary` (exported here too, where most
importers read them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime

from adfunnel.campaigns.creative import Creative
from adfunnel.campaigns.vocabulary import (
    DEFAULT_ATTRIBUTION_WINDOW_S,
    LEGACY_BILLABLE_EVENT,
    MAX_ATTRIBUTION_WINDOW_S,
    MAX_COOLDOWN_S,
    AdStatus,
    AuctionType,
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
    ReviewState,
)
from adfunnel.money import impression_charge_bound

__all__ = ["DEFAULT_ATTRIBUTION_WINDOW_S", "HOUSE_ID", "LEGACY_BILLABLE_EVENT",
           "MAX_ATTRIBUTION_WINDOW_S", "MAX_COOLDOWN_S", "MODEL_TARGETS", "Ad", "AdStatus",
           "Advertiser", "AuctionType", "BidStrategy", "BidType", "BillableEvent", "BudgetPeriod",
           "Campaign", "CampaignStatus", "CapLevel", "CapWindow", "ChangeRecord", "Daypart",
           "FrequencyCap", "Goal", "GoalMetric", "HouseAd", "ModelRelease", "Objective",
           "PacingMode", "Placement", "Priority", "ReviewState"]


@dataclass(frozen=True, slots=True)
class Goal:
    """What a sponsorship or guaranteed line is sold for.

    ``share``: probability in (0, 1] (metric ``share``; 1 is a takeover). ``total``:
    impressions or clicks to deliver over the flight (metrics ``impressions``/``clicks``).
    """

    metric: GoalMetric
    share: float | None = None
    total: int | None = None


@dataclass(frozen=True, slots=True)
class FrequencyCap:
    """One frequency cap of a campaign, per user, at ``level``; two kinds:

    - a *counter*: at most ``count`` impressions per ``window`` (``cooldown_s`` is None);
    - a *cooldown*: at least ``cooldown_s`` seconds between two impressions
      (``count`` and ``window`` are None).

    Build them with :meth:`counter` and :meth:`cooldown`; the store refuses a cap
    that is both or neither (``adfunnel.campaigns.validate``). All caps of a campaign
    hold together (AND).
    """

    count: int | None
    window: CapWindow | None
    level: CapLevel
    cooldown_s: int | None = None

    @classmethod
    def counter(cls, count: int, window: CapWindow, level: CapLevel) -> FrequencyCap:
        """At most ``count`` impressions per user per ``window`` at ``level``."""
        return cls(count, window, level)

    @classmethod
    def cooldown(cls, seconds: int, level: CapLevel) -> FrequencyCap:
        """At least ``seconds`` between two impressions to one user at ``level``."""
        return cls(None, None, level, seconds)

    @property
    def is_cooldown(self) -> bool:
        return self.cooldown_s is not None


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
    #: a conversion bills (CPA) only this many seconds after its click at most
    attribution_window_s: int = DEFAULT_ATTRIBUTION_WINDOW_S
    targeting: str | None = None
    version: int = 1
    #: the beacon that bills its impressions (serves after a change carry the new one)
    billable_event: BillableEvent = BillableEvent.VIEWABLE
    #: the tier it sells in; ``goal`` is required for sponsorship and guaranteed lines
    priority: Priority = Priority.AUCTION
    goal: Goal | None = None
    budget_period: BudgetPeriod = BudgetPeriod.DAY
    #: the budget of the whole flight (``budget_period`` flight without a goal), micros
    flight_budget_micros: int | None = None
    #: how each auction's bid is set; automatic strategies derive ``bid_micros``
    #: (:mod:`adfunnel.campaigns.bidding_terms`)
    bid_strategy: BidStrategy = BidStrategy.MANUAL
    #: max_clicks / max_conversions: never bid more per action, micros (None: no cap)
    bid_cap_micros: int | None = None
    #: target_cpa: the flight's average cost per conversion at most this, micros
    target_cpa_micros: int | None = None
    #: when the strategy terms (strategy, cap, target) last changed, aware UTC from the
    #: injected clock; the budget service restarts λ at its safe value when it moves. A
    #: budget change keeps λ: an uncapped strategy's bids then scale with its new value
    #: (v = budget / 100), as a larger budget asks. None: not since creation.
    bid_strategy_since: datetime | None = None

    @property
    def max_charge_micros(self) -> int:
        """The most one billable event can charge, micros: one impression of a CPM bid rounded
        up (a bound for budgets, never what is billed), else the bid per click or conversion.
        At least 1, as bids are positive."""
        if self.bid_type is BidType.CPM:
            return impression_charge_bound(self.bid_micros)
        return self.bid_micros


@dataclass(frozen=True, slots=True)
class Ad:
    """One creative of a campaign. Only ``approved`` and ``active`` ads serve.

    ``landing_url`` is http(s) and stored byte-for-byte as given. ``quality_micros``
    is the operator's adjustment of the ad's total value, micros per impression
    (positive or negative, DESIGN.md §The funnel step 6); advertisers cannot set it.
    ``creative`` is what the ad shows (``adfunnel.campaigns.creative``); an ad made
    before creatives had content has only ``creative_ref`` (which is "" for an ad given
    only a creative). ``categories`` (IAB content taxonomy 1.0 ids), ``adomain``
    (advertiser domains) and ``bundle`` (the app it promotes) are what a request's block
    lists refuse (``adfunnel.targeting.blocks``), stored canonical and deduplicated.
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
    quality_micros: int = 0
    version: int = 1
    creative: Creative | None = None
    categories: tuple[str, ...] = ()
    adomain: tuple[str, ...] = ()
    bundle: str | None = None

    @property
    def approved(self) -> bool:
        """Whether a reviewer approved what the ad shows now: the one rule for serving
        it, landing its clicks and showing its markup (an edit of what it shows sends it
        back to review, and tokens served before still name it)."""
        return self.review_state is ReviewState.APPROVED


#: Campaign and ad id carried by a house ad's token: no stored record has id 0, and the
#: tracker never bills it.
HOUSE_ID = 0


@dataclass(frozen=True, slots=True)
class HouseAd:
    """The operator's own creative of a placement.

    Served at price 0 in a slot no paid ad fills (when it has the slot's format and
    size), flagged as house, never billed and never counted toward any budget.
    """

    creative_ref: str
    landing_url: str
    format: str
    width: int
    height: int


#: What a model release serves: pCTR, pCVR, or first-price shading's win curves.
MODEL_TARGETS = ("click", "conversion", "shading")


@dataclass(frozen=True, slots=True)
class ModelRelease:
    """A model artifact registered for serving (DESIGN.md §The funnel, step 5).

    ``model_version`` is the artifact's content hash, ``path`` its directory as the ad
    servers see it, ``target`` what it predicts (``click``: pCTR; ``conversion``: the
    pCVR of CPA candidates). For each target, ad servers serve with the *active*
    release of highest ``id``; a new registration is active and leaves the older ones
    of its target inactive, through the change log, so every process switches without a
    restart. ``shading``: a shading release (:mod:`adfunnel.prediction.shading_release`).
    """

    id: int
    model_version: str
    path: str
    dataset: str
    active: bool = True
    version: int = 1
    target: str = "click"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where ads appear, as the operator configures it; ``id`` is the ``placement.id``
    of ad requests.

    Reserves are micros per thousand impressions: a request from a country listed in
    ``country_reserves_cpm_micros`` (ISO 3166-1 alpha-2, upper case) gets that reserve,
    any other the default ``reserve_cpm_micros``; the auction applies the higher of it
    and the request's own. Empty ``allowed_sizes`` (``"WIDTHxHEIGHT"``) or
    ``allowed_formats`` allow every size or format. The mapping is never mutated.

    ``allowed_origins``: the web origins (``https://news.example``, as browsers send them
    in ``Origin``) whose pages may ask for this placement's ads and fire its beacons from
    a browser; empty: none but the server's own (requests without ``Origin``, from apps
    and servers, are not concerned).
    """

    id: str
    name: str
    reserve_cpm_micros: int = 0
    country_reserves_cpm_micros: dict[str, int] = field(default_factory=dict)
    allowed_sizes: tuple[str, ...] = ()
    allowed_formats: tuple[str, ...] = ()
    house_ad: HouseAd | None = None
    version: int = 1
    allowed_origins: tuple[str, ...] = ()
    #: second price (GSP) or first price; quality, reserves and one ad per campaign and
    #: advertiser per page hold in both (:func:`adfunnel.auction.gsp.run_auction`)
    auction_type: AuctionType = AuctionType.SECOND_PRICE

    def reserve_for(self, countries: Iterable[str]) -> int:
        """The configured reserve (micros per mille) for a request from ``countries``
        (upper-case codes; several: the highest applies, none listed: the default)."""
        listed = [self.country_reserves_cpm_micros[c] for c in countries
                  if c in self.country_reserves_cpm_micros]
        return max(listed) if listed else self.reserve_cpm_micros

    def size_allowed(self, width: int, height: int) -> bool:
        return not self.allowed_sizes or f"{width}x{height}" in self.allowed_sizes

    def format_allowed(self, format: str) -> bool:
        return not self.allowed_formats or format in self.allowed_formats


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One committed write, in commit order (``seq``), carrying the whole new record.

    Consumers apply a record only if its ``version`` is newer than what they hold,
    so duplicates and reordering are harmless. ``entity_id`` is the record's id; for a
    placement (whose id is a string) it is the placements table's integer ``row_id``.
    """

    seq: int
    entity: str  # "advertiser" | "campaign" | "ad" | "placement" | "model"
    entity_id: int
    version: int
    record: Advertiser | Campaign | Ad | Placement | ModelRelease
    committed_at: datetime = field(compare=False)
