"""Wiring of one embedded adfunnel process: stores, catalog, decider, tracker and HTTP app.

``build_runtime`` makes every long-lived object from one :class:`Settings`;
``build_app`` puts the advertiser API (FastAPI, OpenAPI at ``/docs``) and the lean
serving routes (Starlette) on one ASGI app. Nothing is created at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from adfunnel.api.campaigns import make_advertiser_router
from adfunnel.api.errors import install_error_handlers
from adfunnel.api.keys import make_api_key_router
from adfunnel.api.openapi import install_openapi
from adfunnel.api.operator import make_operator_router
from adfunnel.auth import ApiKeys, SqlKeyStore, install_auth
from adfunnel.auth.http import bearer_key
from adfunnel.auth.ratelimit import RateLimiter
from adfunnel.billing.ledger import Ledger
from adfunnel.billing.rollups import DirtyHours, RollupStore
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.sql_rollups import make_rollup_store
from adfunnel.body_limit import BodyLimit
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.gate import LocalSpendGate, SpendGate
from adfunnel.budget.metrics import CAMPAIGNS
from adfunnel.budget.remote import ReportingBudgetClient
from adfunnel.campaigns.change_feed import ChangeFeed, libpq_dsn
from adfunnel.campaigns.errors import VersionConflict
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import CampaignStatus, ModelRelease
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import (
    INSTANT_FORMAT,
    Clock,
    ClockWentBackwards,
    ManualClock,
    SystemClock,
    parse_instant,
)
from adfunnel.db import make_engine
from adfunnel.events.compactor import compact
from adfunnel.events.served_erasure import erase_user as erase_served
from adfunnel.events.served_log import ServedLog
from adfunnel.frequency.redis_store import RedisFrequencyStore
from adfunnel.frequency.scope import NO_SHARED_STORE, caps_refused
from adfunnel.frequency.store import CapStoreUnavailable, FrequencyStore, MemoryFrequencyStore
from adfunnel.index import ScanIndex
from adfunnel.ivt.lists import IpRanges, held_in
from adfunnel.ivt.rules import Tier1Rules
from adfunnel.observability.metrics import watch_change_feed, watch_fill
from adfunnel.observability.request_log import RequestLog, quiet_paths
from adfunnel.pacing.traffic_log import EligibleCounter, SqlTrafficLog
from adfunnel.periodic import Periodic
from adfunnel.prediction.calibration import CalibrationMonitor
from adfunnel.prediction.model import ClickModel, ModelError
from adfunnel.prediction.scorer import ModelScorer
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.runtime.compiled import warm_up
from adfunnel.runtime.event_plane import EventPlane, make_event_plane
from adfunnel.runtime.heap import freeze_heap
from adfunnel.serving.caps import CapGate
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.deadline import ArrivalStamp, DecisionQueue
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision_log import DecisionLog
from adfunnel.serving.http import ServingEndpoints, error_response
from adfunnel.settings import Settings
from adfunnel.tracking.beacons import Tracker
from adfunnel.tracking.client import parse_networks
from adfunnel.tracking.http import TrackingEndpoints
from adfunnel.tracking.postback import make_conversion_router
from adfunnel.ui import install_ui


@dataclass
class Runtime:
    """Every long-lived object of one embedded process."""

    settings: Settings
    clock: Clock
    engine: Engine
    store: SqlCampaignStore
    ledger: Ledger
    catalog: Catalog
    gate: SpendGate
    ctr: SmoothedCtr
    decider: ColumnarDecider
    tracker: Tracker
    decisions: DecisionLog
    feed: ChangeFeed
    background: list[Periodic]
    queue: DecisionQueue  # where ad requests wait for a decision (serving/deadline.py)
    caps: FrequencyStore  # per-user frequency-cap records (Redis, or memory)
    events: EventPlane  # event log, the tracker's publisher, the aggregator
    rollups: RollupStore  # hourly rollups of the ledger (reports by hour, ad, placement)
    keys: ApiKeys  # API keys: the bootstrap admin key and the stored ones
    served: ServedLog | None = None  # committed decisions for the click model
    _closed: bool = False

    def ready(self) -> bool:
        """True while the catalog follows the change log closely enough to decide."""
        return self.feed.ready()

    def close(self) -> None:
        """Stop every background task (with a last flush) and release resources; a
        second call does nothing (the server's shutdown and a test may both call it)."""
        if self._closed:
            return
        self._closed = True
        self.events.close()  # the aggregator's last batch, before the last rollup flush
        for task in self.background:
            task.stop(final=True)
        self.feed.stop()
        if isinstance(self.gate, ReportingBudgetClient | InProcessBudget):
            self.gate.stop()
        self.caps.close()
        if isinstance(self.gate, InProcessBudget):
            CAMPAIGNS.forget(self.gate.snapshot)
        if self.served is not None:
            self.served.close()
        self.engine.dispose()


def make_catalog(settings: Settings) -> Catalog:
    """The serving catalogue: with the conjunction index, partitioned by creative shape
    (retrieval hands the decider only ads that fit); the reference scan, one index."""
    if settings.index == "scan":
        return Catalog(ScanIndex(), prior_pctr=settings.pctr_prior,
                       prior_pcvr=settings.pcvr_prior)
    return Catalog.shaped(prior_pctr=settings.pctr_prior, prior_pcvr=settings.pcvr_prior)


def make_cap_store(settings: Settings, clock: Clock) -> FrequencyStore:
    """Frequency-cap records: on the Redis at ``redis_url`` (shared by every ad-server
    process), else in this process's memory (the embedded default: one process; with
    several serving processes see :mod:`adfunnel.frequency.scope`)."""
    if settings.redis_url:
        return RedisFrequencyStore(settings.redis_url)
    return MemoryFrequencyStore(clock)


def make_clock(settings: Settings) -> Clock:
    return ManualClock() if settings.clock == "manual" else SystemClock()


def build_runtime(
    settings: Settings, clock: Clock | None = None, seed: int | None = None, *, feed: bool = True
) -> Runtime:
    """Open the database (migrating it to head), load the catalog and wire the planes.

    With ``feed`` a background thread tails the change log, so writes made by other
    processes reach this one; writes made here are applied at once as well.
    """
    warm_up()  # the decision's compiled kernels, before the first request
    clock = clock or make_clock(settings)
    engine = make_engine(settings.database_url)
    upgrade(engine)
    store = SqlCampaignStore(engine, clock)
    ledger = SqlLedger(engine)
    catalog = make_catalog(settings)
    catalog.load(Snapshot.read(store))
    store.subscribe(catalog.apply_local)
    change_feed = ChangeFeed(store, catalog, clock=clock, poll_s=settings.change_poll_s,
                             listen_dsn=libpq_dsn(settings.database_url))
    if feed:
        change_feed.start()
    gate = make_gate(settings, store, ledger, clock, engine)
    ctr = SmoothedCtr(settings.pctr_prior, settings.pctr_prior_strength)
    key = settings.token_secret.encode()
    decisions = DecisionLog()
    background: list[Periodic] = []
    eligible = gate.eligible if isinstance(gate, InProcessBudget) else None
    if settings.budget_service_url:  # the budget service shapes curves from this log
        eligible = EligibleCounter()
        traffic = SqlTrafficLog(engine)
        background.append(Periodic(lambda: traffic.add(eligible.drain()),
                                   settings.traffic_flush_s, "eligible-flush", clock).start())
    caps = make_cap_store(settings, clock)
    decider = ColumnarDecider(
        catalog, gate, ctr, clock, key,
        caps=CapGate(caps, catalog.caps,
                     refused=NO_SHARED_STORE if caps_refused(settings) else None),
        token_ttl_s=settings.token_ttl_s, pcvr=settings.pcvr_prior,
        retrieval_limit=settings.retrieval_limit, prerank_keep=settings.prerank_keep,
        candidate_limit=settings.candidate_limit, first_limit=settings.first_candidates,
        rng=_decision_rng(seed if seed is not None else settings.seed), eligible=eligible,
    )
    monitor = CalibrationMonitor()
    cvr = (ClickModel.load(Path(settings.cvr_model_dir))
           if settings.cvr_model_dir is not None else None)
    if settings.model_dir is not None:
        decider.scorer = ModelScorer(ClickModel.load(Path(settings.model_dir)),
                                     settings.model_budget_ms, monitor, cvr,
                                     recall_sample=settings.recall_sample)
        decider.exploration_share = settings.exploration_share
    follow_model_releases(catalog, decider, settings, monitor, cvr)
    rollups = make_rollup_store(engine)
    dirty = DirtyHours(rollups)  # hours the aggregator touched, refreshed every few seconds
    background.append(Periodic(dirty.flush, settings.rollup_refresh_s, "rollup-refresh", clock,
                               run_on_move=True).start())
    events = make_event_plane(settings, clock, ledger, catalog.campaign, gate, ctr,
                              on_lifetime_spent=lambda cid: mark_completed(store, cid),
                              on_hours=dirty.mark,
                              on_billed=lambda r: monitor.billed(r.impression_id, r.event_type),
                              on_reversed=lambda r: monitor.reversed(r.impression_id,
                                                                     r.event_type))
    tracker = Tracker(events.publisher, catalog, clock, key, ivt=make_ivt_rules(settings),
                      previous_keys=settings.previous_token_keys())
    served = make_served_log(settings, clock)
    if served is not None and settings.served_log_dir:
        directory = settings.served_log_dir
        background.append(Periodic(lambda: compact(directory, clock.now()),
                                   settings.served_compact_s, "served-compact", clock).start())
    return Runtime(settings, clock, engine, store, ledger, catalog, gate, ctr, decider,
                   tracker, decisions, change_feed, background, DecisionQueue(decider), caps,
                   events, rollups, ApiKeys(SqlKeyStore(engine), clock, settings.admin_key),
                   served)


#: Seconds of the injected clock between refreshes of the rollup hours the aggregator
#: touched (on a manual clock they follow its moves, so a replay's reports fill in).
ROLLUP_REFRESH_S = 5.0  # the default of ``Settings.rollup_refresh_s``


def make_ivt_rules(settings: Settings) -> Tier1Rules | None:
    """Tier-1 invalid-traffic rules, their lists loaded now (half a second, once per
    process) rather than on the first beacon; None when ``ivt`` is off."""
    if not settings.ivt:
        return None
    # lists held out (a recall measurement) load apart from the process-wide ones
    ranges = (IpRanges.from_dir(sources=held_in(settings.ivt_held_out_lists))
              if settings.ivt_held_out_lists else None)
    return Tier1Rules(ranges=ranges, min_click_delay_ms=settings.ivt_min_click_delay_ms)


def follow_model_releases(catalog: Catalog, decider: ColumnarDecider, settings: Settings,
                          monitor: CalibrationMonitor, cvr: ClickModel | None = None) -> None:
    """Serve with the active model releases of the change log (``POST
    /v1/admin/models``) — the click model, and the conversion model of CPA candidates —
    switching when another becomes active, without a restart. A release whose artifact
    cannot be loaded, or is not the version and target registered, is logged and the
    current model kept. A conversion model waits for a click model to serve with."""
    log = logging.getLogger("adfunnel.model")
    state: dict[str, ClickModel | None] = {"conversion": cvr}

    def use(release: ModelRelease) -> None:
        try:
            model = ClickModel.load(Path(release.path))
        except ModelError as exc:
            log.error("model release %d not loaded: %s", release.id, exc)
            return
        if model.version != release.model_version or model.target != release.target:
            log.error("model release %d: %s holds a %s model %s, not the %s model %s",
                      release.id, release.path, model.target, model.version,
                      release.target, release.model_version)
            return
        if release.target == "conversion":
            state["conversion"] = model
            current = decider.scorer
            if current is not None:
                decider.scorer = ModelScorer(current.model, settings.model_budget_ms,
                                             monitor, model,
                                             recall_sample=settings.recall_sample)
        else:
            decider.scorer = ModelScorer(model, settings.model_budget_ms, monitor,
                                         state["conversion"],
                                         recall_sample=settings.recall_sample)
            decider.exploration_share = settings.exploration_share
        log.info("serving with %s model %s (release %d)", release.target, model.version,
                 release.id)

    catalog.model_listeners.append(use)
    for target in ("conversion", "click"):
        found = catalog.active_model(target)
        if found is not None:
            use(found)


def make_served_log(settings: Settings, clock: Clock) -> ServedLog | None:
    """The served log under ``served_log_dir`` (None without one). The user-key hash is
    keyed by ``served_log_salt``, else by a key derived from the token secret."""
    if not settings.served_log_dir:
        return None
    salt = (settings.served_log_salt.encode() if settings.served_log_salt else
            hmac.new(settings.token_secret.encode(), b"served-log salt", "sha256").digest())
    return ServedLog(settings.served_log_dir, clock, salt=salt)


def _decision_rng(seed: int | None) -> random.Random | None:
    return random.Random(seed) if seed is not None else None


def make_gate(settings: Settings, store: SqlCampaignStore, ledger: Ledger, clock: Clock,
              engine: Engine) -> SpendGate:
    """The spend gate: the budget client of the budget & pacing service — a separate
    process (fleet, ``budget_service_url``) or in this process (embedded default) — or,
    with ``budget="local"``, committed spend held in this process without pacing."""
    if settings.budget_service_url:
        assert settings.internal_token is not None  # required with budget_service_url
        client = ReportingBudgetClient(clock, settings.budget_service_url.split(","),
                                       token=settings.internal_token)
        client.start()
        return client
    if settings.budget == "service":
        return InProcessBudget(store, ledger, clock, engine=engine,
                               token_ttl_s=settings.token_ttl_s)
    gate = LocalSpendGate()
    _seed_billed(gate, ledger, clock.now())
    return gate


def _seed_billed(gate: LocalSpendGate, ledger: Ledger, now: datetime) -> None:
    """Committed spend survives a restart: start from the ledger's billed totals."""
    days = {(now + timedelta(days=d)).date() for d in (-1, 0, 1)}
    gate.seed_billed({(cid, day): v for day in days for cid, v in ledger.billed_on(day).items()})
    gate.seed_lifetime(ledger.lifetime_billed())


def mark_completed(store: SqlCampaignStore, campaign_id: int, attempts: int = 3) -> None:
    """Set an active or paused campaign's status to ``completed`` (its lifetime budget is
    spent); the change log carries it to every server, whose filter then rejects it.
    A concurrent edit (version conflict) is retried on the new version."""
    for _ in range(attempts):
        c = store.get_campaign(campaign_id)
        if c.status not in (CampaignStatus.ACTIVE, CampaignStatus.PAUSED):
            return
        try:
            store.update_campaign(campaign_id, {"status": CampaignStatus.COMPLETED}, c.version)
            return
        except VersionConflict:
            continue


def _advertiser_of(rt: Runtime, campaign_id: int) -> int | None:
    """The campaign's advertiser id as the ad server knows it, or None."""
    found = rt.catalog.campaign(campaign_id)
    return None if found is None else found.advertiser_id


def build_app(rt: Runtime) -> RequestLog:
    """The ASGI app of an embedded process: the FastAPI app (advertiser API, operator
    routes, tracking, admin) behind :class:`ArrivalStamp`, behind :class:`RequestLog`
    (``x-request-id`` and the access log, on every route). The stamp stamps every request's
    arrival and serves the hot routes (``POST /v1/ads:select``, ``GET /v1/bench/noop``,
    the ``/i`` and ``/c`` beacons) itself. Attributes of the FastAPI app (``routes``,
    ``openapi`` …) read through.

    Measured in process (CPU per request, 2 cores): a bare 204 route costs ~3 µs from
    :class:`ArrivalStamp` and ~14 µs when it first passes FastAPI's own layers
    (``FastAPI.__call__``, error middleware), so the stamp sits outside them."""
    s = rt.settings

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        # shutdown (SIGTERM): the beacons' own connection, then last flushes — the
        # served log's queue, eligible traffic
        await rt.events.publisher.aclose_fast_path()
        await asyncio.to_thread(rt.close)

    app = FastAPI(title="adfunnel", version="0.1.0", lifespan=lifespan,
                  description="Ad server: advertiser API, ad decisions, tracking.",
                  docs_url=None, redoc_url=None)  # served from local assets (openapi.py)
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=s.max_body_bytes)
    # outside the body limit: no key, no body read
    install_auth(app, rt.keys, RateLimiter(s.api_rate_per_s, s.api_burst))
    app.include_router(make_advertiser_router(rt.store, rt.ledger, rt.clock, s, rt.rollups))
    app.include_router(make_operator_router(rt.store))  # admin only (its router's guard)
    app.include_router(make_api_key_router(rt.keys, rt.store))
    app.include_router(make_conversion_router(rt.tracker, lambda cid: _advertiser_of(rt, cid)))
    install_ui(app, rt, rt.keys)  # the dashboard at /ui (its own server-side sessions)
    install_openapi(app)  # the whole server's document, the lean routes included
    serving = ServingEndpoints(rt.queue, rt.decisions,
                               default_deadline_ms=s.default_deadline_ms,
                               max_body_bytes=s.max_body_bytes, ready=rt.ready,
                               served=rt.served, is_admin=admin_header(rt.keys))
    tracking = TrackingEndpoints(rt.tracker, parse_networks(s.trusted_proxies))
    for route in (*serving.routes(), *tracking.routes()):
        app.router.routes.append(route)
    watch_metrics(rt, serving)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        ready = rt.ready()
        body = {"status": "ready" if ready else "not_ready",
                "change_log_position": rt.catalog.position,
                "behind_s": round(rt.feed.behind_s(), 3),
                "last_apply_lag_s": round(rt.feed.last_apply_lag_s, 3),
                "ads": len(rt.catalog.index), "pid": os.getpid()}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    def ledger_stats(_: Request) -> Response:
        """The ledger's rows and durable counters, this process's tracker counts
        (refused tokens, house-ad beacons) and its aggregator's lag."""
        rt.events.settle()
        stats = rt.ledger.stats()
        counters = rt.ledger.counters()
        tracker = rt.tracker.counts()
        agg = rt.events.aggregator
        # a re-sent beacon is dropped by the log's dedupe window, or by the ledger
        dropped = rt.events.publisher.duplicates()
        return JSONResponse({"rows": stats.rows,
                             "duplicates_rejected": stats.duplicates_rejected + dropped,
                             "invalid_tokens": tracker.get("invalid_tokens", 0),
                             "counters": counters, "tracker": tracker,
                             "events": {"lag_ms": agg.lag_ms() if agg else
                                        {"p50": None, "p99": None},
                                        "spooled": rt.events.publisher.spooled()}})

    async def serving_stats(_: Request) -> Response:
        d = rt.decisions
        scorer = rt.decider.scorer
        model = None if scorer is None else {
            "version": scorer.version, "budget_ms": scorer.budget_ms,
            "prerank_recall": scorer.prerank_recall(),
            "calibration": scorer.monitor.status() if scorer.monitor is not None else None}
        return JSONResponse({"decisions": d.decisions, "late": d.late, "shed": d.shed,
                             "deadline_miss_rate": round(d.miss_rate(), 4),
                             "filled_slots": d.filled_slots,
                             "rejections": dict(sorted(d.rejections.items())),
                             "model": model})

    def erase_user(request: Request) -> Response:
        """Erase one user: the frequency-cap records, and every served-log record of
        the user's key (:mod:`adfunnel.events.served_erasure`) (204); 503 when the cap
        store or the served log's files fail (a retry is safe)."""
        key = request.path_params["key"]
        try:
            rt.caps.erase(key)
        except CapStoreUnavailable:
            return error_response(503, "cap_store_unavailable",
                                  [("key", "the frequency-cap store did not answer")])
        if rt.served is not None:
            try:
                erase_served(rt.served, key)
            except (OSError, TimeoutError):
                logging.getLogger("adfunnel.erasure").exception(
                    "the served log could not be rewritten")
                return error_response(503, "served_log_unavailable",
                                      [("key", "the served log could not be rewritten")])
        return Response(status_code=204)

    async def budget_pacing(_: Request) -> Response:
        """The embedded budget service's pacing summary (steps, p_min, budget refusals
        per campaign and local day); 404 where the service runs in its own process."""
        if not isinstance(rt.gate, InProcessBudget):
            return error_response(404, "not_embedded",
                                  [("budget", "the budget service runs in its own process")])
        return JSONResponse(rt.gate.pacing_summary())

    async def set_clock(request: Request) -> Response:
        if not isinstance(rt.clock, ManualClock):
            return error_response(409, "clock_not_manual",
                                  [("clock", "start the server with --clock manual")])
        try:
            body = json.loads(await request.body())
        except ValueError:
            return error_response(400, "malformed_json", [("body", "not valid JSON")])
        if not isinstance(body, dict) or "now" not in body:
            return error_response(422, "validation", [("now", f"required; {INSTANT_FORMAT}")])
        extra = sorted(set(body) - {"now"})
        if extra:
            return error_response(422, "validation", [(k, "unknown field") for k in extra])
        # events of the old time reach the ledger before time moves on
        await asyncio.to_thread(rt.events.settle)
        try:
            at = rt.clock.set(parse_instant(body["now"]))
        except ClockWentBackwards as exc:  # a rewind would replay spent budget: refused
            return error_response(409, "clock_backwards", [("now", str(exc))])
        except ValueError as exc:
            return error_response(422, "validation", [("now", str(exc))])
        return JSONResponse({"now": at.isoformat()})

    async def settle_events(_: Request) -> Response:
        """Admin: wait until this process's aggregator has recorded every event stored so
        far (a replay reads the ledger's effects, budgets and the click model, before its
        next request); 503 ``events_unsettled`` when it has not within 10 s."""
        if await asyncio.to_thread(rt.events.settle):
            return JSONResponse({"settled": True})
        return error_response(503, "events_unsettled",
                              [("events", "the aggregator has not caught up within 10 s")])

    app.add_route("/healthz", healthz, methods=["GET"])
    app.add_route("/readyz", readyz, methods=["GET"])
    app.add_route("/metrics", metrics, methods=["GET"])
    app.add_route("/v1/ledger/stats", ledger_stats, methods=["GET"])
    app.add_route("/v1/admin/clock", set_clock, methods=["PUT"])
    app.add_route("/v1/admin/events:settle", settle_events, methods=["POST"])
    app.add_route("/v1/serving/stats", serving_stats, methods=["GET"])
    app.add_route("/v1/budget/pacing", budget_pacing, methods=["GET"])
    app.add_route("/v1/users/{key}", erase_user, methods=["DELETE"])
    # outside the framework: a select's deadline starts as early as we see it
    stamped = ArrivalStamp(app, routes={**serving.hot_routes(), **tracking.hot_routes()})
    return RequestLog(stamped, access_log=s.access_log,
                      quiet_paths=quiet_paths(s.access_log_beacons))


