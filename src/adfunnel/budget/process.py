"""The budget & pacing service as its own process: one shard with its feeders.

``BudgetServiceProcess`` runs one shard of :class:`BudgetService` next to two feeders:

- campaign records from the change log (``upsert_campaign``), so budget edits, pauses
  and new campaigns reach the service like they reach ad servers;
- billed spend from the ledger every ``billed_every_s`` seconds (≤ 10 s, DESIGN.md)
  through :class:`~adfunnel.budget.feed.BilledFeeder`: cumulative billed micros per
  campaign and local day, replacing the estimates of serves whose billing window closed.
  The ledger is read through :class:`~adfunnel.budget.billed.BilledTotals` (whoever
  builds the process passes it in).

Every schedule here runs on the injected clock (:class:`~adfunnel.periodic.Ticker`).
The bid multipliers λ of automatic campaign-days that moved are written to the store's
``budget_multipliers`` table every ``lam_save_s`` (on a thread of their own,
``lam_ticker``) and at :meth:`~BudgetServiceProcess.stop`,
and read back at start (:mod:`adfunnel.budget.kept_lams`): a restarted shard resumes them.
At start the shard reads the campaigns and the day's billed spend before it answers;
it grants nothing until warm (``adfunnel.budget.service``).

Start-up and the periodic feeds read in bulk, never per campaign: the campaign table's
budget columns in one query straight into the service's columns
(:func:`~adfunnel.budget.campaign_table.read_campaign_columns`, no record objects),
billed spend with one ledger query per local day (:meth:`BilledFeeder.columns`),
traffic shapes with one aggregate query (:meth:`SqlTrafficLog.by_utc_hour`).

The ad server's sides: :mod:`adfunnel.budget.embedded` (the service in the ad-server
process) and :mod:`adfunnel.budget.remote` (a client reporting over HTTP).
"""

from __future__ import annotations

import logging
import threading
from datetime import date, datetime, timedelta

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.budget.billed import BilledTotals
from adfunnel.budget.campaign_table import read_campaign_columns
from adfunnel.budget.day_rows import CampaignDay
from adfunnel.budget.days import add_day_routes
from adfunnel.budget.feed import TOKEN_TTL_S, BilledFeeder
from adfunnel.budget.http import MAX_BODY_BYTES, create_app
from adfunnel.budget.kept_lams import KEEP_DAYS, LAM_SAVE_S, SqlLamStore
from adfunnel.budget.metrics import CAMPAIGNS, METRICS_TOP_CAMPAIGNS
from adfunnel.budget.multipliers import LAM_SLOTS
from adfunnel.budget.service import BudgetService
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.budget.states import WARMUP_S
from adfunnel.campaigns.model import Campaign, ChangeRecord
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import Clock
from adfunnel.pacing.traffic_log import SqlTrafficLog, hour_start, shape_matrix, window_start
from adfunnel.periodic import Job, Ticker

log = logging.getLogger(__name__)

#: Seconds between re-reads of the eligible-traffic log.
SHAPE_REFRESH_S = 300.0


