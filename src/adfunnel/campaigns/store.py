"""The campaign store: advertisers, campaigns, ads and the operator's placements,
versioned, with a change log.

Every write runs in one transaction that (1) bumps the record's ``version`` by one
(new records start at 1) and (2) appends one ``change_log`` row carrying the whole
new record. Ad servers boot from :meth:`CampaignStore.snapshot` and then follow
:meth:`CampaignStore.changes_since`; in-process consumers may instead
:meth:`CampaignStore.subscribe` to be called right after each commit.

Commit order = ``seq`` order: on PostgreSQL every write transaction first takes one
transaction-scoped advisory lock, so a reader that has seen ``seq = n`` never later
sees a smaller ``seq`` commit. SQLite serialises writers by itself; each write
transaction here starts with a write statement so it takes the write lock (and
waits on the busy timeout) before reading anything. Campaign writes are rare, so the
serialisation costs nothing that matters.

The store checks domain invariants (money is non-negative integer micros, bids are
positive, a known IANA time zone, ``flight_end >= flight_start``, hours in range,
frequency caps that are either a counter or a cooldown, http(s) landing URLs, positive
ad sizes, bounded ad quality, placement reserves and ISO 3166-1 country codes) and raises
:class:`InvalidChange`; it does not parse targeting — callers pass the canonical text
(``adfunnel.targeting.dump_expr``).

Placements are keyed by the string id ad requests carry; their change-log rows are
filed under the table's integer ``row_id`` (``change_log.entity_id`` is an integer).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import pycountry
from sqlalchemy import Connection, Engine, func, insert, select, text, true, update
from sqlalchemy.exc import IntegrityError

from adfunnel.campaigns import codec
from adfunnel.campaigns.model import (
    DEFAULT_ATTRIBUTION_WINDOW_S,
    MAX_COOLDOWN_S,
    Ad,
    AdStatus,
    Advertiser,
    BidType,
    Campaign,
    CampaignStatus,
    CapLevel,
    CapWindow,
    ChangeRecord,
    Daypart,
    FrequencyCap,
    HouseAd,
    ModelRelease,
    Objective,
    PacingMode,
    Placement,
    ReviewState,
)
from adfunnel.campaigns.schedule import is_valid_zone
from adfunnel.campaigns.tables import (
    ads,
    advertisers,
    campaigns,
    change_log,
    model_releases,
    placements,
)
from adfunnel.clock import Clock, SystemClock
from adfunnel.db import connection_guard

log = logging.getLogger(__name__)

R = TypeVar("R", Advertiser, Campaign, Ad)

_TABLES = {"advertiser": advertisers, "campaign": campaigns, "ad": ads, "placement": placements,
           "model": model_releases}
#: The advertiser-side entities of :meth:`SqlCampaignStore.snapshot`.
_ADVERTISER_SIDE = ("advertiser", "campaign", "ad")
#: Fields no update may change (identity, ownership, the version itself).
_FIXED = frozenset({"id", "version", "advertiser_id", "campaign_id"})
#: Arbitrary constant key of the PostgreSQL advisory lock serialising store writes.
_PG_WRITE_LOCK = 0x0ADF0C4A
#: Largest page ``changes_since`` returns.
MAX_CHANGES_PAGE = 10_000
MAX_URL_LENGTH = 2048
#: Largest |quality| of an ad, micros per impression (1,000 units of money).
MAX_QUALITY_MICROS = 10**9
#: Largest reserve, micros per mille (the bound ad requests have too).
MAX_RESERVE_CPM_MICROS = 10**12
#: A placement id: what ad requests send as ``placement.id``, safe in a URL path.
PLACEMENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
#: An allowed size, ``WIDTHxHEIGHT`` in pixels.
SIZE = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}")
MAX_ALLOWED = 100


#: PostgreSQL NOTIFY channel carrying the seq of each committed change.
CHANGE_CHANNEL = "adfunnel_changes"


class StoreError(Exception):
    """Base of the campaign store's errors."""


class NotFound(StoreError, LookupError):
    """No ``entity`` with id ``entity_id`` (HTTP 404)."""

    def __init__(self, entity: str, entity_id: int | str) -> None:
        super().__init__(f"no {entity} with id {entity_id}")
        self.entity = entity
        self.entity_id = entity_id


