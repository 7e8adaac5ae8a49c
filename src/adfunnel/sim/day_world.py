"""The day simulation's world: the virtual clock and event heap, the budget shards, the
ad servers' budget clients and the transport between them.

Only the clock (:class:`~adfunnel.clock.ManualClock`, set to each event's time) and the
transport (in memory, with message delays, shard outages and dead servers) are the
simulation's own; each ad server has the production
:class:`~adfunnel.budget.client.BudgetClient`, each shard is a production
:class:`~adfunnel.budget.service.BudgetService`. The layers above add the ledger
(:mod:`adfunnel.sim.day_billing`), the traffic (:mod:`adfunnel.sim.day_traffic`) and the
scenario's script (:mod:`adfunnel.sim.day`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.day_rows import CampaignDay
from adfunnel.budget.protocol import Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BillableEvent, Campaign, Objective, PacingMode
from adfunnel.campaigns.schedule import day_bounds
from adfunnel.clock import ManualClock
from adfunnel.pacing.curve import hourly_to_minutely
from adfunnel.sim.day_track import Track, mean_expected
from adfunnel.sim.scenarios import Scenario
from adfunnel.sim.traffic import ipinyou_hourly, normalised


class _Net:
    """In-memory transport with delays, shard outages and dead servers."""

    def __init__(self, sim: DayWorld, server: int) -> None:
        self.sim = sim
        self.server = server

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        sim = self.sim
        if not sim.alive[self.server]:
            return
        t = sim.now + sim.delay()
        sim.push(t, sim.deliver_report, (self.server, report, on_reply))


class DayWorld:
    """One scenario's simulated window, below its ledger and traffic: the event heap, the
    ad servers' budget clients, the budget shards and each campaign's :class:`Track`."""

    def __init__(self, sc: Scenario, seed: int, short: bool) -> None:
        self.sc = sc
        self.rng = np.random.default_rng(seed)
        self.short = short
        self.heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = itertools.count()
        starts, ends = [], []
        for c in sc.campaigns:
            s, e = day_bounds(sc.day, c.time_zone)
            starts.append(s)
            ends.append(e)
        if short and sc.short_window:
            self.start, self.end = sc.short_window
        else:
            self.start, self.end = min(starts), max(ends)
        self.now = self.start.timestamp()
        self.clock = ManualClock(self.start)
        shape = normalised(ipinyou_hourly())
        self.shape = shape
        self.tracks: dict[int, Track] = {}
        for c in sc.campaigns:
            camp = Campaign(
                id=c.id, advertiser_id=c.id, name=f"c{c.id}", objective=Objective.CLICKS,
                bid_type=c.bid_type, bid_micros=c.bid_micros, daily_budget_micros=c.budget_micros,
                time_zone=c.time_zone, flight_start=sc.day - timedelta(days=2),
                pacing_mode=c.pacing, bid_strategy=c.strategy,
                # the day simulation bills served impressions directly (no beacons, no
                # viewability measured): as campaigns billed on render
                billable_event=BillableEvent.RENDERED,
            )
            hist = c.history or shape
            mins = hourly_to_minutely(hist)
            mean_h = sum(hist) / 24.0
            mult = [v * 60.0 / mean_h for v in mins]
            if c.landscape:
                rate = c.requests_per_day / 86400.0
            else:
                rate = c.budget_micros * c.potential / (86400.0 * c.win * mean_expected(c))
            self.tracks[c.id] = Track(c, camp, mult, rate, server_active=[True] * sc.servers)
        self.services = [self._fresh_service(i) for i in range(sc.shards)]
        self.alive = [True] * sc.servers
        self.clients = [
            BudgetClient(f"sim-{i}", self.clock, _Net(self, i), shards=sc.shards)
            for i in range(sc.servers)
        ]
        self.down: list[list[tuple[float, float]]] = [[] for _ in range(sc.shards)]
        for shard, at, secs in sc.outages:
            self.down[shard].append((at.timestamp(), at.timestamp() + secs))

    # -- plumbing -------------------------------------------------------------------------
    def _fresh_service(self, shard: int) -> BudgetService:
        """A shard process as it boots: campaign records and traffic shapes from their
        stores, nothing else (no spend, slices, rates or yesterday's p)."""
        svc = BudgetService(self.clock, shard=shard, shards=self.sc.shards,
                            default_shape=self.shape,
                            control_interval_s=self.sc.control_interval_s)
        svc.on_step = self._on_step
        for tr in self.tracks.values():
            svc.upsert_campaign(tr.campaign)
            svc.set_traffic_shape(tr.campaign.id, tr.sc.history or self.shape)
        return svc

    def service_for(self, cid: int) -> BudgetService:
        """The shard that owns campaign ``cid``."""
        return self.services[cid % self.sc.shards]

    def push(self, t: float, fn: Callable[..., None], args: tuple[Any, ...] = ()) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), fn, args))

    def delay(self) -> float:
        lo, hi = self.sc.message_delay_s
        return lo + (hi - lo) * float(self.rng.random())

    def _set(self, t: float) -> None:
        self.now = t
        self.clock.set(datetime.fromtimestamp(t, tz=UTC))

    def _shard_down(self, shard: int, t: float) -> bool:
        return any(a <= t < b for a, b in self.down[shard])

    def deliver_report(self, server: int, report: Report,
                       on_reply: Callable[[Reply], None]) -> None:
        if self._shard_down(report.shard, self.now):
            return
        reply = self.services[report.shard].handle_report(report)
        self.push(self.now + self.delay(), self.deliver_reply, (server, on_reply, reply))

    def deliver_reply(self, server: int, on_reply: Callable[[Reply], None], reply: Reply) -> None:
        if self.alive[server]:
            on_reply(reply)

    def _on_step(self, cd: CampaignDay, now: float) -> None:
        """A shard's control step for ``cd``: note p, state and target (and λ)."""
        tr = self.tracks[cd.campaign.id]
        p = 0.0 if cd.state is BudgetState.STOPPED else (
            1.0 if cd.campaign.pacing_mode is PacingMode.ACCELERATED else cd.ctl.p)
        tr.steps.append((now, p, cd.state.value, cd.plan.target_micros(now - cd.start_s),
                         cd.plan.budget_micros, cd.day.toordinal()))
        if tr.rng is not None:
            tr.lam_steps.append((now, cd.lam))

    def report(self, server: int) -> None:
        if self.alive[server]:
            self.clients[server].report(self.now)

    def _control(self, shard: int) -> None:
        if not self._shard_down(shard, self.now):
            self.services[shard].step()