class BudgetServiceProcess:
    """One shard with its change-log and ledger feeders (threads sharing one lock)."""

    def __init__(
        self,
        store: SqlCampaignStore,
        ledger: BilledTotals,
        clock: Clock,
        *,
        shard: int = 0,
        shards: int = 1,
        control_interval_s: float = 10.0,
        billed_every_s: float = 5.0,
        token_ttl_s: float = TOKEN_TTL_S,
        poll_s: float = 0.25,
        engine: Engine | None = None,
        warmup_s: float = WARMUP_S,
        expected_servers: set[str] | None = None,
        lam_save_s: float = LAM_SAVE_S,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self.engine = engine
        self.service = BudgetService(clock, shard=shard, shards=shards,
                                     control_interval_s=control_interval_s, warmup_s=warmup_s,
                                     expected_servers=expected_servers)
        self.feeder = BilledFeeder(ledger, token_ttl_s=token_ttl_s)
        self.lams = SqlLamStore(store.engine)
        self._lams_forgotten: date | None = None  # the UTC day old λ was last dropped on
        self.lam_save_s = lam_save_s
        self.lock = threading.Lock()
        self.control_interval_s = control_interval_s
        self.billed_every_s = billed_every_s
        self.poll_s = poll_s
        self.position = 0
        self.metrics_top = METRICS_TOP_CAMPAIGNS  # campaigns with their own series
        self.traffic = SqlTrafficLog(engine) if engine is not None else None
        # (traffic window start, placement average) of the last shape refresh
        self._last_shapes: tuple[datetime, np.ndarray] | None = None
        self.ticker = Ticker(clock, [
            Job("changes", poll_s, self.poll_changes),
            # shapes before the first billed feed makes today's rows: a restarted shard
            # keeps today's shaped curves
            Job("shapes", SHAPE_REFRESH_S, self.refresh_shapes),
            Job("billed", billed_every_s, self.feed_billed),
            Job("step", control_interval_s, self.step),
        ], name="budget-service", poll_s=min(0.1, poll_s))
        # λ writes on a thread of their own: at 10⁵ automatic campaign-days a write takes
        # seconds (README), which must not hold up the control steps and billed feeds
        self.lam_ticker = Ticker(clock, [Job("lams", lam_save_s, self.save_lams)],
                                 name="budget-lams", poll_s=min(0.1, poll_s))

    def app(self, token: str, *, max_body_bytes: int = MAX_BODY_BYTES) -> Starlette:
        """The shard's HTTP app plus ``GET /v1/status`` (budget state, p and pacing status
        per campaign on its current local day), ``GET /metrics`` (Prometheus, with the
        per-campaign series of :mod:`adfunnel.budget.metrics`) and the
        dashboard's ``GET /v1/days`` (:mod:`adfunnel.budget.days`). The control step
        runs on the process's ticker (domain time), not in the app. Every route but
        ``/healthz`` needs the internal ``token``
        (:func:`adfunnel.budget.http.create_app`)."""
        app = create_app(self.service, token=token, lock=self.lock,
                         max_body_bytes=max_body_bytes)
        app.router.routes.append(Route("/v1/status", self._status, methods=["GET"]))
        app.router.routes.append(Route("/metrics", _metrics, methods=["GET"]))
        add_day_routes(app.router.routes, self.service, self.lock, self.clock)
        CAMPAIGNS.follow(self.snapshot, self.metrics_top)  # the per-campaign series
        return app

    def step(self) -> None:
        """One control step of every owned campaign."""
        with self.lock:
            self.service.step()

    def status(self) -> list[dict[str, object]]:
        now = self.clock.now().timestamp()
        with self.lock:
            ids = np.sort(self.service.owned().ids).tolist()
            days = [self.service.current(cid, now) for cid in ids]
            return [_status_of(cid, cd, now) for cid, cd in zip(ids, days, strict=True)
                    if cd is not None]

    def snapshot(self) -> BudgetSnapshot:
        """:meth:`status` as columns, in one bulk pass under the lock: what a metrics
        scrape reads (8 ms at 100,000 campaigns where folding :meth:`status` took
        0.75 s: ``adfunnel bench budget``)."""
        now = self.clock.now().timestamp()
        with self.lock:
            return self.service.snapshot(now)

    async def _status(self, _: Request) -> Response:
        return JSONResponse(self.status())

    def load(self) -> None:
        """Every campaign of the store in bulk (its budget columns), and the change-log
        position to follow from (read first: later changes apply on top by version)."""
        last_seq = self.store.last_seq()
        cols = read_campaign_columns(self.store.engine)
        with self.lock:
            # records first: campaigns with a budget period are read as records
            self.service.campaign_loader = self.store.get_campaign
            days = getattr(self.ledger, "day_totals", None)
            if days is not None:  # an average-day month's earlier days, once a month
                self.service.period_days_loader = lambda cid, first, last: {
                    t.day: t.billed_micros for t in days(cid, first, last)}
            self.service.load_campaigns(cols)
            self.position = last_seq
        self.resume_lams()

    def resume_lams(self) -> int:
        """λ of the automatic campaign-days kept in the store (since ``KEEP_DAYS`` before
        today, UTC) handed to the service (:mod:`adfunnel.budget.lam_resume`): a restart
        resumes them instead of starting every automatic campaign at the lowest bids.
        Returns how many entries count (the campaign's current strategy terms)."""
        now = self.clock.now()
        kept = self.lams.load(now.date() - timedelta(days=KEEP_DAYS), LAM_SLOTS)
        with self.lock:
            return self.service.resume_multipliers(kept, now.timestamp())

    def save_lams(self) -> int:
        """Write the λ of campaign-days that moved since the last write (read under the
        lock, written outside it); once a UTC day, drop the days past keeping. Returns
        how many campaign-days were written."""
        with self.lock:
            kept = self.service.kept_multipliers(self.clock.now().timestamp())
        try:
            n = self.lams.save(kept)
        except Exception:
            with self.lock:  # not written: mark them again for the next write
                self.service.mark_unsaved(kept)
            raise
        today = self.clock.now().date()
        if self._lams_forgotten != today:
            self.lams.forget(today)
            self._lams_forgotten = today
        return n

    def poll_changes(self) -> int:
        changes = self.store.changes_since(self.position, 1000)
        with self.lock:
            for ch in changes:
                if isinstance(ch.record, Campaign):
                    created = ch.committed_at.timestamp() if ch.version == 1 else None
                    self._upsert(ch.record, created_at=created)
                self.position = max(self.position, ch.seq)
        new = [ch.record for ch in changes
               if isinstance(ch.record, Campaign) and ch.version == 1]
        if new:
            self._read_billed(new)
            self._shape_new([c.id for c in new])
        return len(changes)

    def _shape_new(self, campaign_ids: list[int]) -> None:
        """New campaigns start from the placement average (their first day keeps the
        default curve it was made with). Within the hour window of the last shape
        refresh the average it made is given to those still without a shape, without
        reading the traffic log again: in the embedded process, where the traffic log is
        written only just before a refresh, that is what a refresh would give them (and
        every other campaign keeps what it has); a fleet shard's servers may have logged
        more since, which the next scheduled refresh reads. Past the window, a refresh."""
        if self.traffic is None:
            return
        last = self._last_shapes
        if last is None or last[0] != window_start(self.clock.now()):
            self.refresh_shapes()
            return
        with self.lock:
            ids = np.array([c for c in campaign_ids if not self.service.has_shape(c)],
                           dtype=np.int64)
            if len(ids):
                self.service.set_traffic_shapes(ids, np.tile(last[1], (len(ids), 1)))

    def feed_billed(self) -> int:
        """Every owned campaign's billed total of its current local day, in bulk (the
        ledger is read outside the lock)."""
        with self.lock:
            owned = self.service.owned()
        cols = self.feeder.columns(owned, self.clock.now())
        with self.lock:
            return self.service.record_billed_bulk(cols)

    def apply_local(self, change: ChangeRecord) -> None:
        """A write committed in this process: apply it now, ahead of the change log."""
        if isinstance(change.record, Campaign):
            created = change.committed_at.timestamp() if change.version == 1 else None
            with self.lock:
                self._upsert(change.record, created_at=created)
            if created is not None:
                self._read_billed([change.record])

    def _read_billed(self, new: list[Campaign]) -> None:
        """New campaigns' billed spend now (normally none), so they need not wait for
        the next feed before a first slice. The ledger is read outside the lock."""
        updates = self.feeder.updates(new, self.clock.now())
        with self.lock:
            for u in updates:
                self.service.record_billed(u)

    def _upsert(self, c: Campaign, created_at: float | None = None) -> None:
        self.service.upsert_campaign(c, created_at=created_at)

    def refresh_shapes(self) -> int:
        """Target-curve shapes from the last 7 days of eligible requests (DESIGN.md
        §Pacing), in bulk; campaigns without enough history (and new ones) get the
        placement average. Returns how many campaigns have a shape of their own."""
        if self.traffic is None:
            return 0
        now = self.clock.now()
        since = window_start(now)
        traffic = self.traffic.by_utc_hour(since, hour_start(now))
        with self.lock:
            owned = self.service.owned()
        ids, matrix, average = shape_matrix(owned.ids, owned.tz, owned.zones, traffic, now)
        with self.lock:
            self.service.set_traffic_shapes(ids, matrix, others=average)
        self._last_shapes = (since, np.array(average, dtype=np.float64))
        return len(ids)

    def start(self) -> None:
        """Read campaigns, shapes and the day's billed spend, then run the schedule."""
        self.load()
        self.ticker.run_due()
        self.ticker.start()
        self.lam_ticker.start()

    def stop(self) -> None:
        """Stop the schedule and write the λ that moved since the last write (a failed
        write is logged: a stop is never refused for it)."""
        self.ticker.stop()
        self.lam_ticker.stop()
        try:
            self.save_lams()
        except Exception:
            log.exception("budget service: λ not written at stop")


async def _metrics(_: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def _status_of(cid: int, cd: CampaignDay, now: float) -> dict[str, object]:
    return {
        "campaign_id": cid, "day": cd.day.isoformat(), "state": cd.state.value,
        "status": cd.status.value, "p": round(cd.ctl.p, 6), "lam": round(cd.lam, 6),
        "budget_micros": cd.daily_budget_micros, "billed_micros": cd.billed,
        "committed_micros": cd.committed(now), "slices_open": len(cd.slices),
    }