class VersionConflict(StoreError):
    """The record's version is not the ``expected`` one: someone wrote first (HTTP 409)."""

    def __init__(self, entity: str, entity_id: int, expected: int, current: int) -> None:
        super().__init__(
            f"{entity} {entity_id} is at version {current}, not the expected {expected}"
        )
        self.entity = entity
        self.entity_id = entity_id
        self.expected = expected
        self.current = current


class AlreadyExists(StoreError):
    """A record with this caller-chosen id exists already (HTTP 409)."""

    def __init__(self, entity: str, entity_id: str) -> None:
        super().__init__(f"{entity} {entity_id!r} already exists")
        self.entity = entity
        self.entity_id = entity_id


class InvalidChange(StoreError, ValueError):
    """A value that breaks a domain rule; ``field`` names it (HTTP 422)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


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
        creative_ref: str,
        format: str,
        width: int,
        height: int,
        review_state: ReviewState | str = ReviewState.APPROVED,
        status: AdStatus | str = AdStatus.ACTIVE,
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
    ) -> Campaign:
        """Create a campaign (version 1). Money in micros; dates local to ``time_zone``.

        ``targeting`` is canonical expression text (already validated) or ``None``.

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
        creative_ref: str,
        format: str,
        width: int,
        height: int,
        review_state: ReviewState | str = ReviewState.APPROVED,
        status: AdStatus | str = AdStatus.ACTIVE,
        quality_micros: int = 0,
    ) -> Ad:
        """Create an ad of a campaign (version 1); ``landing_url`` is kept byte-for-byte.

        ``quality_micros`` is the operator's quality, micros per impression (may be < 0).

        Raises:
            NotFound: no such campaign.
            InvalidChange: a non-http(s) URL, a size <= 0, an unknown state, a quality
                beyond ±MAX_QUALITY_MICROS.
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
        if not _storable_key(entity, entity_id):
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
        values = _coerce(entity, values)
        probe = codec.ENTITY_TYPES[entity](**{"id": 0, **values, "version": 1})
        _check(probe)
        table = _TABLES[entity]
        now = self._clock.now()
        with self._transaction() as conn:
            self._lock_writes(conn)
            if parent is not None:  # records are never deleted, so this stays true
                if not _storable_id(parent[1]):
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
        if not _storable_key(entity, entity_id):
            raise NotFound(entity, entity_id)
        allowed = set(codec.field_names(entity)) - _FIXED
        for name in changes:
            if name not in allowed:
                problem = "cannot be changed" if name in _FIXED else "unknown field"
                raise InvalidChange(name, problem)
        typed = _coerce(entity, dict(changes))
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
            _check(record)
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


def _coerce(entity: str, values: dict[str, Any]) -> dict[str, Any]:
    """Enum strings and plain daypart/cap objects to their types, as InvalidChange."""
    for name, value in list(values.items()):
        try:
            codec.coerce_fields(entity, {name: value})
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidChange(name, f"invalid value {value!r}") from exc
    return codec.coerce_fields(entity, values)


def _check(record: Advertiser | Campaign | Ad | Placement) -> None:
    """Domain rules every stored record obeys.

    Raises:
        InvalidChange: naming the first offending field.
    """
    if isinstance(record, Advertiser):
        _text(record.name, "name", 200)
    elif isinstance(record, Campaign):
        _check_campaign(record)
    elif isinstance(record, Placement):
        _check_placement(record)
    elif isinstance(record, ModelRelease):
        _text(record.path, "path", 1024)
        _text(record.model_version, "model_version", 64)
        _text(record.dataset, "dataset", 32)
    else:
        _check_ad(record)


def _check_campaign(c: Campaign) -> None:
    _text(c.name, "name", 200)
    _money(c.bid_micros, "bid_micros", positive=True)
    _money(c.daily_budget_micros, "daily_budget_micros")
    if c.lifetime_budget_micros is not None:
        _money(c.lifetime_budget_micros, "lifetime_budget_micros")
    if not is_valid_zone(c.time_zone):
        raise InvalidChange("time_zone", f"unknown time zone {c.time_zone!r}")
    if not isinstance(c.flight_start, date) or isinstance(c.flight_start, datetime):
        raise InvalidChange("flight_start", "must be a date")
    if c.flight_end is not None:
        if not isinstance(c.flight_end, date) or isinstance(c.flight_end, datetime):
            raise InvalidChange("flight_end", "must be a date")
        if c.flight_end < c.flight_start:
            raise InvalidChange("flight_end", "must be on or after flight_start")
    for i, p in enumerate(c.dayparts):
        where = f"dayparts[{i}]"
        if not p.weekdays or any(not _int(d) or not 0 <= d <= 6 for d in p.weekdays):
            raise InvalidChange(f"{where}.weekdays", "must be a non-empty list of 0..6")
        if not _int(p.start_hour) or not 0 <= p.start_hour <= 23:
            raise InvalidChange(f"{where}.start_hour", "must be an integer 0..23")
        if not _int(p.end_hour) or not p.start_hour < p.end_hour <= 24:
            raise InvalidChange(f"{where}.end_hour", "must be an integer > start_hour and <= 24")
    for i, cap in enumerate(c.frequency_caps):
        _check_cap(cap, f"frequency_caps[{i}]")
    if c.targeting is not None and not isinstance(c.targeting, str):
        raise InvalidChange("targeting", "must be the canonical expression text")


def _check_cap(cap: FrequencyCap, where: str) -> None:
    """A counter cap (``count`` > 0 per ``window``) or a cooldown cap (``cooldown_s`` in
    1 s .. 400 days), never both nor neither; raises :class:`InvalidChange`."""
    if cap.level not in _CAP_LEVELS:
        raise InvalidChange(f"{where}.level", f"must be one of {', '.join(_CAP_LEVELS)}")
    if cap.cooldown_s is not None:
        for name in ("count", "window"):
            if getattr(cap, name) is not None:
                raise InvalidChange(
                    f"{where}.{name}", "must be absent from a cap with cooldown_s "
                    "(a cap is either count and window, or cooldown_s)"
                )
        if not _int(cap.cooldown_s) or not 1 <= cap.cooldown_s <= MAX_COOLDOWN_S:
            raise InvalidChange(
                f"{where}.cooldown_s", f"must be an integer of seconds, 1..{MAX_COOLDOWN_S}"
            )
        return
    if cap.count is None:
        raise InvalidChange(f"{where}.count", "is required (or give cooldown_s instead)")
    if not _int(cap.count) or cap.count <= 0:
        raise InvalidChange(f"{where}.count", "must be an integer > 0")
    if cap.window is None:
        raise InvalidChange(f"{where}.window", "is required with count")
    if cap.window not in _CAP_WINDOWS:
        raise InvalidChange(f"{where}.window", f"must be one of {', '.join(_CAP_WINDOWS)}")


_CAP_LEVELS = tuple(CapLevel)
_CAP_WINDOWS = tuple(CapWindow)


def _check_ad(ad: Ad) -> None:
    problem = landing_url_problem(ad.landing_url)
    if problem:
        raise InvalidChange("landing_url", problem)
    _check_creative(ad, "")
    if not _int(ad.quality_micros) or abs(ad.quality_micros) > MAX_QUALITY_MICROS:
        raise InvalidChange(
            "quality_micros", f"must be an integer of micros within ±{MAX_QUALITY_MICROS}"
        )


def _check_creative(ad: Ad | HouseAd, where: str) -> None:
    _text(ad.creative_ref, f"{where}creative_ref", 500)
    _text(ad.format, f"{where}format", 64)
    for name in ("width", "height"):
        value = getattr(ad, name)
        if not _int(value) or value <= 0:
            raise InvalidChange(f"{where}{name}", "must be an integer > 0")


def _check_placement(p: Placement) -> None:
    if not isinstance(p.id, str) or not PLACEMENT_ID.fullmatch(p.id):
        raise InvalidChange("id", "must be 1-200 of [A-Za-z0-9._:-], starting alphanumeric")
    _text(p.name, "name", 200)
    _reserve(p.reserve_cpm_micros, "reserve_cpm_micros")
    reserves = p.country_reserves_cpm_micros
    if not isinstance(reserves, dict) or len(reserves) > 300:
        raise InvalidChange("country_reserves_cpm_micros", "must map at most 300 countries")
    for code, micros in reserves.items():
        where = f"country_reserves_cpm_micros.{code}"
        if not _iso_country(code):
            raise InvalidChange(where, "not an ISO 3166-1 alpha-2 country code (upper case)")
        _reserve(micros, where)
    _check_list(p.allowed_sizes, "allowed_sizes", lambda v: isinstance(v, str)
                and SIZE.fullmatch(v) is not None, "WIDTHxHEIGHT in pixels, e.g. 300x250")
    _check_list(p.allowed_formats, "allowed_formats", lambda v: isinstance(v, str)
                and 0 < len(v) <= 64 and v.strip() == v, "a format name of 1-64 characters")
    if p.house_ad is not None:
        _check_house_ad(p, p.house_ad)


def _check_house_ad(p: Placement, house: HouseAd) -> None:
    if not isinstance(house, HouseAd):
        raise InvalidChange("house_ad", "must be an object")
    problem = landing_url_problem(house.landing_url)
    if problem:
        raise InvalidChange("house_ad.landing_url", problem)
    _check_creative(house, "house_ad.")
    if not p.size_allowed(house.width, house.height):
        raise InvalidChange("house_ad", f"size {house.width}x{house.height} is not allowed here")
    if not p.format_allowed(house.format):
        raise InvalidChange("house_ad.format", f"{house.format!r} is not allowed here")


def _check_list(
    values: object, field: str, ok: Callable[[object], bool], expected: str
) -> None:
    if not isinstance(values, tuple) or len(values) > MAX_ALLOWED:
        raise InvalidChange(field, f"must be a list of at most {MAX_ALLOWED}")
    for i, v in enumerate(values):
        if not ok(v):
            raise InvalidChange(f"{field}[{i}]", f"must be {expected}")
    if len(set(values)) != len(values):
        raise InvalidChange(field, "must not repeat a value")


def _iso_country(code: object) -> bool:
    return (isinstance(code, str) and len(code) == 2 and code.isascii() and code.isupper()
            and pycountry.countries.get(alpha_2=code) is not None)


def _reserve(value: object, field: str) -> None:
    _money(value, field)
    if value > MAX_RESERVE_CPM_MICROS:  # type: ignore[operator]
        raise InvalidChange(field, f"must be <= {MAX_RESERVE_CPM_MICROS} micros per mille")


def landing_url_problem(url: object) -> str | None:
    """Why ``url`` is not an acceptable landing URL, or ``None`` when it is.

    Accepted: an absolute ``http``/``https`` URL with a host, at most 2048 characters,
    without whitespace or control characters. The string itself is never rewritten.
    """
    if not isinstance(url, str):
        return "must be a string"
    if not url:
        return "must not be empty"
    if len(url) > MAX_URL_LENGTH:
        return f"longer than {MAX_URL_LENGTH} characters"
    if any(ch <= " " or ch == "\x7f" for ch in url):
        return "must not contain whitespace or control characters"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "scheme must be http or https"
    if not parts.netloc or not parts.hostname:
        return "must include a host"
    return None


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _money(value: object, field: str, *, positive: bool = False) -> None:
    if not _int(value):
        raise InvalidChange(field, "must be an integer number of micros")
    if positive and value <= 0:  # type: ignore[operator]
        raise InvalidChange(field, "must be > 0")
    if value < 0:  # type: ignore[operator]
        raise InvalidChange(field, "must be >= 0")
    if value > 2**63 - 1:  # type: ignore[operator]
        raise InvalidChange(field, "too large")


def _storable_id(entity_id: object) -> bool:
    """Ids are positive 64-bit integers; anything else names no record."""
    return isinstance(entity_id, int) and 1 <= entity_id <= _MAX_ID


def _storable_key(entity: str, key: object) -> bool:
    """Placements are keyed by their id string, every other record by its integer id."""
    if entity == "placement":
        return isinstance(key, str) and PLACEMENT_ID.fullmatch(key) is not None
    return _storable_id(key)


_MAX_ID = 2**63 - 1


def _text(value: object, field: str, max_len: int) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidChange(field, "must be a non-empty string")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidChange(field, "must not contain control characters")
    if len(value) > max_len:
        raise InvalidChange(field, f"longer than {max_len} characters")
