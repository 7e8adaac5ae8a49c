"""The day simulation: production budget service, controller and budget clients on a
virtual clock.

A discrete-event simulation (DESIGN.md §Money and budgets; issue "day simulation"):
N simulated ad servers, each with its own :class:`~adfunnel.budget.client.BudgetClient`
(local spend, slices, report sequence), budget shards each a
:class:`~adfunnel.budget.service.BudgetService`, the production
:class:`~adfunnel.billing.ledger.MemoryLedger`, message delays, billing lag, click and
conversion delays. Only the clock (:class:`~adfunnel.clock.ManualClock`, set to each
event's time) and the transport (an in-memory one with delays, outages and crashes)
are the simulation's own; the auction is a stand-in (win with a fixed probability,
pay a uniform share of the bid), since budgets and pacing are what is measured.

Eligible requests per campaign follow its traffic shape (the iPinYou hour-of-day
curve unless the scenario says otherwise) in its local time, Poisson per server per
second. Controllers start as production's do: a fresh service has no yesterday, so
every campaign starts its day at p = 1 (a restarted shard likewise).

Evidence (``_campaign_result``): billed and absorbed overspend are read from the
ledger; ``potential_micros`` (what the campaign would spend at p = 1) is counted from
the eligible requests the simulation generated, independent of any controller;
``committed_shortfall_micros`` is computed from the simulation's own ledger of serves
and the events it sent (``_check_committed``), never from production's billing-window
rule or the service's billed figure; a figure that was not measured is ``None``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from pathlib import Path
from typing import Any

import numpy as np

from adfunnel.billing.batch import LedgerWrite
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.billing.model import EventType, LedgerEvent, Outcome, Recorded
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.day_rows import CampaignDay
from adfunnel.budget.feed import TOKEN_TTL_S, BilledFeeder
from adfunnel.budget.gate import Served
from adfunnel.budget.protocol import Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidType, Campaign, CampaignStatus, Objective, PacingMode
from adfunnel.campaigns.schedule import day_bounds, local_day, zone
from adfunnel.clock import ManualClock
from adfunnel.money import ceil_micros, cpm_to_impression
from adfunnel.pacing.controller import P_FLOOR
from adfunnel.pacing.curve import curve_for_day, hourly_to_minutely
from adfunnel.sim.scenarios import Scenario, SimCampaign, scenarios
from adfunnel.sim.traffic import ipinyou_hourly, normalised

RENDER_RATE = 0.97
#: Traffic allows the budget when the spend reachable at p = 1 is at least this multiple
#: of what the budget asks of the simulated window: 5 % for Poisson noise and for the
#: traffic after 23:30 local, which the target curve leaves unused.
TRAFFIC_ALLOWS_MARGIN = 1.05


@dataclass
class _Track:
    """What the simulation observes of one campaign."""

    sc: SimCampaign
    campaign: Campaign
    minute_mult: list[float]  # 1440 multipliers (mean 1) by local minute
    rate_mean: float  # eligible requests per second at multiplier 1
    steps: list[tuple[float, float, str, float, int, int]] = field(default_factory=list)
    spend_events: list[tuple[float, int]] = field(default_factory=list)  # (occurred, billed)
    billed: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    # the charge the simulation sent of every event the ledger made billable, by local
    # day, whatever its budget cap billed of it: what would be billed without the cap
    charged: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    last_serve: dict[date, float] = field(default_factory=dict)
    serves: int = 0
    # eligible requests by local day (every request the campaign could take part in at
    # p = 1 on a server whose store has it active): the basis of potential_micros
    eligible: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    # status of the campaign in each ad server's store (the serving path's filter)
    server_active: list[bool] = field(default_factory=list)
    paused_at: float | None = None
    # late-click scenarios, the simulation's own ledger: serves still able to bill,
    # imp -> (serve time, expected), the time each one's billable event reached the
    # ledger, what the events it sent had billed by local day at the last billed feed,
    # and the worst shortfall seen
    pending: dict[str, tuple[float, int]] | None = None
    settled_at: dict[str, float] = field(default_factory=dict)
    billed_at_feed: dict[date, int] = field(default_factory=dict)
    committed_shortfall: int = 0
    after_exhausted_s: float | None = None  # latest admit after the budget ran out
    after_pause_s: float | None = None  # latest admit after a pause


class _Net:
    """In-memory transport with delays, shard outages and dead servers."""

    def __init__(self, sim: _Sim, server: int) -> None:
        self.sim = sim
        self.server = server

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        sim = self.sim
        if not sim.alive[self.server]:
            return
        t = sim.now + sim.delay()
        sim.push(t, sim.deliver_report, (self.server, report, on_reply))


class _Sim:
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
        self.tracks: dict[int, _Track] = {}
        for c in sc.campaigns:
            camp = Campaign(
                id=c.id, advertiser_id=c.id, name=f"c{c.id}", objective=Objective.CLICKS,
                bid_type=c.bid_type, bid_micros=c.bid_micros, daily_budget_micros=c.budget_micros,
                time_zone=c.time_zone, flight_start=sc.day - timedelta(days=2),
                pacing_mode=c.pacing,
            )
            hist = c.history or shape
            mins = hourly_to_minutely(hist)
            mean_h = sum(hist) / 24.0
            mult = [v * 60.0 / mean_h for v in mins]
            cost = _mean_expected(c)
            rate = c.budget_micros * c.potential / (86400.0 * c.win * cost)
            self.tracks[c.id] = _Track(c, camp, mult, rate, server_active=[True] * sc.servers)
        self.services = [self._fresh_service(i) for i in range(sc.shards)]
        self.restarted: dict[str, Any] | None = None
        self.alive = [True] * sc.servers
        self.clients = [
            BudgetClient(f"sim-{i}", self.clock, _Net(self, i), shards=sc.shards)
            for i in range(sc.servers)
        ]
        self.ledger = MemoryLedger()
        self.last_feed = self.now
        if sc.click_delay_range_s is not None:
            for tr in self.tracks.values():
                if tr.sc.bid_type is BidType.CPC:
                    tr.pending = {}
        # the scenario's billing rules: clicks come within its click window, conversions
        # within its conversion window (both shorter than a real deployment's)
        late = sc.click_delay_range_s
        self.feeder = BilledFeeder(self.ledger, token_ttl_s=TOKEN_TTL_S,
                                   conversion_window_s=sc.conversion_window_s,
                                   click_window_s=late[1] if late else sc.click_window_s)
        self.imp_ids = itertools.count(1)
        self.crashed_at: float | None = None
        self.crash_slices: int = 0
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

    def _svc(self, cid: int) -> BudgetService:
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
        tr = self.tracks[cd.campaign.id]
        if tr.pending is not None:
            self._check_committed(tr, cd, now)
        p = 0.0 if cd.state is BudgetState.STOPPED else (
            1.0 if cd.campaign.pacing_mode is PacingMode.ACCELERATED else cd.ctl.p)
        tr.steps.append((now, p, cd.state.value, cd.plan.target_micros(now - cd.start_s),
                         cd.plan.budget_micros, cd.day.toordinal()))

    # -- traffic --------------------------------------------------------------------------
    def traffic(self) -> None:
        t = self.now
        at = datetime.fromtimestamp(t, tz=UTC)
        alive = [i for i in range(self.sc.servers) if self.alive[i]]
        if not alive:
            return
        lams = []
        tracks = list(self.tracks.values())
        locals_ = []
        for tr in tracks:
            loc = at.astimezone(zone(tr.sc.time_zone))
            locals_.append(loc)
            m = tr.minute_mult[loc.hour * 60 + loc.minute]
            if tr.sc.traffic is not None:
                m *= tr.sc.traffic(loc.hour, loc.minute)
            lams.append(tr.rate_mean * m / len(alive))
        counts = self.rng.poisson(np.array(lams), size=(len(alive), len(tracks)))
        for si, server in enumerate(alive):
            client = self.clients[server]
            row = counts[si]
            for ci, tr in enumerate(tracks):
                n = int(row[ci])
                if n == 0 or not tr.server_active[server]:
                    continue
                tr.eligible[locals_[ci].date()] += n
                p = client.pacing_rate(tr.campaign.id)
                k = int(self.rng.binomial(n, p)) if p < 1.0 else n
                if k == 0:
                    continue
                w = int(self.rng.binomial(k, tr.sc.win))
                for _ in range(w):
                    self._try_serve(server, tr, at, locals_[ci].date())

    def _try_serve(self, server: int, tr: _Track, at: datetime, day: date) -> None:
        client = self.clients[server]
        c, sc = tr.campaign, tr.sc
        if client.admit(c, at, c.max_charge_micros) is not None:
            return
        self._note_admit(tr)
        lo, hi = sc.price_frac
        price = int(c.bid_micros * (lo + (hi - lo) * float(self.rng.random())))
        if sc.bid_type is BidType.CPM:
            expected = worst = cpm_to_impression(price)
        elif sc.bid_type is BidType.CPC:
            expected, worst = ceil_micros(price * sc.pctr), price
        else:
            expected, worst = ceil_micros(price * sc.pctr * sc.pcvr), price
        t = self.now
        imp = f"i{next(self.imp_ids)}"
        client.record_served(Served(c.id, day, imp, expected, t + TOKEN_TTL_S, worst))
        if tr.pending is not None:
            tr.pending[imp] = (t, expected)
        tr.last_serve[day] = t
        tr.serves += 1
        r = self.rng.random(3)
        lo_lag, hi_lag = self.sc.billing_lag_s
        lag = lo_lag + (hi_lag - lo_lag) * r[2]
        if sc.bid_type is BidType.CPM:
            if r[0] < RENDER_RATE:
                occ = t + 0.2 + 1.8 * r[1]
                self.push(occ + lag, self.bill,
                          (tr, imp, EventType.IMPRESSION, expected, occ, t, expected))
            return
        occ = t + 0.2 + 1.8 * r[1]
        self.push(occ + lag, self.bill, (tr, imp, EventType.IMPRESSION, 0, occ, t, 0))
        if sc.bid_type is BidType.CPC:
            prob, mean, window = sc.pctr, self.sc.click_delay_mean_s, self.sc.click_window_s
        else:
            prob = sc.pctr * sc.pcvr
            mean, window = self.sc.conversion_delay_mean_s, self.sc.conversion_window_s
        if r[0] < prob:
            late = self.sc.click_delay_range_s if sc.bid_type is BidType.CPC else None
            if late is not None:
                d = float(self.rng.uniform(*late))
            else:
                d = min(window, float(self.rng.exponential(mean)))
            occ2 = max(occ + 0.5, t + d)
            self.push(occ2 + lag, self.bill,
                      (tr, imp, EventType.CLICK, price, occ2, t, expected))

    def _note_admit(self, tr: _Track) -> None:
        """Measure how long after a hard stop the campaign still takes part in auctions
        (the service's own state: when it turned exhausted, or the pause)."""
        cid = tr.campaign.id
        cd = self._svc(cid).current(cid, self.now)
        if cd is not None and cd.state is BudgetState.EXHAUSTED and cd.exhausted_at is not None:
            lag = self.now - cd.exhausted_at
            tr.after_exhausted_s = max(lag, tr.after_exhausted_s or 0.0)
        if tr.paused_at is not None:
            lag = self.now - tr.paused_at
            tr.after_pause_s = max(lag, tr.after_pause_s or 0.0)

    def bill(self, tr: _Track, imp: str, et: EventType, charge: int, occurred: float,
             served_at: float | None = None, expected: int | None = None) -> None:
        """One event into the ledger, as the tracker writes it: ``expected`` is the
        serve's expected cost that the event settles (the token carries it). A click
        held for its impression is noted when the impression's write releases it."""
        at = datetime.fromtimestamp(occurred, tz=UTC)
        day = local_day(at, tr.campaign.time_zone)
        served = None if served_at is None else datetime.fromtimestamp(served_at, tz=UTC)
        ev = LedgerEvent(imp, et, tr.campaign.id, tr.campaign.id, "feed", tr.sc.bid_type.value,
                         charge, at, day, served_at=served, expected_micros=expected)
        plan = self.ledger.record_many([LedgerWrite(ev, tr.campaign.daily_budget_micros)])
        for event, rec in [(ev, plan.recorded[0]), *plan.released]:
            self._note_billed(tr, event, rec)

    def _note_billed(self, tr: _Track, ev: LedgerEvent, rec: Recorded) -> None:
        """The simulation's own ledger: an event the ledger billed (now, or released
        from held), with the charge the simulation sent, whatever the budget cap did."""
        if rec.outcome is not Outcome.BILLED:
            return
        tr.charged[ev.day] += ev.charge_micros
        tr.billed[ev.day] += rec.billed_micros
        if tr.pending is not None and ev.expected_micros:
            tr.settled_at[ev.impression_id] = self.now  # its billable event is in now
        if rec.billed_micros:
            tr.spend_events.append((ev.occurred_at.timestamp(), rec.billed_micros))

    def _check_committed(self, tr: _Track, cd: CampaignDay, now: float) -> None:
        """How far the service's committed spend is below billed + the expected cost of
        every serve still able to bill (reported to it, its event not yet in the ledger
        at the last feed): a measure the service does not set.

        Both terms come from the simulation's own record, never from production's rules
        or figures: billed is what the events it sent had billed by the last feed (its
        own tally of the ledger's answers, not the service's ``billed``), and a serve can
        bill until the latest click delay the simulation itself draws
        (``click_delay_range_s``), not until production's billing window."""
        assert tr.pending is not None and self.sc.click_delay_range_s is not None
        window_start = now - self.sc.click_delay_range_s[1]
        reported = now - 2.0 * self.sc.report_interval_s - self.sc.message_delay_s[1]
        assert tr.pending is not None
        outstanding = 0
        for imp, (t, expected) in list(tr.pending.items()):
            settled = tr.settled_at.get(imp)
            if t < window_start or (settled is not None and settled <= self.last_feed):
                del tr.pending[imp]
                tr.settled_at.pop(imp, None)
            elif t <= reported and local_day(datetime.fromtimestamp(t, tz=UTC),
                                             tr.campaign.time_zone) == cd.day:
                outstanding += expected
        shortfall = tr.billed_at_feed.get(cd.day, 0) + outstanding - cd.committed(now)
        tr.committed_shortfall = max(tr.committed_shortfall, shortfall)

    def feed(self) -> None:
        """Billed spend to every shard through production's feeder, from the ledger."""
        self.last_feed = self.now
        for tr in self.tracks.values():  # what the feed is about to tell the shards
            tr.billed_at_feed = dict(tr.billed)
        now = datetime.fromtimestamp(self.now, tz=UTC)
        for shard, svc in enumerate(self.services):
            camps = [tr.campaign for tr in self.tracks.values()
                     if tr.campaign.id % self.sc.shards == shard]
            for u in self.feeder.updates(camps, now):
                svc.record_billed(u)

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

    def _server_status(self, tr: _Track, server: int, status: CampaignStatus) -> None:
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
    def seed_short(self) -> None:
        """Short form: start mid-day as if the day so far went to plan (the service
        rebuilds from the ledger): bill each campaign its target spend up to now."""
        t = self.now
        for tr in self.tracks.values():
            svc = self._svc(tr.campaign.id)
            cd = svc.current(tr.campaign.id, t)
            if cd is None:
                continue
            amount = int(cd.plan.target_micros(t - cd.start_s))
            if amount > 0:
                # spend of the day so far: its serves are past their billing window
                self.bill(tr, f"prior-{tr.campaign.id}", EventType.IMPRESSION, amount, t - 1.0,
                          t - TOKEN_TTL_S - 1.0, 0)
        self.feed()

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

    def _control(self, shard: int) -> None:
        if not self._shard_down(shard, self.now):
            self.services[shard].step()


def _mean_expected(c: SimCampaign) -> float:
    """Expected cost of one won request as the serving path records it, micros."""
    price = c.bid_micros * (c.price_frac[0] + c.price_frac[1]) / 2.0
    if c.bid_type is BidType.CPM:
        return price / 1000.0
    if c.bid_type is BidType.CPC:
        return price * c.pctr
    return price * c.pctr * c.pcvr


def _expected_billed(c: SimCampaign) -> float:
    """Expected billed micros of one won request: its expected cost, for CPM only the
    rendered share (an unrendered impression bills nothing)."""
    exp = _mean_expected(c)
    return exp * RENDER_RATE if c.bid_type is BidType.CPM else exp


def potential_micros(eligible: int, c: SimCampaign) -> int:
    """Spend reachable at p = 1: eligible requests × win probability × expected billed
    charge per win, micros (from the traffic generated, not from any controller)."""
    return int(eligible * c.win * _expected_billed(c))


def _window_ask(sim: _Sim, tr: _Track, s0: float, s1: float) -> float:
    """What the budget asks of the simulated part [s0, s1) of the day: the budget times
    the share of a curve shaped like the campaign's history that falls in it."""
    c = tr.campaign
    ds, _ = day_bounds(sim.sc.day, c.time_zone)
    curve = curve_for_day(tr.sc.history or sim.shape, sim.sc.day, c.time_zone)
    share = curve.share_at(s1 - ds.timestamp()) - curve.share_at(s0 - ds.timestamp())
    return c.daily_budget_micros * share


def _ledger_day(sim: _Sim, cid: int, d: date) -> tuple[int, int]:
    """(billed, absorbed) micros of ``cid`` on local day ``d``, read from the ledger."""
    totals = sim.ledger.day_totals(cid, d, d)
    if not totals:
        return 0, 0
    return totals[0].billed_micros, totals[0].absorbed_micros


# -- results -------------------------------------------------------------------------------
def _campaign_result(sim: _Sim, tr: _Track) -> dict[str, Any]:
    sc = sim.sc
    c = tr.campaign
    d = sc.day
    ds, de = day_bounds(d, c.time_zone)
    s0, s1 = max(ds.timestamp(), sim.start.timestamp()), min(de.timestamp(), sim.end.timestamp())
    budget = c.daily_budget_micros
    billed, absorbed = _ledger_day(sim, c.id, d)
    steps = [s for s in tr.steps if s[5] == d.toordinal()]
    ps = [s[1] for s in steps]
    paced = c.pacing_mode is PacingMode.EVEN
    potential = potential_micros(tr.eligible.get(d, 0), tr.sc)
    ask = _window_ask(sim, tr, s0, s1)
    traffic_allows = ask > 0 and potential >= TRAFFIC_ALLOWS_MARGIN * ask
    # hourly |cumulative spend share - target|
    ev = sorted((t, b) for t, b in tr.spend_events if ds.timestamp() <= t < de.timestamp())
    worst: float | None = None
    hours: list[float] = []
    if steps:
        times = [s[0] for s in steps]
        j = 0
        acc = 0
        h = ds.timestamp() + 3600.0
        while h <= s1 + 1e-6:
            if h > s0 + 1.0:
                while j < len(ev) and ev[j][0] <= h:
                    acc += ev[j][1]
                    j += 1
                k = bisect.bisect_right(times, h) - 1
                if k >= 0:
                    _, _, _, target, bud, _ = steps[k]
                    err = abs(acc - target) / bud if bud else 0.0
                    hours.append(round(err, 4))
                    worst = err if worst is None else max(worst, err)
            else:
                while j < len(ev) and ev[j][0] <= h:
                    acc += ev[j][1]
                    j += 1
            h += 3600.0
    # longest run of control steps at the floor
    run = best = 0
    for p in ps:
        run = run + 1 if 0 < p <= P_FLOOR else 0
        best = max(best, run)
    exhausted_at = None
    for s in steps:
        if s[2] == BudgetState.EXHAUSTED.value:
            if exhausted_at is None:
                exhausted_at = s[0]
        else:
            exhausted_at = None
    svc = sim._svc(c.id)
    cd = svc.campaign_day(c.id, d)
    final_status = None if cd is None else cd.status.value
    note = None
    if not paced:
        # accelerated delivery follows no curve: an error against one means nothing
        worst, hours = None, []
        note = "accelerated: follows no target curve"
    series = [[round(s[0], 1), round(s[1], 5)] for s in steps[:: max(1, len(steps) // 288)]]
    return {
        "campaign_id": c.id,
        "time_zone": c.time_zone,
        "bid_type": c.bid_type.value,
        "pacing_mode": c.pacing_mode.value,
        "daily_budget_micros": budget,
        "charge_micros": c.max_charge_micros,
        "budget_charges": budget // c.max_charge_micros,
        "billed_micros": billed,
        # the simulation's own sum of the charges it sent (the ledger caps billing at the
        # budget, so billed beyond it is 0 by construction; this is the uncapped amount)
        "charged_micros": tr.charged.get(d, 0),
        "charged_above_budget_micros": max(0, tr.charged.get(d, 0) - budget),
        "absorbed_overspend_micros": absorbed,
        "absorbed_share": absorbed / budget if budget else None,
        # worst (billed + expected cost of serves still able to bill) − committed, as
        # the service held them at a control step; null where not tracked
        "committed_shortfall_micros": tr.committed_shortfall if tr.pending is not None
        else None,
        "delivered_share": billed / budget if budget else None,
        "eligible_requests": tr.eligible.get(d, 0),
        "potential_micros": potential,
        "window_budget_micros": round(ask),
        "traffic_allows": traffic_allows,
        "max_hourly_curve_error": None if worst is None else round(worst, 4),
        "curve_error_note": note,
        "hourly_curve_error": hours,
        "final_status": final_status,
        "p_min": min(ps) if ps else None,
        "max_steps_at_floor": best,
        "exhausted_at": exhausted_at,
        "last_auction_after_exhausted_s": None if tr.after_exhausted_s is None
        else round(tr.after_exhausted_s, 3),
        # last serve of the day relative to the final exhaustion (< 0: it stopped before)
        "last_serve_rel_exhausted_s": None if cd is None or cd.exhausted_at is None
        or d not in tr.last_serve else round(tr.last_serve[d] - cd.exhausted_at, 3),
        "paused": any(pz.campaign_id == c.id for pz in sc.pauses),
        "last_auction_after_pause_s": None if tr.after_pause_s is None
        else round(tr.after_pause_s, 3),
        "serves": tr.serves,
        "day_hours": round((de - ds).total_seconds() / 3600.0, 2),
        "p_over_time": series,
    }


def run_simulation(scenario: str, report_path: Path | None = None, plots_dir: Path | None = None,
                   seed: int = 0, short: bool = False,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run one scenario; return (and write to ``report_path`` as JSON) its report.

    Args:
        scenario: a name from ``adfunnel.sim.scenarios.scenarios()`` (``baseline``, …).
        report_path: where to write the JSON report (None: don't).
        plots_dir: where to write one PNG per campaign (None: no plots).
        seed: random seed (the run is deterministic for a seed).
        short: run the scenario's short window (seconds of CPU, for tests/CI).
        progress: told ``(simulated seconds done, total)`` once per simulated minute.

    Returns:
        ``{"scenario", "short", "seed", "window", "wall_s", "crash", "campaigns": [...]}``
        with per campaign: ``campaign_id, time_zone, daily_budget_micros, billed_micros,
        charged_micros, charged_above_budget_micros, absorbed_overspend_micros,
        delivered_share,
        traffic_allows, max_hourly_curve_error``, p over time and more.

    Raises:
        KeyError: unknown scenario name.
    """
    all_sc = scenarios()
    if scenario not in all_sc:
        raise KeyError(f"unknown scenario {scenario!r}; known: {', '.join(sorted(all_sc))}")
    sc = all_sc[scenario]
    t = time.perf_counter()
    sim = _Sim(sc, seed, short)
    sim.run(progress)
    wall = time.perf_counter() - t
    result: dict[str, Any] = {
        "scenario": sc.name,
        "short": short,
        "seed": seed,
        "notes": sc.notes,
        "window": [sim.start.isoformat(), sim.end.isoformat()],
        "wall_s": round(wall, 2),
        "crash": None if sim.crashed_at is None else {
            "server": f"sim-{1 % sc.servers}", "at": sim.crashed_at,
            "slices_held": sim.crash_slices},
        "restart": _restart_result(sim),
        "client_stats": [c.stats for c in sim.clients],
        "campaigns": [_campaign_result(sim, tr) for tr in sim.tracks.values()],
    }
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result, indent=1))
    if plots_dir is not None:
        from adfunnel.sim.plots import plot_campaigns

        plot_campaigns(sim, plots_dir)
    return result


def _restart_result(sim: _Sim) -> dict[str, Any] | None:
    """The shard restart, if any: when, what each of its campaigns had billed then, its
    serves and absorbed overspend (ledger) on the scenario's day since."""
    r = sim.restarted
    if r is None:
        return None
    out = dict(r)
    out["serves_after"] = {cid: sim.tracks[cid].serves - n
                           for cid, n in r["serves_at_restart"].items()}
    out["absorbed_micros"] = {cid: _ledger_day(sim, cid, sim.sc.day)[1]
                              for cid in r["serves_at_restart"]}
    return out


def summary_lines(result: dict[str, Any]) -> list[str]:
    """A human table of a report (what ``adfunnel simulate`` prints)."""
    out = [f"scenario {result['scenario']} ({'short' if result['short'] else 'full day'}, "
           f"{result['wall_s']} s)",
           f"{'id':>4} {'tz':<18} {'budget':>10} {'deliv':>6} {'above':>6} {'absorb%':>8} "
           f"{'allows':>6} {'curve':>6} {'pmin':>7} {'floor':>5} {'exh_s':>6} {'pause_s':>7}"]
    for c in result["campaigns"]:
        out.append(
            f"{c['campaign_id']:>4} {c['time_zone']:<18} {c['daily_budget_micros'] / 1e6:>10.2f} "
            f"{_opt(c['delivered_share'], 3):>6} {c['charged_above_budget_micros']:>6} "
            f"{_opt(_pct(c['absorbed_share']), 4):>8} {c['traffic_allows']!s:>6} "
            f"{_opt(c['max_hourly_curve_error'], 3):>6} {_opt(c['p_min'], 4):>7} "
            f"{c['max_steps_at_floor']:>5} "
            f"{_opt(c['last_auction_after_exhausted_s'], 1):>6} "
            f"{_opt(c['last_auction_after_pause_s'], 2):>7}")
    return out


#: The units of :func:`summary_lines`'s columns, printed under its table.
SUMMARY_UNITS = (
    "units: budget in currency units; deliv = billed / budget (fraction); above = charged "
    "above budget, what the ledger's cap kept from billing (micros); absorb% = absorbed "
    "overspend / budget (%); allows = traffic "
    "could deliver the budget; curve = largest hourly gap to the target curve (fraction "
    "of budget); pmin = lowest pacing p; floor = most control steps in a row at the "
    "floor; exh_s, pause_s = seconds from exhaustion or pause to the campaign's last "
    "auction; n/a = not measured")


def _opt(v: float | None, digits: int) -> str:
    """A figure, or "n/a" where it was not measured."""
    return "n/a" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> float | None:
    return None if v is None else 100 * v
