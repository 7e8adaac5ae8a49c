"""The budget & pacing service as its own process, and the ad server's side of it.

``BudgetServiceProcess`` runs one shard of :class:`BudgetService` next to two feeders:

- campaign records from the change log (``upsert_campaign``), so budget edits, pauses
  and new campaigns reach the service like they reach ad servers;
- billed spend from the ledger every ``billed_every_s`` seconds (≤ 10 s, DESIGN.md)
  through :class:`~adfunnel.budget.feed.BilledFeeder`: cumulative billed micros per
  campaign and local day, replacing the estimates of serves whose billing window closed.

Every schedule here runs on the injected clock (:class:`~adfunnel.periodic.Ticker`).
At start the shard reads the campaigns and the day's billed spend before it answers;
it grants nothing until warm (``adfunnel.budget.service``).

Start-up and the periodic feeds read in bulk, never per campaign: the campaign table's
budget columns in one query straight into the service's columns
(:func:`read_campaign_columns`, no record objects), billed spend with one ledger query
per local day (:meth:`BilledFeeder.columns`), traffic shapes with one aggregate query
(:meth:`SqlTrafficLog.by_utc_hour`).

``ReportingBudgetClient`` is an ad server's :class:`BudgetClient` plus the thread that
reports once a second over HTTP.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import date, datetime

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import ColumnElement, Date, Engine, Integer, case, cast, func, literal, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.billing.ledger import Ledger
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.days import add_day_routes
from adfunnel.budget.feed import TOKEN_TTL_S, BilledFeeder
from adfunnel.budget.gate import NO_SLICE, Served
from adfunnel.budget.http import MAX_BODY_BYTES, HttpReportTransport, create_app
from adfunnel.budget.protocol import Reply, Report
from adfunnel.budget.service import (
    BID_TYPES,
    NO_END,
    WARMUP_S,
    BudgetService,
    CampaignColumns,
    CampaignDay,
)
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.campaigns.model import Campaign, CampaignStatus, ChangeRecord, PacingMode
from adfunnel.campaigns.schedule import local_day
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.campaigns.tables import campaigns as campaigns_table
from adfunnel.clock import Clock, ManualClock
from adfunnel.db import connection_guard
from adfunnel.observability.metrics import CAMPAIGNS, METRICS_TOP_CAMPAIGNS
from adfunnel.pacing.traffic_log import (
    EligibleCounter,
    SqlTrafficLog,
    shape_matrix,
    window_start,
)
from adfunnel.periodic import Job, Ticker

log = logging.getLogger(__name__)

#: Seconds between re-reads of the eligible-traffic log.
SHAPE_REFRESH_S = 300.0


def read_campaign_columns(engine: Engine) -> CampaignColumns:
    """Every campaign's budget fields as columns (no record objects: at 10⁶ campaigns
    making them alone takes longer than the whole start may). Two queries: the time
    zones in use, then one row of integers per campaign (the database turns codes and
    dates into integers), fetched through the driver's cursor into one int64 matrix."""
    t = campaigns_table.c
    with connection_guard(engine), engine.connect() as conn:
        zones = [z for (z,) in conn.execute(select(t.time_zone).distinct())]
        q = select(
            t.id, t.version, _code(t.bid_type, [b.value for b in BID_TYPES]), t.bid_micros,
            t.daily_budget_micros, func.coalesce(t.lifetime_budget_micros, -1),
            _code(t.status, [CampaignStatus.ACTIVE.value], 1),
            _code(t.pacing_mode, [PacingMode.ACCELERATED.value, PacingMode.EVEN.value], 2),
            _ordinal(engine, t.flight_start),
            func.coalesce(_ordinal(engine, t.flight_end), NO_END),
            _code(t.time_zone, zones))
        sql = str(q.compile(engine, compile_kwargs={"literal_binds": True}))
        cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cur.execute(sql)
            rows = cur.fetchall()
        finally:
            cur.close()
    m = np.array(rows, dtype=np.int64).reshape(len(rows), 11)
    pacing = m[:, 7]
    return CampaignColumns(
        ids=m[:, 0].copy(), versions=m[:, 1].copy(), bid=m[:, 2].astype(np.int8),
        bid_micros=m[:, 3].copy(), daily=m[:, 4].copy(), lifetime=m[:, 5].copy(),
        active=m[:, 6] == 0, even=pacing == 1, accel=pacing == 0,
        fstart=m[:, 8].copy(), fend=m[:, 9].copy(), tz=m[:, 10].copy(), zones=zones)


