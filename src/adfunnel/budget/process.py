"""The budget & pacing service as its own process, and the ad server's side of it.

``BudgetServiceProcess`` runs one shard of :class:`BudgetService` next to two feeders:

- campaign records from the change log (``upsert_campaign``), so budget edits, pauses
  and new campaigns reach the service like they reach ad servers;
- billed spend from the ledger every ``billed_every_s`` seconds (≤ 10 s, DESIGN.md):
  cumulative billed micros per campaign and local day, replacing the estimates served
  before the watermark ``now - billing_lag_s``.

``ReportingBudgetClient`` is an ad server's :class:`BudgetClient` plus the thread that
reports once a second over HTTP.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import date, datetime, timedelta

from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.billing.ledger import Ledger
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.gate import NO_SLICE, Served
from adfunnel.budget.http import HttpReportTransport, create_app
from adfunnel.budget.protocol import BilledUpdate, Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.campaigns.store import SqlCampaignStore
from adfunnel.clock import Clock
from adfunnel.pacing.traffic_log import EligibleCounter, SqlTrafficLog, shapes, window_start
from adfunnel.periodic import Periodic

log = logging.getLogger(__name__)

#: Seconds between re-reads of the eligible-traffic log.
SHAPE_REFRESH_S = 300.0


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
        billing_lag_s: float = 60.0,
        poll_s: float = 0.25,
        engine: Engine | None = None,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self.engine = engine
        self.service = BudgetService(clock, shard=shard, shards=shards,
                                     control_interval_s=control_interval_s)
        self.lock = threading.Lock()
        self.control_interval_s = control_interval_s
        self.billed_every_s = billed_every_s
        self.billing_lag_s = billing_lag_s
        self.poll_s = poll_s
        self.position = 0
        self._campaigns: dict[int, Campaign] = {}
        self.traffic = SqlTrafficLog(engine) if engine is not None else None
        self._loops: list[Periodic] = []

    def app(self) -> Starlette:
        """The shard's HTTP app plus ``GET /v1/status`` (budget state, p and pacing status
        per campaign on its current local day)."""
        app = create_app(self.service, control_loop_s=self.control_interval_s, lock=self.lock)
        app.router.routes.append(Route("/v1/status", self._status, methods=["GET"]))
        return app

    def status(self) -> list[dict[str, object]]:
        now = self.clock.now().timestamp()
        out = []
        with self.lock:
            for cid in sorted(self._campaigns):
                cd = self.service.current(cid, now) if self.service.owns(cid) else None
                if cd is None:
                    continue
                out.append({
                    "campaign_id": cid, "day": cd.day.isoformat(), "state": cd.state.value,
                    "status": cd.status.value, "p": round(cd.ctl.p, 6),
                    "budget_micros": cd.campaign.daily_budget_micros, "billed_micros": cd.billed,
                    "committed_micros": cd.committed(now), "slices_open": len(cd.slices),
                })
        return out

    async def _status(self, _: Request) -> Response:
        return JSONResponse(self.status())

    def load(self) -> None:
        _, campaigns, _, last_seq = self.store.snapshot()
        with self.lock:
            for c in campaigns:
                self._upsert(c)
            self.position = last_seq

    def poll_changes(self) -> int:
        changes = self.store.changes_since(self.position, 1000)
        with self.lock:
            for ch in changes:
                if isinstance(ch.record, Campaign):
                    created = ch.committed_at.timestamp() if ch.version == 1 else None
                    self._upsert(ch.record, created_at=created)
                self.position = max(self.position, ch.seq)
        if any(isinstance(ch.record, Campaign) and ch.version == 1 for ch in changes):
            self.refresh_shapes()  # a new campaign starts from the placement average
        return len(changes)

    def feed_billed(self) -> int:
        """Send every owned campaign's billed total of its current local day."""
        now = self.clock.now()
        watermark = now - timedelta(seconds=self.billing_lag_s)
        by_day: dict[date, tuple[dict[int, int], dict[int, int]]] = {}
        updates = []
        for cid, c in list(self._campaigns.items()):
            if not self.service.owns(cid):
                continue
            day = local_day(now, c.time_zone)
            if day not in by_day:
                by_day[day] = (self.ledger.billed_on(day), self.ledger.billed_since(day, watermark))
            billed, after = by_day[day]
            # billed_after: billed spend of serves still counted in flight, so a billed
            # click is not also counted as expected cost. The ledger keeps beacon time,
            # which stands in for serve time: a beacon just after the watermark may belong
            # to a serve just before it, which overstates this by at most the billing of
            # one serve-to-beacon delay (the ledger still never bills above the budget).
            updates.append(BilledUpdate(cid, day.isoformat(), billed.get(cid, 0),
                                        watermark.timestamp(), after.get(cid, 0)))
        with self.lock:
            for u in updates:
                self.service.record_billed(u)
        return len(updates)

    def _upsert(self, c: Campaign, created_at: float | None = None) -> None:
        self._campaigns[c.id] = c
        self.service.upsert_campaign(c, created_at=created_at)

    def refresh_shapes(self) -> int:
        """Target-curve shapes from the last 7 days of eligible requests (DESIGN.md
        §Pacing); new campaigns get the placement average."""
        if self.traffic is None:
            return 0
        traffic = self.traffic.hourly(window_start(self.clock.now()))
        zones = {cid: c.time_zone for cid, c in self._campaigns.items()}
        by_campaign = shapes(traffic, zones)
        with self.lock:
            for cid, shape in by_campaign.items():
                if any(shape):
                    self.service.set_traffic_shape(cid, shape)
        return len(by_campaign)

    def start(self) -> None:
        self.load()
        self.refresh_shapes()
        self._loops = [
            Periodic(self.poll_changes, self.poll_s, "budget-changes").start(),
            Periodic(self.feed_billed, self.billed_every_s, "budget-billed").start(),
            Periodic(self.refresh_shapes, SHAPE_REFRESH_S, "budget-shapes").start(),
        ]

    def stop(self) -> None:
        for loop in self._loops:
            loop.stop()


