"""The ASGI app of an embedded process: the advertiser API, the serving and tracking routes,
and the ops routes (health, readiness, metrics, ledger and serving stats, the admin clock).

``build_app`` puts the advertiser API (FastAPI, OpenAPI at ``/docs``) and the lean serving
routes (Starlette) over one :class:`~adfunnel.runtime.embedded.Runtime` on one ASGI app;
``create_app`` is the factory of a worker process (``uvicorn --factory
adfunnel.runtime.asgi:create_app``). Nothing is created at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from adfunnel.api.campaigns import make_advertiser_router
from adfunnel.api.errors import install_error_handlers
from adfunnel.api.forecasts import Forecaster, make_forecast_router
from adfunnel.api.idempotency import IdempotencyStore, Idempotent
from adfunnel.api.keys import make_api_key_router
from adfunnel.api.openapi import install_openapi
from adfunnel.api.operator import make_operator_router
from adfunnel.api.placement_report import make_placement_report_router
from adfunnel.api.reports import make_placement_rollup_router
from adfunnel.api.uploads import UPLOAD_PATH, Uploads, make_upload_router
from adfunnel.auth import ApiKeys, install_auth
from adfunnel.auth.http import bearer_key
from adfunnel.auth.ratelimit import RateLimiter
from adfunnel.body_limit import BodyLimit
from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.metrics import CAMPAIGNS
from adfunnel.campaigns.image import ImageLimits
from adfunnel.campaigns.uploads import CreativeFiles, SqlUploadStore, creative_directory
from adfunnel.clock import INSTANT_FORMAT, ClockWentBackwards, ManualClock, parse_instant
from adfunnel.events.served_erasure import erase_user as erase_served
from adfunnel.frequency.store import CapStoreUnavailable
from adfunnel.observability.metrics import watch_change_feed, watch_fill
from adfunnel.observability.request_log import RequestLog, quiet_paths
from adfunnel.openrtb.endpoint import OpenRtbEndpoint, catalog_has_shape
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.runtime.heap import freeze_heap
from adfunnel.serving.deadline import ArrivalStamp
from adfunnel.serving.derived import client_derivation
from adfunnel.serving.http import ServingEndpoints, error_response
from adfunnel.settings import Settings
from adfunnel.settings.model import UPLOAD_FORM_OVERHEAD
from adfunnel.tracking.client import parse_networks
from adfunnel.tracking.cors import PlacementCors
from adfunnel.tracking.http import TrackingEndpoints
from adfunnel.tracking.postback import make_conversion_router
from adfunnel.ui.budget_reads import budget_reads
from adfunnel.ui.mount import install_ui
from adfunnel.web.mount import install_web


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
    reads, _ = budget_reads(rt)  # the campaign report's period.today

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if reads is not None:
            await reads.aclose()
        # shutdown (SIGTERM): the beacons' own connection, then last flushes — the
        # served log's queue, eligible traffic
        await rt.events.publisher.aclose_fast_path()
        await asyncio.to_thread(rt.close)

    app = FastAPI(title="adfunnel", version="0.1.0", lifespan=lifespan,
                  description="Ad server: advertiser API, ad decisions, tracking.",
                  docs_url=None, redoc_url=None)  # served from local assets (openapi.py)
    install_error_handlers(app)
    uploads = make_uploads(s, rt.engine)
    # innermost: it needs the caller (auth) and reads the whole body (the limit's)
    app.add_middleware(Idempotent, store=IdempotencyStore(rt.engine, rt.clock))
    app.add_middleware(BodyLimit, max_bytes=s.max_body_bytes, routes={
        UPLOAD_PATH: (s.creative_max_bytes + UPLOAD_FORM_OVERHEAD, "file")})
    # outside the body limit: no key, no body read
    install_auth(app, rt.keys, RateLimiter(s.api_rate_per_s, s.api_burst))
    forecaster = Forecaster(rt.requests, rt.store, rt.ledger, rt.clock,
                            s.forecast_history_days, s.pctr_prior)
    app.include_router(make_advertiser_router(rt.store, rt.ledger, rt.clock, s, rt.rollups,
                                              uploads.lookup, reads,
                                              availability=forecaster.available_for,
                                              left_short=forecaster.lines_left_short))
    app.include_router(make_forecast_router(forecaster))  # admin only (its router's guard)
    app.include_router(make_upload_router(rt.store, uploads, rt.clock))
    app.include_router(make_operator_router(rt.store))  # admin only (its router's guard)
    app.include_router(make_placement_rollup_router(rt.store, rt.rollups, rt.clock,
                                                    currency=s.currency))
    if rt.placements is not None:
        app.include_router(make_placement_report_router(rt.store, rt.rollups, rt.placements,
                                                        rt.clock, s.currency))
    app.include_router(make_api_key_router(rt.keys, rt.store))
    app.include_router(make_conversion_router(rt.tracker, lambda cid: _advertiser_of(rt, cid)))
    install_ui(app, rt, rt.keys)  # the dashboard at /ui (its own server-side sessions)
    install_openapi(app)  # the whole server's document, the lean routes included
    derive = client_derivation(s.derive_client_facts, parse_networks(s.trusted_proxies))
    serving = ServingEndpoints(rt.queue, rt.decisions,
                               default_deadline_ms=s.default_deadline_ms,
                               max_body_bytes=s.max_body_bytes, ready=rt.ready,
                               served=rt.served, is_admin=admin_header(rt.keys),
                               max_slots=s.max_slots, public_base_url=s.public_base_url,
                               derive=derive,
                               origins=rt.catalog.allowed_origins,
                               sample=rt.requests.sampler.record if rt.requests else None,
                               placements=rt.placements.counter if rt.placements else None)
    tracking = TrackingEndpoints(rt.tracker, parse_networks(s.trusted_proxies))
    # POST /openrtb2/bid: the bidder endpoint on the same decider and logs
    openrtb = OpenRtbEndpoint.from_settings(
        serving, s, has_placement=lambda pid: rt.catalog.placements.get(pid) is not None,
        country_of=derive.countries.country if derive and derive.countries else None,
        has_shape=lambda *shape: catalog_has_shape(rt.catalog.index, shape))
    for route in (*serving.routes(), *tracking.routes(), *openrtb.routes()):
        app.router.routes.append(route)
    # the ad tag, the html creatives' frame and, while it is on, the demo page
    install_web(app, s, ad_of=lambda ad_id: rt.catalog.ads.get(ad_id), tracker=rt.tracker,
                clock=rt.clock)
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
        return JSONResponse({"rows": stats.rows, "measured_rows": stats.measured_rows,
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
            # the ratio of the pCTR serving used (recalibrated), and the factors in use
            "calibration": scorer.monitor.status() if scorer.monitor is not None else None,
            "recalibration": rt.factors.status() if rt.factors is not None else None}
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
    stamped = ArrivalStamp(app, routes={**serving.hot_routes(), **tracking.hot_routes(),
                                            **openrtb.hot_routes()})
    # CORS preflights of the select and beacon routes, for the origins placements allow
    cors = PlacementCors(stamped, rt.catalog.any_allowed_origins)
    return RequestLog(cors, access_log=s.access_log,
                      quiet_paths=quiet_paths(s.access_log_beacons))


def make_uploads(s: Settings, engine: Engine) -> Uploads:
    """Creative uploads: records in the runtime's database, files in ``creative_dir``
    (:func:`~adfunnel.campaigns.uploads.creative_directory`), the settings' limits."""
    limits = ImageLimits(s.creative_max_bytes, s.creative_max_width, s.creative_max_height,
                         s.creative_max_pixels, s.creative_max_frames)
    files = CreativeFiles(creative_directory(s.creative_dir, s.database_url))
    return Uploads(SqlUploadStore(engine), files, limits, s.creative_url_prefix,
                   s.public_base_url)


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
    (:func:`freeze_heap`)."""
    from adfunnel.auth import bootstrap_admin_key
    from adfunnel.observability.logs import configure_logging
    from adfunnel.settings import load_settings

    settings = load_settings()
    configure_logging(settings.log_format)
    app = build_app(build_runtime(bootstrap_admin_key(settings)))
    freeze_heap()
    return app