def _code(col: ColumnElement[str], values: list[str], other: int | None = None,
          ) -> ColumnElement[int]:
    """``values.index(col)`` in SQL (``other``, default ``len(values)``, for the rest)."""
    if not values:
        return literal(0)
    return case(*((col == v, i) for i, v in enumerate(values)),
                else_=len(values) if other is None else other)


def _ordinal(engine: Engine, col: ColumnElement[date]) -> ColumnElement[int]:
    """``date.toordinal()`` of a DATE column in SQL (NULL stays NULL)."""
    if engine.dialect.name == "postgresql":
        return cast(col - literal(date(1, 1, 1), Date), Integer) + 1
    return cast(func.julianday(col) - 1721424.5, Integer)


class BudgetServiceProcess:
    """One shard with its change-log and ledger feeders (threads sharing one lock)."""

    def __init__(
        self,
        store: SqlCampaignStore,
        ledger: Ledger,
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
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self.engine = engine
        self.service = BudgetService(clock, shard=shard, shards=shards,
                                     control_interval_s=control_interval_s, warmup_s=warmup_s,
                                     expected_servers=expected_servers)
        self.feeder = BilledFeeder(ledger, token_ttl_s=token_ttl_s)
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

    def app(self, token: str, *, max_body_bytes: int = MAX_BODY_BYTES) -> Starlette:
        """The shard's HTTP app plus ``GET /v1/status`` (budget state, p and pacing status
        per campaign on its current local day), ``GET /metrics`` (Prometheus, with the
        per-campaign series of :mod:`adfunnel.observability.metrics`) and the
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
            self.service.load_campaigns(cols)
            self.service.campaign_loader = self.store.get_campaign
            self.position = last_seq

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
        traffic = self.traffic.by_utc_hour(since)
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

    def stop(self) -> None:
        self.ticker.stop()


async def _metrics(_: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def _status_of(cid: int, cd: CampaignDay, now: float) -> dict[str, object]:
    return {
        "campaign_id": cid, "day": cd.day.isoformat(), "state": cd.state.value,
        "status": cd.status.value, "p": round(cd.ctl.p, 6),
        "budget_micros": cd.daily_budget_micros, "billed_micros": cd.billed,
        "committed_micros": cd.committed(now), "slices_open": len(cd.slices),
    }


class ReportingBudgetClient(BudgetClient):
    """A :class:`BudgetClient` over HTTP that reports once a second from a thread."""

    def __init__(self, clock: Clock, service_urls: list[str], *, token: str,
                 report_every_s: float = 1.0, server_id: str | None = None) -> None:
        """``service_urls[shard]`` serves that shard; reports every ``report_every_s`` s
        with the internal ``token``."""
        self.http_transport = HttpReportTransport(service_urls, token=token)
        super().__init__(server_id or f"ads-{uuid.uuid4().hex[:12]}", clock, self.http_transport,
                         shards=len(service_urls))
        self._reporter = Ticker(clock, [Job("report", report_every_s, self.report)],
                                name="budget-report", poll_s=min(0.1, report_every_s))

    def start(self) -> None:
        self._reporter.run_due()  # learn states and p before the first decision
        self._reporter.start()

    def stop(self) -> None:
        self._reporter.stop()
        self.http_transport.close()


class _DirectTransport:
    """Reports straight into an in-process shard (under its lock). A report sent from
    a thread inside :meth:`bounded` waits at most that long (wall seconds) for the lock
    and is otherwise not sent: its entries stay pending, as after a failed send."""

    def __init__(self, process: BudgetServiceProcess) -> None:
        self.process = process
        self._wait = threading.local()
        self.skipped = 0  # reports not sent: the shard was busy past the bound

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        wait_s: float | None = getattr(self._wait, "s", None)
        lock = self.process.lock
        if not lock.acquire(timeout=-1 if wait_s is None else wait_s):
            self.skipped += 1
            return
        try:
            reply = self.process.service.handle_report(report)
        finally:
            lock.release()
        on_reply(reply)

    def bounded(self, wait_s: float | None) -> _Bounded:
        """Within ``with``: this thread's reports wait at most ``wait_s`` (None: no bound)."""
        return _Bounded(self._wait, wait_s)


class _Bounded:
    def __init__(self, local: threading.local, wait_s: float | None) -> None:
        self.local, self.wait_s = local, wait_s

    def __enter__(self) -> None:
        self.local.s = self.wait_s

    def __exit__(self, *exc: object) -> None:
        self.local.s = None


#: The embedded default's one ad server, as the in-process service knows it.
EMBEDDED_SERVER = "embedded"
#: Longest wait (wall seconds) of a decision's slice ask for the in-process service on
#: the system clock: while a control step or a report holds the service, the ask is
#: left to the next report. On a manual clock (replays, simulations) the ask waits, so
#: what a replay decides never depends on the machine's timing.
ASK_WAIT_S = 0.005


class InProcessBudget:
    """The budget & pacing service inside the ad-server process (the embedded default).

    The same production pieces as the fleet — :class:`BudgetService`, its change-log and
    ledger feeders, and a :class:`BudgetClient` as the spend gate — scheduled on domain
    time by a :class:`~adfunnel.periodic.Ticker`, off the request path: a daemon thread
    runs what is due (report once a second, billed feed, control step, traffic shapes),
    and a :class:`~adfunnel.clock.ManualClock` runs it synchronously each time it is
    moved, so a replay on a manual clock is deterministic. A decision only reads
    in-memory state; when a metered campaign has no slice it asks the in-process service
    for one at once (memory only, no I/O): on the system clock all of a decision's
    asks in one round (:meth:`ask_many`), on a manual clock one campaign at a time.

    Writes made through ``store`` in this process reach the service at once; others'
    through the change log.
    """

    def __init__(self, store: SqlCampaignStore, ledger: Ledger, clock: Clock, *,
                 engine: Engine | None = None, report_every_s: float = 1.0,
                 control_interval_s: float = 10.0, billed_every_s: float = 5.0,
                 token_ttl_s: float = TOKEN_TTL_S, poll_s: float = 0.1,
                 background: bool = True) -> None:
        self.process = BudgetServiceProcess(
            store, ledger, clock, control_interval_s=control_interval_s,
            billed_every_s=billed_every_s, token_ttl_s=token_ttl_s, engine=engine,
            expected_servers={EMBEDDED_SERVER})
        self._transport = _DirectTransport(self.process)
        self.client = BudgetClient(EMBEDDED_SERVER, clock, self._transport)
        self.clock = clock
        self._ask_wait_s = None if isinstance(clock, ManualClock) else ASK_WAIT_S
        self.eligible = EligibleCounter()  # filled by the decider, flushed by the ticker
        self._traffic = SqlTrafficLog(engine) if engine is not None else None
        self._refused_at: dict[int, float] = {}  # campaign -> instant of a refused ask
        self.ticker = Ticker(clock, [
            Job("report", report_every_s, self._report),
            Job("billed", billed_every_s, self.process.feed_billed),
            Job("step", control_interval_s, self.process.step),
            Job("shapes", SHAPE_REFRESH_S, self._shapes),
        ], name="embedded-budget", poll_s=poll_s)
        store.subscribe(self.process.apply_local)
        self.process.load()
        self.ticker.run_due()  # campaigns, the day's billed spend, a first report
        self.client.report()  # names the service's epoch: the service is warm
        if isinstance(clock, ManualClock):
            clock.on_move(lambda at: self.ticker.run_due(at.timestamp()))
        if background:
            self.ticker.start()

    def tick(self, t: float | None = None) -> list[str]:
        """Run whatever is due at domain time ``t`` (Unix s; default now)."""
        return self.ticker.run_due(t)

    def stop(self) -> None:
        self.ticker.stop()

    def _report(self) -> None:
        self.process.poll_changes()
        self.client.report()

    def _shapes(self) -> None:
        if self._traffic is not None:
            self._traffic.add(self.eligible.drain())
        self.process.refresh_shapes()

    # -- SpendGate ------------------------------------------------------------------------
    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        """The client's answer; a metered campaign without a slice asks the in-process
        service at once with a report round (the spend of this second so far, and the
        campaigns that want a slice): it costs what the report carries and the
        directives changed since the last reply, not the catalogue. On the system clock
        the round waits at most ``ASK_WAIT_S`` for a busy service (then the want goes
        with the next report)."""
        t = now.timestamp()
        reason = self.client.admit(campaign, now, max_charge_micros, count_refusal=False)
        if reason == NO_SLICE and self._refused_at.get(campaign.id) != t:
            # the service is in this process: ask for the slice now rather than at the
            # next report; after a refused ask, not again at the same instant (a
            # refusal costs one round), but a granted one may be followed by another
            with self._transport.bounded(self._ask_wait_s):
                self.client.report(t)
            reason = self.client.admit(campaign, now, max_charge_micros, count_refusal=False)
            if reason is not None:
                self._refused_at[campaign.id] = t
        if reason is not None:
            self.client.note_refusal(campaign.id, local_day(now, campaign.time_zone))
        return reason

    @property
    def asks_together(self) -> bool:
        """True on the system clock: a decision's slice asks share one report round
        (:meth:`ask_many`); on a manual clock each is asked alone, in order."""
        return self._ask_wait_s is not None

    def ask_many(self, campaigns: Sequence[Campaign], now: datetime,
                 charges: Sequence[int]) -> list[str | None]:
        """:meth:`admit` for many campaigns with one report round for all of them: those
        refused for want of a slice are asked for together (waiting at most
        ``ASK_WAIT_S`` for a busy service), then admitted again. At catalogue scale a
        decision meets thousands of campaigns never served yet (metered, no slice); a
        round each would cost the decision its deadline. Answers as :meth:`admit`."""
        t = now.timestamp()
        client = self.client
        reasons = [client.admit(c, now, ch, count_refusal=False)
                   for c, ch in zip(campaigns, charges, strict=True)]
        if NO_SLICE in reasons:
            with self._transport.bounded(self._ask_wait_s):
                client.report(t)
            reasons = [client.admit(c, now, ch, count_refusal=False) if r == NO_SLICE else r
                       for c, ch, r in zip(campaigns, charges, reasons, strict=True)]
        for c, r in zip(campaigns, reasons, strict=True):
            if r is not None:
                client.note_refusal(c.id, local_day(now, c.time_zone))
        return reasons

    def pacing_rate(self, campaign_id: int) -> float:
        return self.client.pacing_rate(campaign_id)

    @property
    def generation(self) -> int:
        return self.client.generation

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        """:class:`~adfunnel.budget.gate.BulkGate` (the client's bulk view)."""
        return self.client.bulk_admit(campaign_ids, day_ordinals, charges, budgets, t)

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        return self.client.bulk_pacing(campaign_ids)

    def record_served(self, served: Served) -> None:
        self.client.record_served(served)

    def record_billed(self, campaign_id: int, day: date, billed_micros: int, impression_id: str,
                      settles: bool) -> None:
        """Billed spend reaches the service from the ledger feed."""

    def status(self) -> list[dict[str, object]]:
        return self.process.status()

    def snapshot(self) -> BudgetSnapshot:
        """The in-process shard's :meth:`BudgetServiceProcess.snapshot`."""
        return self.process.snapshot()

    def pacing_summary(self) -> dict[str, object]:
        """Control steps run, lowest p given to an evenly paced campaign (None: no step
        has run), and per campaign and local day the admits refused for budget."""
        with self.process.lock:
            svc = self.process.service
            steps, p_min = svc.steps, svc.p_min
        with self.client._lock:
            refusals = dict(self.client.refusals)
        by_campaign: dict[str, dict[str, int]] = {}
        for (cid, day), n in sorted(refusals.items()):
            by_campaign.setdefault(str(cid), {})[day.isoformat()] = n
        return {"steps": steps, "p_min": p_min, "budget_refusals": by_campaign}