def admin_header(keys: ApiKeys) -> Callable[[str | None], bool]:
    """Whether an ``Authorization`` header value carries an admin key (the select
    route's ``explain``)."""

    def is_admin(header: str | None) -> bool:
        key = bearer_key(header)
        principal = keys.resolve(key) if key else None
        return principal is not None and principal.is_admin

    return is_admin


def watch_metrics(rt: Runtime, serving: ServingEndpoints) -> None:
    """The series read at scrape time (observability/metrics.py): fill rate, change-feed
    lag and, with the embedded budget service, the per-campaign budget series."""
    feed = rt.feed
    watch_fill(serving.fill_rate)
    watch_change_feed(lambda: max(feed.last_apply_lag_s, feed.behind_s()))
    # 0: none (the service's state is then not read at all)
    if isinstance(rt.gate, InProcessBudget) and rt.settings.metrics_top_campaigns > 0:
        CAMPAIGNS.follow(rt.gate.snapshot, rt.settings.metrics_top_campaigns)


def create_app() -> RequestLog:
    """App factory of a worker process (and of ``uvicorn --factory``): settings from
    ``ADFUNNEL_*`` (without ``ADFUNNEL_ADMIN_KEY``, an admin key is generated and
    printed once); the start-up heap is frozen out of the collector's reach
    (:func:`freeze_startup_heap`)."""
    from adfunnel.auth import bootstrap_admin_key
    from adfunnel.observability.logs import configure_logging
    from adfunnel.settings import load_settings

    settings = load_settings()
    configure_logging(settings.log_format)
    app = build_app(build_runtime(bootstrap_admin_key(settings)))
    freeze_startup_heap()
    return app


