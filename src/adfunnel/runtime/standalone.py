"""The event plane's own processes: ``adfunnel tracker`` and ``adfunnel aggregator``.

Both need only a small read model of the campaign side
(:class:`~adfunnel.campaigns.readmodel.CampaignReadModel`), booted from the store and
kept current by the change feed — not the targeting index or the serving columns.

- The **tracker** is stateless: it verifies beacons, applies tier-1 IVT rules and
  appends to the event log (spooling to disk while the log is down); it never touches
  the ledger.
- The **aggregator** reads some (or all) partitions of the log through the durable
  consumer ``ledger``, writes the ledger and acknowledges after each commit; billed
  spend reaches budgets through the ledger (the budget service's billed feed).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.billing.rollup_store import DirtyHours
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.billing.sql_rollups import make_rollup_store
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.change_feed import ChangeFeed, libpq_dsn
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.readmodel import CampaignReadModel
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import Clock
from adfunnel.db import make_engine
from adfunnel.observability.request_log import RequestLog, quiet_paths
from adfunnel.periodic import Periodic
from adfunnel.runtime.embedded import ROLLUP_REFRESH_S, make_clock, make_ivt_rules, mark_completed
from adfunnel.runtime.event_plane import EventPlane, make_event_plane
from adfunnel.runtime.heap import freeze_heap
from adfunnel.serving.deadline import ArrivalStamp
from adfunnel.settings import Settings
from adfunnel.tracking.beacons import Tracker
from adfunnel.tracking.client import parse_networks
from adfunnel.tracking.http import TrackingEndpoints

_log = logging.getLogger(__name__)


@dataclass
class CampaignSide:
    """The campaign read model with the change feed that keeps it current."""

    store: SqlCampaignStore
    model: CampaignReadModel
    feed: ChangeFeed
    clock: Clock

    @classmethod
    def open(cls, settings: Settings) -> CampaignSide:
        engine = make_engine(settings.database_url)
        upgrade(engine)
        clock = make_clock(settings)
        store = SqlCampaignStore(engine, clock)
        model = CampaignReadModel.read(store)
        feed = ChangeFeed(store, model, clock=clock, poll_s=settings.change_poll_s,
                          listen_dsn=libpq_dsn(settings.database_url))
        feed.start()
        return cls(store, model, feed, clock)


def build_tracker_app(settings: Settings) -> RequestLog:
    """The tracker process's ASGI app: ``/i``, ``/vi``, ``/c``, ``/v``, ``/healthz``,
    ``/metrics`` and ``/v1/tracker/stats``; ``/i``, ``/vi`` and ``/c`` are served outside
    Starlette's layers (:meth:`TrackingEndpoints.hot_routes`). The event log is
    ``settings.event_log_url`` (JetStream); nothing aggregates here."""
    side = CampaignSide.open(settings)
    clock = side.clock
    plane = make_event_plane(settings, clock, SqlLedger(side.store.engine),
                             side.model.campaign, LocalSpendGate(), None, aggregate=False)
    tracker = Tracker(plane.publisher, side.model, clock, settings.token_secret.encode(),
                      ivt=make_ivt_rules(settings),
                      previous_keys=settings.previous_token_keys(),
                      origins=side.model.allowed_origins)
    endpoints = TrackingEndpoints(tracker, parse_networks(settings.trusted_proxies))

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    async def stats(_: Request) -> Response:
        return JSONResponse({"counts": tracker.counts(), "spooled": plane.publisher.spooled()})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await plane.publisher.aclose_fast_path()
        side.feed.stop()
        plane.close()

    routes = [*endpoints.routes(), Route("/healthz", healthz), Route("/metrics", metrics),
              Route("/v1/tracker/stats", stats)]
    return beacon_layers(Starlette(routes=routes, lifespan=lifespan), endpoints.hot_routes(),
                         settings.access_log, settings.access_log_beacons)


def beacon_layers(app: Starlette, hot: dict[tuple[str, str], Any], access_log: bool,
                  access_log_beacons: bool) -> RequestLog:
    """How the tracker's app is layered (one place, so that ``bench events`` serves its
    bare baseline the same way): the ``hot`` routes, bare ASGI callables keyed by
    (method, path), are answered by :class:`ArrivalStamp` outside ``app``; everything
    passes the request log (``access_log``; beacon lines only with
    ``access_log_beacons``)."""
    return RequestLog(ArrivalStamp(app, routes=hot), access_log=access_log,
                      quiet_paths=quiet_paths(access_log_beacons))


def run_aggregator(settings: Settings, partitions: Sequence[int] | None,
                   stop: threading.Event) -> EventPlane:
    """Aggregate ``partitions`` (None: all) of the event log into the ledger until
    ``stop`` is set; the plane, closed, for its statistics."""
    side = CampaignSide.open(settings)
    dirty = DirtyHours(make_rollup_store(side.store.engine))
    refresh = Periodic(dirty.flush, ROLLUP_REFRESH_S, "rollup-refresh", side.clock,
                       run_on_move=True).start()
    plane = make_event_plane(
        settings, side.clock, SqlLedger(side.store.engine), side.model.campaign,
        LocalSpendGate(), None, aggregate=True, partitions=partitions,
        on_lifetime_spent=lambda cid: mark_completed(side.store, cid), on_hours=dirty.mark,
        on_lifetime_restored=lambda cid: mark_completed(side.store, cid, reopen=True))
    freeze_heap()
    try:
        stop.wait()
    finally:
        side.feed.stop()
        plane.close()
        refresh.stop(final=True)
    return plane
