"""The campaign store protocol: advertisers, campaigns, ads, placements and model
releases, versioned, with a change log.

Every write bumps the record's ``version`` by one (new records start at 1) and appends
one change record carrying the whole new record. Ad servers boot from
:meth:`CampaignStore.snapshot` and then follow :meth:`CampaignStore.changes_since`
(``adfunnel.campaigns.change_feed``); in-process consumers may instead
:meth:`CampaignStore.subscribe` to be called right after each commit. Records are checked
against the domain rules of :mod:`adfunnel.campaigns.validate`; errors are those of
:mod:`adfunnel.campaigns.errors`. The implementation is
:class:`adfunnel.campaigns.sql_store.SqlCampaignStore` (SQLite or PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Protocol

from adfunnel.campaigns.creative import Creative
from adfunnel.campaigns.model import (
    DEFAULT_ATTRIBUTION_WINDOW_S,
    Ad,
    AdStatus,
    Advertiser,
    AuctionType,
    BidStrategy,
    BidType,
    BillableEvent,
    BudgetPeriod,
    Campaign,
    CampaignStatus,
    ChangeRecord,
    Daypart,
    FrequencyCap,
    Goal,
    HouseAd,
    ModelRelease,
    Objective,
    PacingMode,
    Placement,
    Priority,
    ReviewState,
)

#: Largest page ``changes_since`` returns.
MAX_CHANGES_PAGE = 10_000


ChangeListener = Callable[[ChangeRecord], None]


class CampaignStore(Protocol):
    """Advertiser-side records with versions and a change log.

    Every implementation passes tests/contract/test_campaign_store_contract.py.
    Money arguments are integer micros. Errors: :class:`NotFound`,
    :class:`VersionConflict`, :class:`InvalidChange`.
    """

    def create_advertiser(self, name: str) -> Advertiser: ...

    def get_advertiser(self, advertiser_id: int) -> Advertiser: ...

    def list_advertisers(self, *, after: int | None = None,
                         limit: int | None = None) -> list[Advertiser]: ...

    def create_campaign(
        self,
        *,
        advertiser_id: int,
        name: str,
        objective: Objective | str,
        bid_type: BidType | str,
        bid_micros: int,
        daily_budget_micros: int,
        time_zone: str,
        flight_start: date,
        flight_end: date | None = None,
        lifetime_budget_micros: int | None = None,
        dayparts: tuple[Daypart, ...] = (),
        status: CampaignStatus | str = CampaignStatus.ACTIVE,
        pacing_mode: PacingMode | str = PacingMode.EVEN,
        frequency_caps: tuple[FrequencyCap, ...] = (),
        targeting: str | None = None,
        attribution_window_s: int = DEFAULT_ATTRIBUTION_WINDOW_S,
        billable_event: BillableEvent | str = BillableEvent.VIEWABLE,
        priority: Priority | str = Priority.AUCTION,
        goal: Goal | Mapping[str, Any] | None = None,
        budget_period: BudgetPeriod | str = BudgetPeriod.DAY,
        flight_budget_micros: int | None = None,
        bid_strategy: BidStrategy | str = BidStrategy.MANUAL,
        bid_cap_micros: int | None = None,
        target_cpa_micros: int | None = None,
        bid_strategy_since: datetime | None = None,
    ) -> Campaign: ...

    def get_campaign(self, campaign_id: int) -> Campaign: ...

    def list_campaigns(self, advertiser_id: int | None = None, *, after: int | None = None,
                       limit: int | None = None,
                       include_archived: bool = True) -> list[Campaign]: ...

    def update_campaign(
        self, campaign_id: int, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Campaign: ...

    def create_ad(
        self,
        *,
        campaign_id: int,
        landing_url: str,
        creative_ref: str = "",
        format: str,
        width: int,
        height: int,
        review_state: ReviewState | str = ReviewState.APPROVED,
        status: AdStatus | str = AdStatus.ACTIVE,
        creative: Creative | None = None,
        categories: Sequence[str] = (),
        adomain: Sequence[str] = (),
        bundle: str | None = None,
    ) -> Ad: ...

    def get_ad(self, ad_id: int) -> Ad: ...

    def list_ads(self, campaign_id: int, *, after: int | None = None,
                 limit: int | None = None, include_archived: bool = True) -> list[Ad]: ...

    def list_ads_in_review(self, state: ReviewState | str, *, after: int | None = None,
                           limit: int | None = None) -> list[Ad]: ...

    def update_ad(
        self, ad_id: int, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Ad: ...

    def create_placement(
        self,
        *,
        id: str,
        name: str,
        reserve_cpm_micros: int = 0,
        country_reserves_cpm_micros: Mapping[str, int] | None = None,
        allowed_sizes: tuple[str, ...] = (),
        allowed_formats: tuple[str, ...] = (),
        house_ad: HouseAd | None = None,
        allowed_origins: tuple[str, ...] = (),
        auction_type: AuctionType | str = AuctionType.SECOND_PRICE,
    ) -> Placement: ...

    def get_placement(self, placement_id: str) -> Placement: ...

    def list_placements(self, *, after: str | None = None,
                        limit: int | None = None) -> list[Placement]:
        """In creation order, those created after placement ``after``."""
        ...

    def update_placement(
        self, placement_id: str, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Placement: ...

    def register_model(self, model_version: str, path: str, dataset: str,
                       target: str = "click") -> ModelRelease: ...

    def list_models(self, *, after: int | None = None,
                    limit: int | None = None) -> list[ModelRelease]: ...

    def changes_since(self, seq: int, limit: int = 1000) -> list[ChangeRecord]: ...

    def snapshot(self) -> tuple[list[Advertiser], list[Campaign], list[Ad], int]: ...

    def subscribe(self, callback: ChangeListener) -> Callable[[], None]: ...
