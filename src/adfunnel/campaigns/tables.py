"""SQL tables of the campaign store and its change log.

Alembic migrations create them (``adfunnel/migrations``); the store never calls
``create_all``. Conventions:

- money columns are ``BigInteger`` micros;
- flight dates are ``DATE`` holding the campaign's *local* calendar dates (no time
  zone conversion ever happens on them);
- targeting and landing URLs are ``TEXT`` stored byte-for-byte as given;
- every entity row carries a ``version`` that each write bumps by one, and each write
  appends one ``change_log`` row (the whole new record as JSON) in the same transaction.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from adfunnel.db import metadata

#: Primary-key type: 64-bit on PostgreSQL, the rowid alias on SQLite.
_ID = BigInteger().with_variant(Integer, "sqlite")

advertisers = Table(
    "advertisers",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    sqlite_autoincrement=True,
)

campaigns = Table(
    "campaigns",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("advertiser_id", BigInteger, ForeignKey("advertisers.id"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("objective", String(16), nullable=False),
    Column("bid_type", String(8), nullable=False),
    Column("bid_micros", BigInteger, nullable=False),
    Column("daily_budget_micros", BigInteger, nullable=False),
    Column("lifetime_budget_micros", BigInteger, nullable=True),
    Column("time_zone", String(64), nullable=False),
    Column("flight_start", Date, nullable=False),
    Column("flight_end", Date, nullable=True),
    Column("dayparts", Text, nullable=False),  # JSON list of {weekdays, start_hour, end_hour}
    Column("status", String(16), nullable=False),
    Column("pacing_mode", String(16), nullable=False),
    Column("frequency_caps", Text, nullable=False),  # JSON list of {count, window, level}
    Column("targeting", Text, nullable=True),  # canonical expression text, as given
    Column("version", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # last, as migration 0008 added it: a conversion bills within this after its click
    Column("attribution_window_s", Integer, nullable=False, server_default="604800"),
    # migration 0017: the beacon that bills an impression; rows from before bill on render
    Column("billable_event", String(16), nullable=False, server_default="rendered"),
    # migration 0018 (#25): how it is sold; rows from before are auction lines paced by day
    Column("priority", String(16), nullable=False, server_default="auction"),
    Column("goal", Text, nullable=True),  # JSON {"metric", "share" | "total"}, or NULL
    Column("budget_period", String(16), nullable=False, server_default="day"),
    Column("flight_budget_micros", BigInteger, nullable=True),
    # migration 0021 (#27): how it bids; rows from before bid manually, as they did
    Column("bid_strategy", String(16), nullable=False, server_default="manual"),
    Column("bid_cap_micros", BigInteger, nullable=True),
    Column("target_cpa_micros", BigInteger, nullable=True),
    Column("bid_strategy_since", DateTime(timezone=True), nullable=True),
    Index("ix_campaigns_advertiser", "advertiser_id"),
    sqlite_autoincrement=True,
)

ads = Table(
    "ads",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("campaign_id", BigInteger, ForeignKey("campaigns.id"), nullable=False),
    Column("landing_url", Text, nullable=False),  # byte-for-byte as given
    Column("creative_ref", String(500), nullable=False),
    Column("format", String(64), nullable=False),
    Column("width", Integer, nullable=False),
    Column("height", Integer, nullable=False),
    Column("review_state", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    # the operator's quality, micros per impression (may be negative); 0 on older rows
    Column("quality_micros", BigInteger, nullable=False, server_default="0"),
    Column("version", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # last, as migration 0015 added it: JSON of the creative with content, or NULL
    Column("creative", Text, nullable=True),
    # migration 0022: what block lists refuse (JSON arrays of canonical values; a bundle)
    Column("categories", Text, nullable=False, server_default="[]"),
    Column("adomain", Text, nullable=False, server_default="[]"),
    Column("bundle", String(255), nullable=True),
    Index("ix_ads_campaign", "campaign_id"),
    sqlite_autoincrement=True,
)

# Operator-configured placements. ``id`` is the string ad requests name; ``row_id`` is the
# integer the change log files a placement's writes under (``change_log.entity_id``).
placements = Table(
    "placements",
    metadata,
    Column("row_id", _ID, primary_key=True, autoincrement=True),
    Column("id", String(200), nullable=False),
    Column("name", String(200), nullable=False),
    Column("reserve_cpm_micros", BigInteger, nullable=False),
    Column("country_reserves_cpm_micros", Text, nullable=False),  # JSON {"US": micros}
    Column("allowed_sizes", Text, nullable=False),  # JSON list of "WIDTHxHEIGHT"
    Column("allowed_formats", Text, nullable=False),  # JSON list of format names
    Column("house_ad", Text, nullable=True),  # JSON object, or NULL without a house ad
    Column("version", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("allowed_origins", Text, nullable=False, server_default="[]"),  # JSON list
    # migration 0021 (#27): rows from before keep the second-price auction
    Column("auction_type", String(16), nullable=False, server_default="second_price"),
    UniqueConstraint("id", name="uq_placements_id"),
    sqlite_autoincrement=True,
)

# Click model artifacts registered for serving; the active one of highest id serves.
model_releases = Table(
    "model_releases",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model_version", String(64), nullable=False),
    Column("path", String(1024), nullable=False),
    Column("dataset", String(32), nullable=False),
    Column("active", Boolean, nullable=False),
    Column("version", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # last, as migration 0011 added it
    Column("target", String(16), nullable=False, server_default="click"),
    sqlite_autoincrement=True,
)

# One row per committed write, in commit order. ``payload`` is the whole new record
# (adfunnel.campaigns.codec), so a consumer never needs to read the entity tables.
change_log = Table(
    "change_log",
    metadata,
    Column("seq", _ID, primary_key=True, autoincrement=True),
    Column("entity", String(16), nullable=False),
    Column("entity_id", BigInteger, nullable=False),
    Column("version", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("committed_at", DateTime(timezone=True), nullable=False),
    Index("ix_change_log_entity", "entity", "entity_id"),
    sqlite_autoincrement=True,
)