def freeze_startup_heap(gen0_threshold: int | None = None) -> None:
    """After start-up: collect once and move every object alive now (the catalogue, its
    index, the runtime) into the permanent generation, which collections never scan.
    ``gen0_threshold`` (net allocations between two collections of the youngest
    generation) is left at Python's 700 unless given.

    Measured at 100,000 ads (1.37 M objects after start-up): a full collection took
    650-750 ms before the freeze and under 0.1 ms after. Raising the gen-0 threshold to
    20,000 cut young collections under load from ~85 to 2 per 10 s but made each up to
    ~9 ms (≤ 0.8 ms at 700): a worse tail, so it is not raised.

    A server process calls it once, when its catalogue is loaded; later changes (the
    change feed) are ordinary objects again. Not for test processes building many
    runtimes: frozen objects in reference cycles are never freed."""
    gc.collect()
    gc.freeze()
    if gen0_threshold is not None:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0_threshold, gen1, gen2)


# ---- serving over HTTP: one process, or N processes sharing a port ------------------------


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A bound TCP socket for ``host:port`` with TCP_NODELAY set (accepted connections
    inherit it on Linux) and, with ``reuse_port``, SO_REUSEPORT: each worker binds its
    own socket to the same port and the kernel spreads new connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def http_address(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class CoalescingTransport:
    """A connection's transport, writing each response in one ``write``: a block of
    status line and headers is held until the response's first body bytes (or until
    the loop's next turn, or a close) and sent with them.

    uvicorn writes the header block and the body separately: two ``send`` system calls
    and two wake-ups of the reader per response. Measured with ``adfunnel bench http``
    style load (wrk, 16 connections, 2-core VM, four A/B pairs, budget ``local``): server
    CPU per select -6 % to -16 % (~200-350 µs) at 10,000 and 100,000 ads; no change for
    a bodiless 204. Everything but ``write`` and ``close`` is the transport's own."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: Any, loop: Any) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held = data
            self._loop.call_soon(self.flush)  # never held past this turn of the loop
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write a held header block now."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def serving_protocol() -> type:
    """uvicorn's httptools HTTP protocol with, on every accepted connection, TCP_NODELAY
    set and a :class:`CoalescingTransport`.

    TCP_NODELAY: a response written in two parts must not wait for the client's delayed
    ACK (~40 ms per request on one keep-alive connection, as measured under ``uvicorn
    --workers``). uvloop sets it on the connections it accepts; it is set here on every
    connection anyway, so it never depends on the loop or on how the socket was made."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class LeanHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(CoalescingTransport(transport, self.loop))

    return LeanHttpToolsProtocol


def server_config(app: Any, **config: Any) -> Any:
    """The ``uvicorn.Config`` of a serving process: uvloop, httptools with TCP_NODELAY
    and one write per response on every connection (:func:`serving_protocol`), no
    access log, no proxy-header rewriting (``trusted_proxies`` decides)."""
    import uvicorn

    # proxy_headers off: uvicorn would take X-Forwarded-For from any loopback peer; the
    # client address is the tracker's to decide, from its configured trusted proxies
    # uvicorn's access log off (RequestLog writes ours) and no logging config of its
    # own: its lines go through the process's handler (observability/logs.py)
    options = {"loop": "uvloop", "http": serving_protocol(), "log_level": "warning",
               "access_log": False, "log_config": None, "lifespan": "on",
               "proxy_headers": False, **config}
    return uvicorn.Config(app, **options)


def serve_http(app: Any, host: str, port: int, *, reuse_port: bool = False,
               on_bound: Any = None) -> bool:
    """Serve ``app`` on ``host:port`` in this process until SIGINT or SIGTERM; False when
    the server never started (its lifespan start-up failed). ``on_bound(address)`` is
    called with ``http://host:port`` (the port bound, for port 0) once the socket is
    bound."""
    import uvicorn

    sock = listening_socket(host, port, reuse_port=reuse_port)
    if on_bound is not None:
        on_bound(http_address(sock))
    server = uvicorn.Server(server_config(app, host=host, port=port))
    # the app is built: its heap (catalogue, index, read models) leaves the full
    # collections, whose pauses would stall the loop past a decision's deadline
    freeze_heap()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return bool(server.started)


#: Exit status of a worker that could not start (uvicorn's own start-up failure code).
STARTUP_FAILURE = 3


def worker_main(host: str, port: int) -> None:
    """One of N worker processes: build the runtime from ``ADFUNNEL_*`` (the supervisor
    set them, the token secret included), and only then bind, so connections reach
    workers whose catalogue is loaded. Exits with :data:`STARTUP_FAILURE` when it
    cannot start."""
    try:
        app = create_app()
        started = serve_http(app, host, port, reuse_port=True)
    except Exception:
        logging.getLogger("adfunnel.worker").exception("worker start-up failed")
        sys.exit(STARTUP_FAILURE)
    if not started:
        sys.exit(STARTUP_FAILURE)


def serve_workers(host: str, port: int, workers: int, *, restart_s: float = 1.0,
                  on_start: Any = None) -> int:
    """Run ``workers`` processes (``worker_main``) sharing ``host:port`` through
    SO_REUSEPORT, until SIGINT or SIGTERM. A worker that crashes is started again (at
    most once per ``restart_s`` per worker); one that cannot start stops them all.
    ``on_start()`` is called once the port is known to be free, before the workers start.
    Returns the exit status: 0, or 1 after a start-up failure.

    Raises:
        OSError: the port is taken (checked first with a plain bind).
        ValueError: port 0 (each worker would get its own port).
    """
    if port == 0:
        raise ValueError("several workers need a fixed port")
    listening_socket(host, port, reuse_port=False).close()  # taken → OSError, before any start
    if on_start is not None:
        on_start()
    return _Supervisor(host, port, workers, restart_s).run()


class _Supervisor:
    """Starts, watches and stops the worker processes of :func:`serve_workers`."""

    def __init__(self, host: str, port: int, workers: int, restart_s: float) -> None:
        self.args = (host, port)
        self.restart_s = restart_s
        self.ctx = multiprocessing.get_context("spawn")
        self.procs: list[Any] = [None] * workers
        self.started: list[float] = [0.0] * workers
        self.stopping = threading.Event()
        self.status = 0

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stopping.set())
        for i in range(len(self.procs)):
            self._start(i)
        while not self.stopping.is_set():
            multiprocessing.connection.wait([p.sentinel for p in self.procs], timeout=0.2)
            for i, p in enumerate(self.procs):
                if p.exitcode is not None and not self.stopping.is_set():
                    self._ended(i, p.exitcode)
        self._stop_all()
        return self.status

    def _ended(self, i: int, code: int) -> None:
        if code == STARTUP_FAILURE:
            self.status = 1
            self.stopping.set()
            return
        log = logging.getLogger("adfunnel.worker")
        log.error("worker %d exited with %d: starting it again", i, code)
        time.sleep(max(0.0, self.started[i] + self.restart_s - time.monotonic()))
        self._start(i)

    def _start(self, i: int) -> None:
        self.procs[i] = self.ctx.Process(target=worker_main, args=self.args,
                                         name=f"adfunnel-worker-{i}")
        self.procs[i].start()
        self.started[i] = time.monotonic()

    def _stop_all(self, timeout_s: float = 10.0) -> None:
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()  # SIGTERM: uvicorn's graceful shutdown
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                p.kill()
                p.join()
