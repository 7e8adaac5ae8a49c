"""The day simulation's engine: production budget service, controller and budget clients
on a virtual clock, driven through one scenario's window.

A discrete-event simulation (DESIGN.md §Money and budgets; issue "day simulation"):
N simulated ad servers, each with its own :class:`~adfunnel.budget.client.BudgetClient`
(local spend, slices, report sequence), budget shards each a
:class:`~adfunnel.budget.service.BudgetService`, the production
:class:`~adfunnel.billing.ledger.MemoryLedger`, message delays, billing lag, click and
conversion delays. Controllers start as production's do: a fresh service has no
yesterday, so every campaign starts its day at p = 1 (a restarted shard likewise).

:class:`DaySim` is built in layers, one module each: the world (clock, event heap,
shards, clients, transport: :mod:`adfunnel.sim.day_world`), its billing
(:mod:`adfunnel.sim.day_billing`), its traffic and serves
(:mod:`adfunnel.sim.day_traffic`), and here the scenario's script — budget edits,
pauses, forced serves, a shard restart, a server crash — and the run loop that ticks
reports, control steps and the billed feed each simulated second. What is observed of
each campaign is its :class:`~adfunnel.sim.day_track.Track`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from datetime import time as dtime
from typing import Any

from adfunnel.campaigns.model import CampaignStatus
from adfunnel.campaigns.schedule import local_day, zone
from adfunnel.sim.day_track import Track
from adfunnel.sim.day_traffic import DayTraffic
from adfunnel.sim.scenarios import Scenario


class DaySim(DayTraffic):
    """One scenario's simulated window: the event heap, the ad servers' budget clients,
    the budget shards, the ledger and each campaign's :class:`Track`, run to its end."""

    def __init__(self, sc: Scenario, seed: int, short: bool) -> None:
        super().__init__(sc, seed, short)
        self.restarted: dict[str, Any] | None = None
        self.crashed_at: float | None = None
        self.crash_slices: int = 0

    # -- the scenario's script --------------------------------------------------------------
    def edit(self, cid: int, budget: int) -> None:
        tr = self.tracks[cid]
        tr.campaign = replace(tr.campaign, daily_budget_micros=budget,
                              version=tr.campaign.version + 1)
        for s in self.services:
            s.upsert_campaign(tr.campaign)

    def set_status(self, cid: int, status: CampaignStatus) -> None:
        """An advertiser's pause/resume: the change log carries it to the budget service
        and, each after its own delay, to every ad server's campaign store."""
        tr = self.tracks[cid]
        tr.campaign = replace(tr.campaign, status=status, version=tr.campaign.version + 1)
        tr.paused_at = self.now if status is not CampaignStatus.ACTIVE else None
        for s in self.services:
            s.upsert_campaign(tr.campaign)
        lo, hi = self.sc.change_delay_s
        for i in range(self.sc.servers):
            d = lo + (hi - lo) * float(self.rng.random())
            self.push(self.now + d, self._server_status, (tr, i, status))

    def _server_status(self, tr: Track, server: int, status: CampaignStatus) -> None:
        tr.server_active[server] = status is CampaignStatus.ACTIVE

    def forced(self, cid: int, n: int) -> None:
        tr = self.tracks[cid]
        at = datetime.fromtimestamp(self.now, tz=UTC)
        for _ in range(n):
            self._try_serve(0, tr, at, local_day(at, tr.campaign.time_zone))

    def report(self, server: int) -> None:
        if self.alive[server]:
            self.clients[server].report(self.now)

    def restart(self, shard: int) -> None:
        """Replace shard ``shard``'s process by a fresh one (reports and the billed feed
        reach the new one from now on); note what each campaign had spent then."""
        at = datetime.fromtimestamp(self.now, tz=UTC)
        spent: dict[int, float] = {}
        serves: dict[int, int] = {}
        for cid, tr in self.tracks.items():
            if cid % self.sc.shards != shard:
                continue
            day = local_day(at, tr.campaign.time_zone)
            billed = self.ledger.billed_on(day).get(cid, 0)
            spent[cid] = round(billed / tr.campaign.daily_budget_micros, 4)
            serves[cid] = tr.serves
        self.services[shard] = self._fresh_service(shard)
        self.restarted = {"shard": shard, "at": self.now, "billed_share_at_restart": spent,
                          "serves_at_restart": serves}

    def maybe_crash(self) -> None:
        if self.crashed_at is not None or not self.alive[1 % self.sc.servers]:
            return
        held = self.clients[1 % self.sc.servers].held_slices()
        if held:
            self.alive[1 % self.sc.servers] = False
            self.crashed_at = self.now
            self.crash_slices = len(held)

    # -- run ------------------------------------------------------------------------------
    def run(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Simulate the window; ``progress(done, total)`` is told the simulated seconds
        done once per simulated minute."""
        sc = self.sc
        t0, t1 = int(self.start.timestamp()), int(self.end.timestamp())
        for e in sc.edits:
            tr = self.tracks[e.campaign_id]
            loc = datetime.combine(sc.day, dtime(*e.local_hm), tzinfo=zone(tr.campaign.time_zone))
            self.push(loc.timestamp(), self.edit, (e.campaign_id, e.new_budget_micros))
        for pz in sc.pauses:
            z = zone(self.tracks[pz.campaign_id].campaign.time_zone)
            loc = datetime.combine(sc.day, dtime(*pz.local_hm), tzinfo=z)
            self.push(loc.timestamp(), self.set_status, (pz.campaign_id, CampaignStatus.PAUSED))
            if pz.resume_hm is not None:
                loc = datetime.combine(sc.day, dtime(*pz.resume_hm), tzinfo=z)
                self.push(loc.timestamp(), self.set_status,
                          (pz.campaign_id, CampaignStatus.ACTIVE))
        for c in sc.campaigns:
            for h, m, n in c.forced:
                loc = datetime.combine(sc.day, dtime(h, m), tzinfo=zone(c.time_zone))
                self.push(loc.timestamp() + 0.3, self.forced, (c.id, n))
        if self.short:
            self.seed_short()
        if sc.restart is not None:
            rs = sc.restart
            loc = datetime.combine(sc.day, dtime(*rs.local_hm), tzinfo=zone(rs.time_zone))
            self.push(loc.timestamp() + 0.5, self.restart, (rs.shard,))
        crash_t = sc.crash_server_after.timestamp() if sc.crash_server_after else None
        n = sc.servers
        ri = max(1, int(sc.report_interval_s))
        ci = max(1, int(sc.control_interval_s))
        bi = max(1, int(sc.billing_interval_s))
        heap = self.heap
        for sec in range(t0, t1):
            if progress is not None and (sec - t0) % 60 == 0:
                progress(sec - t0, t1 - t0)
            self.push(sec + 0.0, self.traffic)
            if (sec - t0) % ri == 0:
                for i in range(n):
                    self.push(sec + 0.1 + 0.8 * i / n, self.report, (i,))
            if (sec - t0) % ci == 0:
                for shard in range(len(self.services)):
                    self.push(sec + 0.93, self._control, (shard,))
            if (sec - t0) % bi == 5 % bi:
                self.push(sec + 0.97, self.feed)
            if crash_t is not None and sec >= crash_t:
                self.push(sec + 0.5, self.maybe_crash)
            end = sec + 1.0
            while heap and heap[0][0] < end:
                t, _, fn, args = heapq.heappop(heap)
                self._set(t)
                fn(*args)
