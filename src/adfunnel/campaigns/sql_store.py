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

Placements are keyed by the string id ad requests carry; their change-log rows are
filed under the table's integer ``row_id`` (``change_log.entity_id`` is an integer).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, text, true, update
from sqlalchemy.exc import IntegrityError

from adfunnel.campaigns import codec
from adfunnel.campaigns.creative import Creative
from adfunnel.campaigns.errors import AlreadyExists, InvalidChange, NotFound, VersionConflict
from adfunnel.campaigns.model import (
    DEFAULT_ATTRIBUTION_WINDOW_S,
    Ad,
    AdStatus,
    Advertiser,
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
from adfunnel.campaigns.store import MAX_CHANGES_PAGE, ChangeListener
from adfunnel.campaigns.tables import (
    ads,
    advertisers,
    campaigns,
    change_log,
    model_releases,
    placements,
)
from adfunnel.campaigns.validate import check_record, coerce_values, storable_id, storable_key
from adfunnel.clock import Clock, SystemClock
from adfunnel.db import connection_guard

log = logging.getLogger(__name__)

_TABLES = {"advertiser": advertisers, "campaign": campaigns, "ad": ads, "placement": placements,
           "model": model_releases}
#: The advertiser-side entities of :meth:`SqlCampaignStore.snapshot`.
_ADVERTISER_SIDE = ("advertiser", "campaign", "ad")
#: Fields no update may change (identity, ownership, the version itself).
_FIXED = frozenset({"id", "version", "advertiser_id", "campaign_id"})
#: Arbitrary constant key of the PostgreSQL advisory lock serialising store writes.
_PG_WRITE_LOCK = 0x0ADF0C4A
#: PostgreSQL NOTIFY channel carrying the seq of each committed change.
CHANGE_CHANNEL = "adfunnel_changes"


class SqlCampaignStore:
    """:class:`CampaignStore` over SQLAlchemy Core (SQLite or PostgreSQL).

    The schema must exist (``adfunnel.campaigns.migrate.upgrade``). ``clock`` stamps
    ``committed_at`` and ``updated_at`` (domain time, so a replay stamps replay time).
    Thread-safe: each call uses its own connection from the engine's pool.
    """

    def __init__(self, engine: Engine, clock: Clock | None = None) -> None:
        self._engine = engine
        self._clock = clock or SystemClock()
        self._pg = engine.dialect.name == "postgresql"
        self._listeners: list[ChangeListener] = []
        self._listeners_lock = threading.Lock()
        self._guard = connection_guard(engine)

    @property
    def engine(self) -> Engine:
        return self._engine

    @contextmanager
    def _connect(self) -> Iterator[Connection]:
        with self._guard, self._engine.connect() as conn:
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self._guard, self._engine.begin() as conn:
            yield conn

    # --- advertisers ---------------------------------------------------------------

    def create_advertiser(self, name: str) -> Advertiser:
        """Create an advertiser (version 1).

        Raises:
            InvalidChange: blank name.
        """
        return self._create("advertiser", {"name": name})

    def get_advertiser(self, advertiser_id: int) -> Advertiser:
        """Raises: NotFound."""
        return self._get("advertiser", advertiser_id)

    def list_advertisers(self, *, after: int | None = None,
                         limit: int | None = None) -> list[Advertiser]:
        """Advertisers by id (ids above ``after``, at most ``limit``: a keyset page)."""
        return self._list("advertiser", after=after, limit=limit)

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
    ) -> Campaign:
        """Create a campaign (version 1). Money in micros; dates local to ``time_zone``.

        ``targeting`` is canonical expression text (already validated) or ``None``.
        ``priority``, ``goal`` (a :class:`Goal` or its plain object), ``budget_period``
        and ``flight_budget_micros`` say how it is sold (:mod:`adfunnel.campaigns.sales`).

        Raises:
            NotFound: no such advertiser.
            InvalidChange: a value breaking a domain rule (see module docstring).
        """
        values = {k: v for k, v in locals().items() if k != "self"}
        return self._create("campaign", values, parent=("advertiser", advertiser_id))

    def get_campaign(self, campaign_id: int) -> Campaign:
        """Raises: NotFound."""
        return self._get("campaign", campaign_id)

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
        return self._list("campaign", where, after=after, limit=limit)

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
        return self._update("campaign", campaign_id, changes, expected_version)

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
    ) -> Ad:
        """Create an ad of a campaign (version 1); ``landing_url`` is kept byte-for-byte.

        ``quality_micros`` is the operator's quality, micros per impression (may be < 0).
        ``creative`` is what it shows (``adfunnel.campaigns.creative``); with one,
        ``creative_ref`` may be left empty.

        Raises:
            NotFound: no such campaign.
            InvalidChange: a non-http(s) URL, a size <= 0, an unknown state, a quality
                beyond ±MAX_QUALITY_MICROS, an invalid creative (``creative.<field>``).
        """
        values = {k: v for k, v in locals().items() if k != "self"}
        return self._create("ad", values, parent=("campaign", campaign_id))

    def get_ad(self, ad_id: int) -> Ad:
        """Raises: NotFound."""
        return self._get("ad", ad_id)

    def list_ads(self, campaign_id: int, *, after: int | None = None,
                 limit: int | None = None, include_archived: bool = True) -> list[Ad]:
        """The ads of one campaign, by id (empty for an unknown campaign), archived ones
        unless ``include_archived`` is false; ``after`` and ``limit`` make a keyset page."""
        where = ads.c.campaign_id == campaign_id
        if not include_archived:
            where = where & (ads.c.status != AdStatus.ARCHIVED.value)
        return self._list("ad", where, after=after, limit=limit)

    def list_ads_in_review(self, state: ReviewState | str, *, after: int | None = None,
                           limit: int | None = None) -> list[Ad]:
        """Every ad whose review state is ``state``, by id (the review queue), archived
        ones left out; ``after`` and ``limit`` make a keyset page."""
        where = (ads.c.review_state == ReviewState(state).value) & (
            ads.c.status != AdStatus.ARCHIVED.value)
        return self._list("ad", where, after=after, limit=limit)

    def update_ad(
        self, ad_id: int, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Ad:
        """Apply ``changes`` to an ad and bump its version.

        Raises:
            NotFound, VersionConflict, InvalidChange: as for :meth:`update_campaign`.
        """
        return self._update("ad", ad_id, changes, expected_version)

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
        return self._create("placement", values)

    def get_placement(self, placement_id: str) -> Placement:
        """Raises: NotFound."""
        return self._get("placement", placement_id)

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
        with self._connect() as conn:
            return [codec.from_row("placement", r) for r in conn.execute(stmt).mappings()]

    def register_model(self, model_version: str, path: str, dataset: str,
                       target: str = "click") -> ModelRelease:
        """Register a model artifact as the active one of its ``target`` (``click`` or
        ``conversion``); the releases of that target active before it become inactive
        (each change is in the change log, so ad servers follow).

        Raises:
            InvalidChange: an empty or too long path, version or dataset, or an unknown
                target.
        """
        if target not in ("click", "conversion"):
            raise InvalidChange("target", "must be click or conversion")
        release = self._create("model", {"model_version": model_version, "path": path,
                                         "dataset": dataset, "active": True,
                                         "target": target})
        for old in self._list("model", model_releases.c.active.is_(True)
                              & (model_releases.c.target == target)):
            if old.id != release.id:
                self._update("model", old.id, {"active": False}, None)
        return release

    def list_models(self, *, after: int | None = None,
                    limit: int | None = None) -> list[ModelRelease]:
        """Registered model releases by id (above ``after``, at most ``limit``)."""
        return self._list("model", after=after, limit=limit)

    def update_placement(
        self, placement_id: str, changes: Mapping[str, Any], expected_version: int | None = None
    ) -> Placement:
        """Apply ``changes`` to a placement and bump its version (``house_ad=None`` removes
        the house ad).

        Raises:
            NotFound, VersionConflict, InvalidChange: as for :meth:`update_campaign`.
        """
        return self._update("placement", placement_id, changes, expected_version)

    # --- change log ----------------------------------------------------------------

    def changes_since(self, seq: int, limit: int = 1000) -> list[ChangeRecord]:
        """Committed changes with ``seq`` greater than ``seq``, ascending, at most ``limit``.

        Sequence numbers may have gaps (a rolled-back write uses one up).

        Raises:
            ValueError: ``limit`` outside 1..MAX_CHANGES_PAGE.
        """
        if not 1 <= limit <= MAX_CHANGES_PAGE:
            raise ValueError(f"limit must be within 1..{MAX_CHANGES_PAGE}, got {limit}")
        stmt = (
            select(change_log).where(change_log.c.seq > seq).order_by(change_log.c.seq).limit(limit)
        )
        with self._connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return [_change_record(r) for r in rows]

    def last_seq(self) -> int:
        """The highest committed ``seq`` (0 for an empty log)."""
        with self._connect() as conn:
            return _last_seq(conn)

    def snapshot(self) -> tuple[list[Advertiser], list[Campaign], list[Ad], int]:
        """Every record plus the log position it includes.

        Replaying ``changes_since(last_seq)`` afterwards brings a consumer up to date;
        ``last_seq`` is read first, so the records may already hold some later changes
        (consumers skip those by version).
        """
        with self._connect() as conn:
            last = _last_seq(conn)
            found = {
                e: [
                    codec.from_row(e, r)
                    for r in conn.execute(select(t).order_by(t.c.id)).mappings()
                ]
                for e, t in _TABLES.items() if e in _ADVERTISER_SIDE
            }
        return found["advertiser"], found["campaign"], found["ad"], last

    def subscribe(self, callback: ChangeListener) -> Callable[[], None]:
        """Call ``callback(change)`` after each commit made through *this* store object.

        Called on the writer's thread, in commit order per thread; a raising listener
        is logged and does not fail the write. Returns a function that unsubscribes.
        """
        with self._listeners_lock:
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self._listeners_lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return unsubscribe

    # --- internals -----------------------------------------------------------------

    def _get(self, entity: str, entity_id: int | str) -> Any:
        if not storable_key(entity, entity_id):
            raise NotFound(entity, entity_id)
        table = _TABLES[entity]
        with self._connect() as conn:
            row = conn.execute(select(table).where(table.c.id == entity_id)).mappings().first()
        if row is None:
            raise NotFound(entity, entity_id)
        return codec.from_row(entity, row)

    def _list(self, entity: str, where: Any = None, *, after: int | str | None = None,
              limit: int | None = None) -> list[Any]:
        table = _TABLES[entity]
        stmt = select(table).order_by(table.c.id)
        if where is not None:
            stmt = stmt.where(where)
        if after is not None:
            stmt = stmt.where(table.c.id > after)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._connect() as conn:
            return [codec.from_row(entity, r) for r in conn.execute(stmt).mappings()]

    def _create(
        self, entity: str, values: dict[str, Any], parent: tuple[str, int] | None = None
    ) -> Any:
        values = coerce_values(entity, values)
        probe = codec.ENTITY_TYPES[entity](**{"id": 0, **values, "version": 1})
        check_record(probe)
        table = _TABLES[entity]
        now = self._clock.now()
        with self._transaction() as conn:
            self._lock_writes(conn)
            if parent is not None:  # records are never deleted, so this stays true
                if not storable_id(parent[1]):
                    raise NotFound(*parent)
                ptable = _TABLES[parent[0]]
                found = conn.execute(select(ptable.c.id).where(ptable.c.id == parent[1]))
                if found.first() is None:
                    raise NotFound(*parent)
            row = {**codec.to_row(entity, values), "version": 1, "updated_at": now}
            try:
                new_id = int(conn.execute(insert(table).values(row)).inserted_primary_key[0])
            except IntegrityError as exc:  # only placements choose their id
                if entity != "placement":
                    raise
                raise AlreadyExists(entity, probe.id) from exc
            record = probe if entity == "placement" else dataclasses.replace(probe, id=new_id)
            change = self._append(conn, record, now, new_id)
        self._notify(change)
        return record

    def _update(
        self,
        entity: str,
        entity_id: int,
        changes: Mapping[str, Any],
        expected_version: int | None,
    ) -> Any:
        if not storable_key(entity, entity_id):
            raise NotFound(entity, entity_id)
        allowed = set(codec.field_names(entity)) - _FIXED
        for name in changes:
            if name not in allowed:
                problem = "cannot be changed" if name in _FIXED else "unknown field"
                raise InvalidChange(name, problem)
        typed = coerce_values(entity, dict(changes))
        table = _TABLES[entity]
        now = self._clock.now()
        with self._transaction() as conn:
            self._lock_writes(conn)
            # Bump first: the write locks the row (and SQLite's database) before the read.
            bumped = conn.execute(
                update(table)
                .where(table.c.id == entity_id)
                .values(version=table.c.version + 1, updated_at=now)
            )
            if bumped.rowcount == 0:
                raise NotFound(entity, entity_id)
            row = conn.execute(select(table).where(table.c.id == entity_id)).mappings().one()
            current = codec.from_row(entity, row)
            if expected_version is not None and current.version - 1 != expected_version:
                raise VersionConflict(entity, entity_id, expected_version, current.version - 1)
            try:
                record = dataclasses.replace(current, **typed)
            except TypeError as exc:  # pragma: no cover - names were checked above
                raise InvalidChange("changes", str(exc)) from exc
            check_record(record)
            if typed:
                conn.execute(
                    update(table).where(table.c.id == entity_id).values(codec.to_row(entity, typed))
                )
            change = self._append(conn, record, now, row.get("row_id", record.id))
        self._notify(change)
        return record

    def _lock_writes(self, conn: Connection) -> None:
        if self._pg:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_WRITE_LOCK})

    def _append(
        self, conn: Connection, record: Any, now: datetime, entity_id: int
    ) -> ChangeRecord:
        entity = codec.entity_of(record)
        seq = conn.execute(
            insert(change_log).values(
                entity=entity,
                entity_id=entity_id,
                version=record.version,
                payload=codec.dumps_payload(record),
                committed_at=now,
            )
        ).inserted_primary_key[0]
        if self._pg:  # delivered to listeners at commit; polling is the safety net
            conn.execute(text("SELECT pg_notify(:channel, :seq)"),
                         {"channel": CHANGE_CHANNEL, "seq": str(seq)})
        return ChangeRecord(int(seq), entity, entity_id, record.version, record, now)

    def _notify(self, change: ChangeRecord) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(change)
            except Exception:  # a broken consumer must not fail a committed write
                log.exception("change listener %r failed on seq %d", listener, change.seq)


def _last_seq(conn: Connection) -> int:
    return int(conn.execute(select(func.coalesce(func.max(change_log.c.seq), 0))).scalar_one())


def _change_record(row: Mapping[str, Any]) -> ChangeRecord:
    at = row["committed_at"]
    if at.tzinfo is None:  # SQLite drops the offset; the store always writes UTC
        at = at.replace(tzinfo=UTC)
    record = codec.from_payload(row["entity"], row["payload"])
    return ChangeRecord(
        int(row["seq"]), row["entity"], int(row["entity_id"]), int(row["version"]), record, at
    )

