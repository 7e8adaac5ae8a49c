"""The day simulation's traffic: eligible requests per campaign and server each second,
the ad servers' participation p and admission, the auctions and the serves, and each
serve's billable events scheduled into the ledger after their delays.

Eligible requests follow the campaign's traffic shape (the iPinYou hour-of-day curve
unless the scenario says otherwise) in its local time, Poisson per server per second.
The auction is a stand-in (win with a fixed probability, pay a uniform share of the bid),
since budgets and pacing are what is measured, except for campaigns with a real bid
landscape (``SimCampaign.landscape``, :mod:`adfunnel.sim.landscape`): their requests draw
pCTR and a competing price from the iPinYou data and they bid pCTR × their bid per click
— ⌊v ÷ λ⌋ for an automatic strategy, λ read from the ad server's budget client as
serving reads it.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime

import numpy as np

from adfunnel.bidding.strategy import auto_bid_micros
from adfunnel.billing.model import EventType
from adfunnel.budget.feed import TOKEN_TTL_S
from adfunnel.budget.gate import Served
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import BidStrategy, BidType
from adfunnel.campaigns.schedule import zone
from adfunnel.money import ceil_micros, cpm_to_impression
from adfunnel.sim.day_billing import DayBilling
from adfunnel.sim.day_track import RENDER_RATE, Track
from adfunnel.sim.landscape import Landscape, auction, ceiling_charges, load_landscape
from adfunnel.sim.scenarios import Scenario


class DayTraffic(DayBilling):
    """The simulated window with its requests, auctions and serves."""

    def __init__(self, sc: Scenario, seed: int, short: bool) -> None:
        super().__init__(sc, seed, short)
        for c in sc.campaigns:
            if c.landscape:  # one stream for every such campaign of a seed: same traffic
                self.tracks[c.id].rng = np.random.default_rng([seed, 27])
        self.landscape: Landscape | None = (
            load_landscape() if any(c.landscape for c in sc.campaigns) else None)
        self.imp_ids = itertools.count(1)

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
