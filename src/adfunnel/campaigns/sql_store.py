"""The SQL campaign store (SQLite or PostgreSQL) with its change log.

Implements :class:`adfunnel.campaigns.store.CampaignStore`. Every write runs in one
transaction that (1) bumps the record's ``version`` by one (new records start at 1) and
(2) appends one ``change_log`` row carrying the whole new record.

Commit order = ``seq`` order: on PostgreSQL every write transaction first takes one
transaction-scoped advisory lock, so a reader that has seen ``seq = n`` never later
sees a smaller ``seq`` commit. SQLite serialises writers by itself; each write
transaction here starts with a write statement so it takes the write lock (and
waits on the busy timeout) before reading anything. Campaign writes are rare, so the
serialisation costs nothing that matters.

Every record is checked by :mod:`adfunnel.campaigns.validate` before it is written
(:class:`~adfunnel.campaigns.errors.InvalidChange`); targeting is not parsed — callers
pass the canonical text (``adfunnel.targeting.dump_expr``).

The generic record reads and writes (one transaction per write, the write lock, the
listeners) are :mod:`adfunnel.campaigns.sql_records`; the change log's rows
:mod:`adfunnel.campaigns.sql_change_log`.

Placements are keyed by the string id ad requests carry; their change-log rows are
filed under the table's integer ``row_id`` (``change_log.entity_id`` is an integer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import Engine, select, true

from adfunnel.campaigns import codec
from adfunnel.campaigns.creative import Creative
from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.model import (
    DEFAULT_ATTRIBUTION_WINDOW_S,
    MODEL_TARGETS,
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
from adfunnel.campaigns.sql_change_log import changes_after, last_seq, status_before
from adfunnel.campaigns.sql_records import TABLES, SqlRecords
from adfunnel.campaigns.store import MAX_CHANGES_PAGE, ChangeListener
from adfunnel.campaigns.tables import (
    ads,
    campaigns,
    model_releases,
    placements,
)
from adfunnel.clock import Clock, SystemClock

#: The advertiser-side entities of :meth:`SqlCampaignStore.snapshot`.
_ADVERTISER_SIDE = ("advertiser", "campaign", "ad")


class SqlCampaignStore:
    """:class:`CampaignStore` over SQLAlchemy Core (SQLite or PostgreSQL).

    The schema must exist (``adfunnel.campaigns.migrate.upgrade``). ``clock`` stamps
    ``committed_at`` and ``updated_at`` (domain time, so a replay stamps replay time).
    Thread-safe: each call uses its own connection from the engine's pool.
    """

    def __init__(self, engine: Engine, clock: Clock | None = None) -> None:
        self._engine = engine
        self._records = SqlRecords(engine, clock or SystemClock())

    @property
    def engine(self) -> Engine:
        return self._engine

    # --- advertisers ---------------------------------------------------------------

    def create_advertiser(self, name: str) -> Advertiser:
        """Create an advertiser (version 1).

        Raises:
            InvalidChange: blank name.
        """
        return self._records.create("advertiser", {"name": name})

    def get_advertiser(self, advertiser_id: int) -> Advertiser:
        """Raises: NotFound."""
        return self._records.get("advertiser", advertiser_id)

    def list_advertisers(self, *, after: int | None = None,
                         limit: int | None = None) -> list[Advertiser]:
        """Advertisers by id (ids above ``after``, at most ``limit``: a keyset page)."""
        return self._records.list_page("advertiser", after=after, limit=limit)

    # --- campaigns -----------------------------------------------------------------

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
    ) -> Campaign:
        """Create a campaign (version 1). Money in micros; dates local to ``time_zone``.

        ``targeting`` is canonical expression text (already validated) or ``None``.
        ``priority``, ``goal`` (a :class:`Goal` or its plain object), ``budget_period``
        and ``flight_budget_micros`` say how it is sold (:mod:`adfunnel.campaigns.sales`);
        ``bid_strategy`` with its cap or target how it bids (an automatic strategy's
        ``bid_micros`` is the derived one: :func:`adfunnel.campaigns.bidding_terms.bidding_terms`
        fills it and ``bid_strategy_since``).

        Raises:
            NotFound: no such advertiser.
            InvalidChange: a value breaking a domain rule (see module docstring).
        """
        values = {k: v for k, v in locals().items() if k != "self"}
        return self._records.create("campaign", values, parent=("advertiser", advertiser_id))

    def get_campaign(self, campaign_id: int) -> Campaign:
        """Raises: NotFound."""
        return self._records.get("campaign", campaign_id)

    def list_campaigns(self, advertiser_id: int | None = None, *, after: int | None = None,
                       limit: int | None = None,
                       include_archived: bool = True) -> list[Campaign]:
        """Campaigns by id, optionally of one advertiser only, archived ones unless
        ``include_archived`` is false; ``after`` and ``limit`` make a keyset page."""
        where = true()
        if advertiser_id is not None:
            where = where & (campaigns.c.advertiser_id == advertiser_id)
        if not include_archived:
            where = where & (campaigns.c.status != CampaignStatus.ARCHIVED.value)
        return self._records.list_page("campaign", where, after=after, limit=limit)

    def update_campaign(
        self, campaign_id: int, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Campaign:
        """Apply ``changes`` (field -> new value) and bump the version.

        ``expected_version=None`` writes unconditionally (last writer wins).

        Raises:
            NotFound: no such campaign.
            VersionConflict: the campaign is not at ``expected_version``.
            InvalidChange: an unknown or fixed field, or a value breaking a rule.
        """
        return self._records.update("campaign", campaign_id, changes, expected_version)

    # --- ads -------------------------------------------------------------------------

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
        quality_micros: int = 0,
        creative: Creative | None = None,
        categories: Sequence[str] = (),
        adomain: Sequence[str] = (),
        bundle: str | None = None,
    ) -> Ad:
        """Create an ad of a campaign (version 1); ``landing_url`` is kept byte-for-byte.

        ``quality_micros`` is the operator's quality, micros per impression (may be < 0).
        ``creative`` is what it shows (``adfunnel.campaigns.creative``); with one,
        ``creative_ref`` may be left empty. ``categories`` (IAB content taxonomy 1.0
        ids), ``adomain`` (advertiser domains) and ``bundle`` are what block lists refuse;
        they are stored canonical (``adfunnel.targeting.blocks``).

        Raises:
            NotFound: no such campaign.
            InvalidChange: a non-http(s) URL, a size <= 0, an unknown state, a quality
                beyond ±MAX_QUALITY_MICROS, an invalid creative (``creative.<field>``),
                a category, domain or bundle not of its form (or too many).
        """
        values = {k: v for k, v in locals().items() if k != "self"}
        return self._records.create("ad", values, parent=("campaign", campaign_id))

    def get_ad(self, ad_id: int) -> Ad:
        """Raises: NotFound."""
        return self._records.get("ad", ad_id)

    def list_ads(self, campaign_id: int, *, after: int | None = None,
                 limit: int | None = None, include_archived: bool = True) -> list[Ad]:
        """The ads of one campaign, by id (empty for an unknown campaign), archived ones
        unless ``include_archived`` is false; ``after`` and ``limit`` make a keyset page."""
        where = ads.c.campaign_id == campaign_id
        if not include_archived:
            where = where & (ads.c.status != AdStatus.ARCHIVED.value)
        return self._records.list_page("ad", where, after=after, limit=limit)

    def list_ads_in_review(self, state: ReviewState | str, *, after: int | None = None,
                           limit: int | None = None) -> list[Ad]:
        """Every ad whose review state is ``state``, by id (the review queue), archived
        ones left out; ``after`` and ``limit`` make a keyset page."""
        where = (ads.c.review_state == ReviewState(state).value) & (
            ads.c.status != AdStatus.ARCHIVED.value)
        return self._records.list_page("ad", where, after=after, limit=limit)

    def update_ad(
        self, ad_id: int, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Ad:
        """Apply ``changes`` to an ad and bump its version.

        Raises:
            NotFound, VersionConflict, InvalidChange: as for :meth:`update_campaign`.
        """
        return self._records.update("ad", ad_id, changes, expected_version)

    # --- placements ------------------------------------------------------------------

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
    ) -> Placement:
        """Create a placement (version 1). Reserves are micros per mille; country codes
        ISO 3166-1 alpha-2 in upper case; sizes ``WIDTHxHEIGHT``.

        Raises:
            AlreadyExists: a placement with this id exists.
            InvalidChange: a malformed id, a reserve outside 0..MAX_RESERVE_CPM_MICROS,
                an unknown country code, a malformed or duplicate size or format, a house
                ad that is invalid or not of an allowed size and format.
        """
        values = {k: v for k, v in locals().items() if k != "self"}
        values["country_reserves_cpm_micros"] = dict(country_reserves_cpm_micros or {})
        return self._records.create("placement", values)

    def get_placement(self, placement_id: str) -> Placement:
        """Raises: NotFound."""
        return self._records.get("placement", placement_id)

    def list_placements(self, *, after: str | None = None,
                        limit: int | None = None) -> list[Placement]:
        """Placements in creation order (``row_id``, which only grows: placements are
        never deleted and SQLite's AUTOINCREMENT never reuses one), those created after
        placement ``after`` (none for an unknown id), at most ``limit``: a keyset page
        that a placement created between pages joins at its end, whatever its id.
        """
        t = placements.c
        stmt = select(placements).order_by(t.row_id)
        if after is not None:
            stmt = stmt.where(t.row_id > select(t.row_id).where(t.id == after)
                              .scalar_subquery())
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._records.connect() as conn:
            return [codec.from_row("placement", r) for r in conn.execute(stmt).mappings()]

    def register_model(self, model_version: str, path: str, dataset: str,
                       target: str = "click") -> ModelRelease:
        """Register a model artifact as the active one of its ``target`` (``click``,
        ``conversion``, or ``shading``: first-price shading's win curves); the releases
        of that target active before it become inactive (each change is in the change
        log, so ad servers follow).

        Raises:
            InvalidChange: an empty or too long path, version or dataset, or an unknown
                target.
        """
        if target not in MODEL_TARGETS:
            raise InvalidChange("target", "must be click, conversion or shading")
        release = self._records.create("model", {"model_version": model_version, "path": path,
                                                 "dataset": dataset, "active": True,
                                                 "target": target})
        for old in self._records.list_page("model", model_releases.c.active.is_(True)
                                           & (model_releases.c.target == target)):
            if old.id != release.id:
                self._records.update("model", old.id, {"active": False}, None)
        return release

    def list_models(self, *, after: int | None = None,
                    limit: int | None = None) -> list[ModelRelease]:
        """Registered model releases by id (above ``after``, at most ``limit``)."""
        return self._records.list_page("model", after=after, limit=limit)

    def update_placement(
        self, placement_id: str, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Placement:
        """Apply ``changes`` to a placement and bump its version (``house_ad=None`` removes
        the house ad).

        Raises:
            NotFound, VersionConflict, InvalidChange: as for :meth:`update_campaign`.
        """
        return self._records.update("placement", placement_id, changes, expected_version)

    # --- change log ----------------------------------------------------------------

    def changes_since(self, seq: int, limit: int = 1000) -> list[ChangeRecord]:
        """Committed changes with ``seq`` greater than ``seq``, ascending, at most ``limit``.

        Sequence numbers may have gaps (a rolled-back write uses one up).

        Raises:
            ValueError: ``limit`` outside 1..MAX_CHANGES_PAGE.
        """
        if not 1 <= limit <= MAX_CHANGES_PAGE:
            raise ValueError(f"limit must be within 1..{MAX_CHANGES_PAGE}, got {limit}")
        with self._records.connect() as conn:
            return changes_after(conn, seq, limit)

    def last_seq(self) -> int:
        """The highest committed ``seq`` (0 for an empty log)."""
        with self._records.connect() as conn:
            return last_seq(conn)

    def status_before(self, campaign_id: int, status: CampaignStatus) -> CampaignStatus | None:
        """The status the campaign had before it last took ``status`` (its change log)."""
        with self._records.connect() as conn:
            found = status_before(conn, campaign_id, status.value)
        return CampaignStatus(found) if found is not None else None

    def snapshot(self) -> tuple[list[Advertiser], list[Campaign], list[Ad], int]:
        """Every record plus the log position it includes.

        Replaying ``changes_since(last_seq)`` afterwards brings a consumer up to date;
        ``last_seq`` is read first, so the records may already hold some later changes
        (consumers skip those by version).
        """
        with self._records.connect() as conn:
            last = last_seq(conn)
            found = {
                e: [
                    codec.from_row(e, r)
                    for r in conn.execute(select(t).order_by(t.c.id)).mappings()
                ]
                for e, t in TABLES.items() if e in _ADVERTISER_SIDE
            }
        return found["advertiser"], found["campaign"], found["ad"], last

    def subscribe(self, callback: ChangeListener) -> Callable[[], None]:
        """Call ``callback(change)`` after each commit made through *this* store object
        (:meth:`SqlRecords.subscribe`); returns a function that unsubscribes."""
        return self._records.subscribe(callback)
