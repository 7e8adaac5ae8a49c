"""The settings model: every key of :class:`Settings` with its default, range and checks.

Units are in the names (``_s`` seconds, ``_ms`` milliseconds, ``_micros`` money). Each
key is read from the environment variable ``ADFUNNEL_<KEY>``; loading, and reporting
every problem at once, is :func:`adfunnel.settings.load_settings`.
"""

from __future__ import annotations

import secrets
from contextvars import ContextVar
from typing import Literal

import pycountry
from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from adfunnel.secret_file import load_or_create, secret_path
from adfunnel.settings.ivt import Tier2Config, held_in, parse_rate_limit
from adfunnel.settings.openrtb import OpenRtbSettings

#: Default largest bid, micros: 1,000 currency units (a CPM per thousand impressions,
#: a CPC per click, a CPA per conversion).
DEFAULT_MAX_BID_MICROS = 1_000 * 1_000_000
#: The currency of every amount (ISO 4217), unless the setting ``currency`` names another.
DEFAULT_CURRENCY = "USD"
#: Default largest daily or lifetime budget of a campaign, micros: 10,000,000 units.
DEFAULT_MAX_BUDGET_MICROS = 10_000_000 * 1_000_000


#: Bytes of a creative upload's multipart body beside the file itself (boundaries, part
#: headers, the ``advertiser_id`` field): the route's body limit is the file's plus this.
UPLOAD_FORM_OVERHEAD = 16_384


#: Keys the process being configured needs even where their own rule would not (the
#: ``required`` of :func:`load_settings`), read by the validators.
_REQUIRED: ContextVar[frozenset[str]] = ContextVar("required_settings", default=frozenset())