class ReportingBudgetClient(BudgetClient):
    """A :class:`BudgetClient` over HTTP that reports once a second from a thread."""

    def __init__(self, clock: Clock, service_urls: list[str], *, report_every_s: float = 1.0,
                 server_id: str | None = None) -> None:
        """``service_urls[shard]`` serves that shard; reports every ``report_every_s`` s."""
        self.http_transport = HttpReportTransport(service_urls)
        super().__init__(server_id or f"ads-{uuid.uuid4().hex[:12]}", clock, self.http_transport,
                         shards=len(service_urls))
        self._reporter = Periodic(self.report, report_every_s, "budget-report")

    def start(self) -> None:
        self.report()  # learn states and p before the first decision
        self._reporter.start()

    def stop(self) -> None:
        self._reporter.stop()
        self.http_transport.close()


class _DirectTransport:
    """Reports straight into an in-process shard (under its lock)."""

    def __init__(self, process: BudgetServiceProcess) -> None:
        self.process = process

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        with self.process.lock:
            reply = self.process.service.handle_report(report)
        on_reply(reply)


class InProcessBudget:
    """The budget & pacing service inside the ad-server process (the embedded default).

    The same production pieces as the fleet — :class:`BudgetService`, its change-log and
    ledger feeders, and a :class:`BudgetClient` as the spend gate — but ticked by domain
    time instead of threads: a decision that finds ``report_every_s`` (1 s) of domain
    time passed first polls the change log and reports, and so on for the ledger feed
    and the control step. The outcome then depends only on the sequence of requests, so
    a replay on a manual clock is deterministic.
    """

    def __init__(self, store: SqlCampaignStore, ledger: Ledger, clock: Clock, *,
                 engine: Engine | None = None, report_every_s: float = 1.0,
                 control_interval_s: float = 10.0, billed_every_s: float = 5.0,
                 billing_lag_s: float = 60.0) -> None:
        self.process = BudgetServiceProcess(
            store, ledger, clock, control_interval_s=control_interval_s,
            billed_every_s=billed_every_s, billing_lag_s=billing_lag_s, engine=engine)
        self.client = BudgetClient("embedded", clock, _DirectTransport(self.process))
        self.clock = clock
        self.eligible = EligibleCounter()  # filled by the decider, flushed on the tick
        self._traffic = SqlTrafficLog(engine) if engine is not None else None
        self._every = {"report": report_every_s, "billed": billed_every_s,
                       "step": control_interval_s, "shapes": SHAPE_REFRESH_S}
        self._due: dict[str, float] = {}
        self._asked: dict[int, float] = {}
        self._lock = threading.Lock()
        self.process.load()
        self.process.refresh_shapes()
        self.tick(clock.now().timestamp())

    def tick(self, t: float) -> None:
        """Run whatever is due at domain time ``t`` (Unix s)."""
        with self._lock:
            due = [k for k, every in self._every.items() if t >= self._due.get(k, 0.0)]
            for k in due:
                self._due[k] = t + self._every[k]
        if "report" in due:
            self.process.poll_changes()
            self.client.report(t)
        if "billed" in due:
            self.process.feed_billed()
        if "step" in due:
            with self.process.lock:
                self.process.service.step()
        if "shapes" in due:
            if self._traffic is not None:
                self._traffic.add(self.eligible.drain())
            self.process.refresh_shapes()

    # -- SpendGate ------------------------------------------------------------------------
    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        t = now.timestamp()
        self.tick(t)
        reason = self.client.admit(campaign, now, max_charge_micros)
        if reason == NO_SLICE and self._asked.get(campaign.id) != t:
            # the service is in this process: ask for the slice now rather than at the
            # next report (once per campaign and instant, so a refusal costs one round)
            self._asked[campaign.id] = t
            self.process.poll_changes()
            self.client.report(t)
            reason = self.client.admit(campaign, now, max_charge_micros)
        return reason

    def pacing_rate(self, campaign_id: int) -> float:
        return self.client.pacing_rate(campaign_id)

    def record_served(self, served: Served) -> None:
        self.client.record_served(served)

    def record_billed(self, campaign_id: int, day: date, billed_micros: int, impression_id: str,
                      settles: bool) -> None:
        """Billed spend reaches the service from the ledger feed."""

    def status(self) -> list[dict[str, object]]:
        return self.process.status()
