"""One typed settings object, validated at start-up with every problem reported at once.

Every key can be overridden by an environment variable ``ADFUNNEL_<KEY>`` (for example
``ADFUNNEL_DATABASE_URL``); command-line flags override both.
"""

from __future__ import annotations

import secrets
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsError(ValueError):
    """Settings that cannot start a process; ``problems`` lists every one of them."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid settings:\n  " + "\n  ".join(problems))
        self.problems = problems


class Settings(BaseSettings):
    """Process settings. Units are in the names (``_s`` seconds, ``_ms`` milliseconds)."""

    model_config = SettingsConfigDict(env_prefix="ADFUNNEL_", extra="forbid")

    database_url: str = "sqlite:///adfunnel.sqlite3"
    redis_url: str | None = None
    budget_service_url: str | None = None
    #: without ``budget_service_url``: run the budget & pacing service in this process
    #: ("service"), or hold committed spend here without pacing ("local")
    budget: Literal["service", "local"] = "service"
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    token_secret: str = Field(default_factory=lambda: secrets.token_hex(32), min_length=32)
    #: the bootstrap admin API key (``Authorization: Bearer <key>``); None: ``serve``
    #: generates one and prints it once at start
    admin_key: str | None = Field(default=None, min_length=32, repr=False)
    #: requests a second one advertiser or reviewer key may send on average (429 with
    #: Retry-After past it; admin keys and the open routes are not limited)
    api_rate_per_s: float = Field(default=50.0, gt=0)
    #: requests such a key may send at once before the rate applies
    api_burst: int = Field(default=100, ge=1)
    token_ttl_s: int = Field(default=3600, gt=0, le=86_400)
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
    served_log_salt: str | None = Field(default=None, min_length=16)
    #: seconds between compactions of the served log's closed hours into Parquet
    served_compact_s: float = Field(default=300.0, gt=0)
    #: tier-1 invalid-traffic rules on the beacons (crawler user agents and addresses,
    #: datacenter addresses, clicks faster than a person): such beacons are never billed
    ivt: bool = True
    #: least milliseconds between a serve and its click before it counts as a person's
    ivt_min_click_delay_ms: int = Field(default=500, ge=0)
    #: IP lists (names of ``adfunnel.ivt.lists.IP_SOURCES``) the filter does NOT load:
    #: for measuring its recall on lists it has not seen (the replay); never in production
    ivt_held_out_lists: list[str] = []
    #: tier-2 invalid-traffic scoring in the aggregator (click and impression rates, CTR
    #: outliers, click timing over sliding windows); what it finds is reversed
    ivt_tier2: bool = True
    #: seconds a billed event stays pending (tier 2 may reverse it) before it is final
    ivt_hold_s: float = Field(default=600.0, gt=0, le=86_400)
    #: proxies (CIDRs) whose X-Forwarded-For names the client of a beacon
    trusted_proxies: list[str] = []
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

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, v: str) -> str:
        if not v.startswith(("sqlite:", "postgresql:", "postgresql+psycopg:")):
            raise ValueError("must be a sqlite:// or postgresql:// URL")
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

    @field_validator("ivt_held_out_lists")
    @classmethod
    def _known_lists(cls, v: list[str]) -> list[str]:
        from adfunnel.ivt.lists import held_in

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


def load_settings(**overrides: object) -> Settings:
    """Settings from defaults, ``ADFUNNEL_*`` environment variables and ``overrides``.

    ``None`` overrides are ignored, so unset CLI flags fall through to the environment.

    Raises:
        SettingsError: listing every invalid key with its problem.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise SettingsError(problems) from None