class Settings(OpenRtbSettings, BaseSettings):
    """Process settings. Units are in the names (``_s`` seconds, ``_ms`` milliseconds);
    the ``openrtb_*`` keys are :class:`~adfunnel.settings.openrtb.OpenRtbSettings`'."""

    model_config = SettingsConfigDict(env_prefix="ADFUNNEL_", extra="forbid")

    database_url: str = "sqlite:///adfunnel.sqlite3"
    redis_url: str | None = None
    #: frequency caps without ``redis_url`` on one of several serving processes
    #: (adfunnel.frequency.scope): "strict" does not serve capped campaigns
    #: (``cap_unavailable``); "per-process" counts in each process, so a user may see a
    #: capped ad up to N x cap times over N processes
    caps: Literal["strict", "per-process"] = "strict"
    #: ad-server processes sharing the port (``serve --workers``)
    workers: int = Field(default=1, ge=1, le=1_024)
    budget_service_url: str | None = None
    #: without ``budget_service_url``: run the budget & pacing service in this process
    #: ("service"), or hold committed spend here without pacing ("local")
    budget: Literal["service", "local"] = "service"
    #: the currency (ISO 4217 code) of every amount: bids, budgets, charges, reports (one
    #: per server; every report and the dashboard name it)
    currency: str = Field(default=DEFAULT_CURRENCY, pattern=r"^[A-Z]{3}$")
    #: HMAC key of tracking tokens and click ids; unset: kept in the SQLite database's
    #: directory (:mod:`adfunnel.secret_file`), else random for this process only
    token_secret: str = Field(default_factory=lambda: secrets.token_hex(32), min_length=32,
                              repr=False)
    #: the secret before the last rotation: what it signed still verifies (new tokens
    #: use ``token_secret``); drop it once the longest-lived click id has expired
    token_secret_previous: str | None = Field(default=None, min_length=32, repr=False)
    #: the bootstrap admin API key (``Authorization: Bearer <key>``); None: ``serve``
    #: generates one and prints it once at start
    admin_key: str | None = Field(default=None, min_length=32, repr=False)
    #: requests a second one advertiser or reviewer key may send on average (429 with
    #: Retry-After past it; admin keys and the open routes are not limited)
    #: the deployment's shared internal secret (``Authorization: Bearer``) between the
    #: budget service and its clients (ad servers, the dashboard); required, >= 32
    #: characters, wherever a budget service is used (``budget_service_url``) or served
    #: (``adfunnel budget-service``)
    internal_token: str | None = Field(default=None, min_length=32, repr=False,
                                       validate_default=True)
    api_rate_per_s: float = Field(default=50.0, gt=0)
    #: requests such a key may send at once before the rate applies
    api_burst: int = Field(default=100, ge=1)
    token_ttl_s: int = Field(default=3600, gt=0, le=86_400)
    #: largest bid a campaign may have, micros (422 naming ``bid_micros`` above it, on
    #: create and edit)
    max_bid_micros: int = Field(default=DEFAULT_MAX_BID_MICROS, gt=0, le=2**53)
    #: largest daily or lifetime budget a campaign may have, micros (422 above it)
    max_budget_micros: int = Field(default=DEFAULT_MAX_BUDGET_MICROS, gt=0, le=2**53)
    clock: Literal["system", "manual"] = "system"
    default_deadline_ms: int = Field(default=100, gt=0, le=10_000)
    max_body_bytes: int = Field(default=65_536, gt=0)
    pctr_prior: float = Field(default=0.001, gt=0, lt=1)
    pctr_prior_strength: float = Field(default=1_000.0, gt=0)
    pcvr_prior: float = Field(default=0.01, gt=0, le=1)
    retrieval_limit: int = Field(default=10_000, gt=0)
    #: candidates per slot run the columnar decider keeps for the auction (pre-rank)
    prerank_keep: int = Field(default=200, gt=0)
    #: most ads of the request's slot shapes the columnar decider retrieves
    candidate_limit: int = Field(default=2_500, gt=0)
    #: ads it retrieves first; up to ``candidate_limit`` only when fewer than
    #: ``prerank_keep`` of them can serve (status, shape, flight, daypart)
    first_candidates: int = Field(default=800, gt=0)
    #: a click model artifact (``adfunnel model train --out DIR``) that scores the
    #: pre-rank's survivors; None: the smoothed per-ad rate is the pCTR
    model_dir: str | None = None
    #: a conversion model artifact (``adfunnel model train --target conversion``): the
    #: pCVR of CPA candidates while a click model decides; None: ``pcvr_prior``
    cvr_model_dir: str | None = None
    #: the predict stage's share of a request's deadline, milliseconds: past it the
    #: decision keeps the pre-rank scores (flagged ``fallback``)
    model_budget_ms: float = Field(default=2.0, gt=0, le=1_000)
    #: share of decisions in the exploration slice while a model decides: each slot
    #: shows a uniform pick among the eligible ads above the reserve, and every
    #: decision logs the propensity of what it showed (the served log)
    exploration_share: float = Field(default=0.01, ge=0, lt=1)
    #: share of a model's decisions that also score every candidate, to measure the
    #: pre-rank's recall (``/v1/serving/stats``: a measurement's cost, not a decision's)
    recall_sample: float = Field(default=0.01, ge=0, le=1)
    index: Literal["conjunction", "scan"] = "conjunction"
    change_poll_s: float = Field(default=0.25, gt=0, le=5)
    traffic_flush_s: float = Field(default=10.0, gt=0)
    #: the availability forecast's request sample (kept by default): most ad requests
    #: kept per UTC hour and ad-server process (each stands for seen / kept requests),
    #: days of history kept (older hours are pruned), and seconds of the server's clock
    #: between moves of the closed hours into the database
    forecast_sample_per_hour: int = Field(default=250, ge=1, le=100_000)
    forecast_history_days: int = Field(default=28, ge=1, le=366)
    forecast_flush_s: float = Field(default=60.0, gt=0)
    #: seed of the decider's random draws (pacing coins, tie-breaks); None = from the
    #: operating system. A replay sets it so its report depends only on its seed.
    seed: int | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65_535)
    #: where committed decisions are logged for the click model (raw hour files, then
    #: hourly Parquet); None: no served log
    served_log_dir: str | None = None
    #: key of the user-key hash in the served log; None: derived from ``token_secret``
    #: (stable across restarts when the token secret is)
    served_log_salt: str | None = Field(default=None, min_length=16, repr=False)
    #: seconds between compactions of the served log's closed hours into Parquet
    served_compact_s: float = Field(default=300.0, gt=0)
    #: click-model recalibration: s between runs, s of decisions read (learn/recalibration_job)
    recalibration_s: float = Field(default=3600.0, gt=0)
    recalibration_window_s: float = Field(default=86_400.0, gt=600)
    #: first-price shading's fit in the server (learn/shading_job): s between runs (None:
    #: not scheduled, ``adfunnel model shading-fit`` only), days of the served log read,
    #: least prices per segment, and where releases are written (one folder a version)
    shading_fit_s: float | None = Field(default=None, gt=0)
    shading_fit_days: float = Field(default=7.0, gt=0, le=366)
    shading_min_observations: int = Field(default=200, ge=1)
    shading_release_dir: str | None = None
    #: seconds of the server's clock between refreshes of the report rollups (the hours
    #: the aggregator touched); a replay on a manual clock that moves every request
    #: sets it longer, as each refresh is a database transaction
    rollup_refresh_s: float = Field(default=5.0, gt=0, le=86_400)
    #: tier-1 invalid-traffic rules on the beacons (crawler user agents and addresses,
    #: datacenter addresses, clicks faster than a person): such beacons are never billed
    ivt: bool = True
    #: least milliseconds between a serve and its click before it counts as a person's
    ivt_min_click_delay_ms: int = Field(default=500, ge=0)
    #: IP lists (names of ``adfunnel.settings.ivt.IP_SOURCES``) the filter does NOT load:
    #: for measuring its recall on lists it has not seen (the replay); never in production
    ivt_held_out_lists: list[str] = []
    #: tier-2 invalid-traffic scoring in the aggregator (click and impression rates, CTR
    #: outliers, click timing over sliding windows); what it finds is reversed
    ivt_tier2: bool = True
    #: tier-2 thresholds (``adfunnel.settings.ivt``, whose constants are the defaults);
    #: the rate rules count per viewer: (client address, user agent, user key).
    #: Click limits as "COUNT/SECONDS": at most COUNT clicks in any SECONDS
    ivt_click_rate_limits: list[str] = Field(
        default=["1/60", "3/600", "10/3600", "25/86400"], min_length=1)
    #: most impressions per viewer in ``ivt_impression_rate_window_s`` seconds
    ivt_impression_rate_limit: int = Field(default=60, ge=1)
    ivt_impression_rate_window_s: int = Field(default=60, ge=1, le=86_400)
    #: an address's clicks on a placement are reversed while its CTR (percent) over
    #: ``ivt_ctr_window_s`` is above ``ivt_ctr_max_percent`` on at least
    #: ``ivt_ctr_min_impressions`` impressions (buckets of ``ivt_ctr_bucket_s``)
    ivt_ctr_window_s: int = Field(default=3_600, ge=1, le=86_400)
    ivt_ctr_bucket_s: int = Field(default=300, ge=1)
    ivt_ctr_min_impressions: int = Field(default=20, ge=1)
    ivt_ctr_max_percent: int = Field(default=25, ge=0, le=100)
    #: a viewer's last ``ivt_regular_clicks`` click delays within
    #: ``ivt_regular_spread_ms`` of each other are a script's timer
    ivt_regular_clicks: int = Field(default=5, ge=2, le=100)
    ivt_regular_spread_ms: int = Field(default=20, ge=0)
    #: seconds a billed event stays pending (tier 2 may reverse it) before it is final
    ivt_hold_s: float = Field(default=600.0, gt=0, le=86_400)
    #: proxies (CIDRs) whose X-Forwarded-For names the client of a beacon or an ad request
    trusted_proxies: list[str] = []
    #: the server's public origin (``https://ads.example.com``, maybe with a path prefix):
    #: when set, a select answer's ``impression_url`` and ``click_url`` and an uploaded
    #: image's URL (stored as ``/creatives/files/<name>``) are absolute URLs under it (a
    #: page's tag fires them from the page's own origin); unset: relative
    public_base_url: str | None = None
    #: the demo (``/demo``: an article page with three placements, and its demo advertiser,
    #: placements and campaigns seeded at start): None turns it on for the embedded
    #: default store only (``database_url`` left at its default), True on any store
    demo: bool | None = None
    #: most slots one ad request may carry (a feed page sends one per placeholder)
    max_slots: int = Field(default=10, ge=1, le=100)
    #: where uploaded creative images are stored (``POST /v1/creatives``); None: the
    #: ``creatives`` folder beside the SQLite database file, else under the working
    #: directory. Several servers share one (a shared volume) or serve from a CDN
    creative_dir: str | None = None
    #: with it, an upload's URL is this prefix + the file's name (a CDN or object store
    #: the operator syncs ``creative_dir`` to); None: this server's ``/creatives/files/``
    creative_url_prefix: str | None = None
    #: an uploaded image's largest file, bytes (413 naming ``file`` above it; the
    #: route's body limit is this plus :data:`UPLOAD_FORM_OVERHEAD`)
    creative_max_bytes: int = Field(default=1_048_576, gt=0, le=64 * 1_048_576)
    #: its largest width, height and pixel count (422 naming ``file``), under Pillow's
    #: own decompression-bomb guard (``Image.MAX_IMAGE_PIXELS``, 89,478,485)
    creative_max_width: int = Field(default=4_096, gt=0, le=65_535)
    creative_max_height: int = Field(default=4_096, gt=0, le=65_535)
    creative_max_pixels: int = Field(default=4_194_304, gt=0, le=89_478_485)
    #: most frames of an animated GIF or WebP
    creative_max_frames: int = Field(default=300, gt=0, le=10_000)
    #: derive what a browser cannot send, where the request does not give it: the
    #: country (``geo.country``) from the client address (DB-IP country lite data in
    #: ``<data dir>/geo``), ``device_type``, ``os`` and ``browser`` from the User-Agent
    derive_client_facts: bool = True
    #: the event log: None keeps it in this process's memory (the embedded default,
    #: each event applied to the ledger as it is appended); a ``nats://`` URL uses NATS
    #: JetStream, read by aggregators (``adfunnel aggregator``, or ``aggregate``)
    event_log_url: str | None = None
    #: partitions of the event log (subjects ``adfunnel.events.<partition>``)
    event_partitions: int = Field(default=16, ge=1, le=1024)
    #: the JetStream stream's name (one per deployment)
    event_stream: str = Field(default="ADFUNNEL_EVENTS", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    #: with ``event_log_url``: also run an aggregator over every partition in this
    #: process (a fleet turns it off and runs ``adfunnel aggregator`` processes)
    aggregate: bool = True
    #: where the tracker spools events while the log is down (None: refuse them, 503)
    spool_dir: str | None = None
    #: the spool's bound, bytes
    spool_max_bytes: int = Field(default=1 << 30, gt=0)
    #: log lines on stderr as text (for a terminal) or JSON (one object per line)
    log_format: Literal["text", "json"] = "text"
    #: one access-log line per HTTP request (logger ``adfunnel.access``)
    access_log: bool = True
    #: with ``access_log``: a line for the beacons ``/i``, ``/c``, ``/v`` too (they are
    #: recorded in the event log and counted in ``adfunnel_beacons_total`` anyway)
    access_log_beacons: bool = False
    #: campaigns (by today's billed spend) with their own per-campaign metric series;
    #: the others are summed under ``campaign="other"``; 0: no per-campaign series
    metrics_top_campaigns: int = Field(default=20, ge=0, le=1_000)

    @model_validator(mode="after")
    def _ivt_thresholds_fit(self) -> Settings:
        # the scorer's own checks (one rule): a CTR bucket that divides its window, click
        # limits as COUNT/SECONDS …
        if self.ivt_ctr_window_s % self.ivt_ctr_bucket_s:
            raise ValueError("ivt_ctr_bucket_s must divide ivt_ctr_window_s")
        try:
            Tier2Config.from_settings(self)
        except ValueError as exc:
            raise ValueError(f"ivt thresholds: {exc}") from None
        return self

    @model_validator(mode="after")
    def _shading_fit_has_its_inputs(self) -> Settings:
        """A scheduled shading fit reads the served log and writes releases somewhere."""
        if self.shading_fit_s is not None:
            missing = [k for k in ("served_log_dir", "shading_release_dir")
                       if getattr(self, k) is None]
            if missing:
                raise ValueError(f"shading_fit_s needs {' and '.join(missing)}")
        return self

    @field_validator("currency")
    @classmethod
    def _iso_currency(cls, v: str) -> str:
        # a typo (UDS) would start, then bid on no exchange request (its cur lacks it)
        if pycountry.currencies.get(alpha_3=v) is None:
            raise ValueError(f"{v} is not an ISO 4217 currency code")
        return v

    @field_validator("ivt_click_rate_limits")
    @classmethod
    def _click_limits(cls, v: list[str]) -> list[str]:
        for text in v:
            parse_rate_limit(text)  # the scorer's own parser
        return v

    #: where ``token_secret`` came from, for the start-up log (never the secret itself)
    _token_secret_note: str = PrivateAttr(default="")

    @model_validator(mode="after")
    def _kept_token_secret(self) -> Settings:
        """Unset ``token_secret`` with an SQLite file: the one kept in its directory."""
        if "token_secret" in self.model_fields_set:
            self._token_secret_note = "token secret: from the settings"
            return self
        path = secret_path(self.database_url)
        if path is None or not path.parent.is_dir():  # no store there: its own error
            self._token_secret_note = ("token secret: random for this process only (set "
                                       "ADFUNNEL_TOKEN_SECRET to keep tokens across restarts)")
            return self
        secret, path, created = load_or_create(path)
        self.token_secret = secret
        self._token_secret_note = (f"token secret: {'generated and ' if created else ''}"
                                   f"kept in {path} (mode 0600)")
        return self

    @property
    def token_secret_note(self) -> str:
        """Where the token secret came from (for the start-up log; never the secret)."""
        return self._token_secret_note

    def previous_token_keys(self) -> tuple[bytes, ...]:
        """The earlier token secrets that still verify (rotation), as keys."""
        previous = self.token_secret_previous
        return (previous.encode(),) if previous else ()

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, v: str) -> str:
        if not v.startswith(("sqlite:", "postgresql:", "postgresql+psycopg:")):
            raise ValueError("must be a sqlite:// or postgresql:// URL")
        return v

    @field_validator("internal_token")
    @classmethod
    def _internal_token_needed(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None and (info.data.get("budget_service_url")
                          or "internal_token" in _REQUIRED.get()):
            raise ValueError("required (>= 32 characters) where a budget service is used "
                             "or served: set ADFUNNEL_INTERNAL_TOKEN")
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        import ipaddress

        for cidr in v:
            try:
                ipaddress.ip_network(cidr.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not an address or CIDR") from None
        return v

    @field_validator("public_base_url")
    @classmethod
    def _base_url(cls, v: str | None) -> str | None:
        return None if v is None else _http_base(v)

    @field_validator("creative_url_prefix")
    @classmethod
    def _url_prefix(cls, v: str | None) -> str | None:
        return None if v is None else _http_base(v) + "/"

    @field_validator("ivt_held_out_lists")
    @classmethod
    def _known_lists(cls, v: list[str]) -> list[str]:
        held_in(v)  # ValueError naming an unknown list
        return v

    @field_validator("event_log_url")
    @classmethod
    def _nats_scheme(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("nats://", "tls://")):
            raise ValueError("must be a nats:// URL")
        return v

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis:// URL")
        return v


def _http_base(url: str) -> str:
    """``url`` without its trailing ``/``, once it is an http(s) URL with a host and no
    query or fragment (a base other URLs are built on).

    Raises:
        ValueError: any other URL.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise ValueError("must have no query or fragment")
    return url.rstrip("/")
