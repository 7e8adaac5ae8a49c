"""The day simulation's engine: production budget service, controller and budget clients
on a virtual clock.

A discrete-event simulation (DESIGN.md §Money and budgets; issue "day simulation"):
N simulated ad servers, each with its own :class:`~adfunnel.budget.client.BudgetClient`
(local spend, slices, report sequence), budget shards each a
:class:`~adfunnel.budget.service.BudgetService`, the production
:class:`~adfunnel.billing.ledger.MemoryLedger`, message delays, billing lag, click and
conversion delays. Only the clock (:class:`~adfunnel.clock.ManualClock`, set to each
event's time) and the transport (an in-memory one with delays, outages and crashes)
are the simulation's own; the auction is a stand-in (win with a fixed probability,
pay a uniform share of the bid), since budgets and pacing are what is measured, except
for campaigns with a real bid landscape (``SimCampaign.landscape``,
:mod:`adfunnel.sim.landscape`): their requests draw pCTR and a competing price from the
iPinYou data and they bid pCTR × their bid per click — ⌊v ÷ λ⌋ for an automatic
strategy, λ read from the ad server's budget client as serving reads it.

Eligible requests per campaign follow its traffic shape (the iPinYou hour-of-day
curve unless the scenario says otherwise) in its local time, Poisson per server per
second. Controllers start as production's do: a fresh service has no yesterday, so
every campaign starts its day at p = 1 (a restarted shard likewise).
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from typing import Any

import numpy as np

from adfunnel.bidding.strategy import auto_bid_micros
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
from adfunnel.campaigns.model import (
    BidStrategy,
    BidType,
    BillableEvent,
    Campaign,
    CampaignStatus,
    Objective,
    PacingMode,
)
from adfunnel.campaigns.schedule import day_bounds, local_day, zone
from adfunnel.clock import ManualClock
from adfunnel.money import ceil_micros, cpm_to_impression
from adfunnel.pacing.curve import hourly_to_minutely
from adfunnel.sim.landscape import Landscape, auction, ceiling_charges, load_landscape
from adfunnel.sim.scenarios import Scenario, SimCampaign
from adfunnel.sim.traffic import ipinyou_hourly, normalised

#: Share of CPM serves whose impression renders (an unrendered one bills nothing).
RENDER_RATE = 0.97


@dataclass
class Track:
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
    # real-landscape campaigns: their own random source for requests, rows and clicks
    # (the same traffic in every run of a seed, whatever the controllers do), what the
    # requests would bill at the campaign's ceiling bid (λ = 1) by local day as
    # [billed, clicks], the λ its bids used (lowest, highest) and λ at each control step
    rng: np.random.Generator | None = None
    ceiling: dict[date, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    lam_used: list[float] = field(default_factory=list)
    lam_steps: list[tuple[float, float]] = field(default_factory=list)


class _Net:
    """In-memory transport with delays, shard outages and dead servers."""

    def __init__(self, sim: DaySim, server: int) -> None:
        self.sim = sim
        self.server = server

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        sim = self.sim
        if not sim.alive[self.server]:
            return
        t = sim.now + sim.delay()
        sim.push(t, sim.deliver_report, (self.server, report, on_reply))


class DaySim:
    """One scenario's simulated window: the event heap, the ad servers' budget clients,
    the budget shards, the ledger and each campaign's :class:`Track`."""

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
            if c.landscape:  # one stream for every such campaign of a seed: same traffic
                self.tracks[c.id].rng = np.random.default_rng([seed, 27])
        self.landscape: Landscape | None = (
            load_landscape() if any(c.landscape for c in sc.campaigns) else None)
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
        tr = self.tracks[cd.campaign.id]
        if tr.pending is not None:
            self._check_committed(tr, cd, now)
        p = 0.0 if cd.state is BudgetState.STOPPED else (
            1.0 if cd.campaign.pacing_mode is PacingMode.ACCELERATED else cd.ctl.p)
        tr.steps.append((now, p, cd.state.value, cd.plan.target_micros(now - cd.start_s),
                         cd.plan.budget_micros, cd.day.toordinal()))
        if tr.rng is not None:
            tr.lam_steps.append((now, cd.lam))

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
        for ci, tr in enumerate(tracks):
            if tr.rng is not None:  # its own stream (Track.rng)
                counts[:, ci] = tr.rng.poisson(lams[ci], size=len(alive))
        for si, server in enumerate(alive):
            client = self.clients[server]
            row = counts[si]
            for ci, tr in enumerate(tracks):
                n = int(row[ci])
                if n == 0 or not tr.server_active[server]:
                    continue
                if tr.rng is not None:
                    self._landscape_requests(server, tr, n, at, locals_[ci].date())
                    continue
                tr.eligible[locals_[ci].date()] += n
                p = client.pacing_rate(tr.campaign.id)
                k = int(self.rng.binomial(n, p)) if p < 1.0 else n
                if k == 0:
                    continue
                w = int(self.rng.binomial(k, tr.sc.win))
                for _ in range(w):
                    self._try_serve(server, tr, at, locals_[ci].date())

    def _landscape_requests(self, server: int, tr: Track, n: int, at: datetime,
                            day: date) -> None:
        """``n`` eligible requests of a real-landscape campaign on ``server``: rows and
        click draws from the campaign's own stream, what they would bill at its ceiling
        bid, participation p, then the auctions at its bid per click (⌊v ÷ λ⌋ for an
        automatic strategy, λ from the server's budget client) and a serve per win."""
        assert tr.rng is not None and self.landscape is not None
        c, client = tr.campaign, self.clients[server]
        tr.eligible[day] += n
        pctr, market, clicked = self.landscape.draw(tr.rng, n)
        billed, clicks = ceiling_charges(pctr, market, clicked, c.bid_micros)
        tr.ceiling[day][0] += billed
        tr.ceiling[day][1] += clicks
        keep = self.rng.random(n) < client.pacing_rate(c.id)
        bid = c.bid_micros
        if c.bid_strategy is not BidStrategy.MANUAL:
            tr.lam_used.append(client.bid_multiplier(c.id))
            bid = auto_bid_micros(c.bid_micros, tr.lam_used[-1])
        won, price = auction(pctr, market, bid)
        won &= keep
        for i in np.flatnonzero(won).tolist():
            self._try_serve(server, tr, at, day,
                            (int(price[i]), float(pctr[i]), bool(clicked[i])))

    def _try_serve(self, server: int, tr: Track, at: datetime, day: date,
                   won: tuple[int, float, bool] | None = None) -> None:
        """One won auction: admit, record the serve, bill its events. ``won``: a real
        auction's (price per click in micros, pCTR, clicked); None = the stand-in's."""
        client = self.clients[server]
        c, sc = tr.campaign, tr.sc
        if client.admit(c, at, c.max_charge_micros) is not None:
            return
        self._note_admit(tr)
        lo, hi = sc.price_frac
        if won is not None:
            price, pctr = won[0], won[1]
        else:
            price, pctr = int(c.bid_micros * (lo + (hi - lo) * float(self.rng.random()))), sc.pctr
        if sc.bid_type is BidType.CPM:
            expected = worst = cpm_to_impression(price)
        elif sc.bid_type is BidType.CPC:
            expected, worst = ceil_micros(price * pctr), price
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
            prob, mean, window = pctr, self.sc.click_delay_mean_s, self.sc.click_window_s
        else:
            prob = sc.pctr * sc.pcvr
            mean, window = self.sc.conversion_delay_mean_s, self.sc.conversion_window_s
        if (r[0] < prob) if won is None else won[2]:
            late = self.sc.click_delay_range_s if sc.bid_type is BidType.CPC else None
            if late is not None:
                d = float(self.rng.uniform(*late))
            else:
                d = min(window, float(self.rng.exponential(mean)))
            occ2 = max(occ + 0.5, t + d)
            self.push(occ2 + lag, self.bill,
                      (tr, imp, EventType.CLICK, price, occ2, t, expected))

    def _note_admit(self, tr: Track) -> None:
        """Measure how long after a hard stop the campaign still takes part in auctions
        (the service's own state: when it turned exhausted, or the pause)."""
        cid = tr.campaign.id
        cd = self.service_for(cid).current(cid, self.now)
        if cd is not None and cd.state is BudgetState.EXHAUSTED and cd.exhausted_at is not None:
            lag = self.now - cd.exhausted_at
            tr.after_exhausted_s = max(lag, tr.after_exhausted_s or 0.0)
        if tr.paused_at is not None:
            lag = self.now - tr.paused_at
            tr.after_pause_s = max(lag, tr.after_pause_s or 0.0)

    def bill(self, tr: Track, imp: str, et: EventType, charge: int, occurred: float,
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

    def _note_billed(self, tr: Track, ev: LedgerEvent, rec: Recorded) -> None:
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

    def _check_committed(self, tr: Track, cd: CampaignDay, now: float) -> None:
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
    def seed_short(self) -> None:
        """Short form: start mid-day as if the day so far went to plan (the service
        rebuilds from the ledger): bill each campaign its target spend up to now."""
        t = self.now
        for tr in self.tracks.values():
            svc = self.service_for(tr.campaign.id)
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


def mean_expected(c: SimCampaign) -> float:
    """Expected cost of one won request as the serving path records it, micros."""
    price = c.bid_micros * (c.price_frac[0] + c.price_frac[1]) / 2.0
    if c.bid_type is BidType.CPM:
        return price / 1000.0
    if c.bid_type is BidType.CPC:
        return price * c.pctr
    return price * c.pctr * c.pcvr
