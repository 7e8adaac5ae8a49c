"""The replay's driver: a :class:`Replayer` sets up the campaigns of
:mod:`adfunnel.sim.replay_plans` on a running server and replays log rows through it.

It moves the server's clock with the log (``PUT /v1/admin/clock``), sends one ad request
per row and fires impression beacons for rendered ads and clicks from the click model
below.

Click model (stated): a rendered ad is clicked with probability
``min(1, ctr_scale × its advertiser's real average CTR)``; ``ctr_scale`` defaults to 3
so that ~12.5k requests bill enough clicks to exercise CPC billing (1 = real rates).
Render model: 90 % of served ads render. A few beacons are re-sent (duplicates) and a
few tokens are forged, to show that both are refused without loss.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from adfunnel.money import MICROS_PER_FEN, MICROS_PER_UNIT
from adfunnel.sim.catalogue import CAMPAIGNS_PER_ADVERTISER, catalogue
from adfunnel.sim.flight import campaign_body
from adfunnel.sim.flight_scenarios import FlightScenario, Line
from adfunnel.sim.invalid import InvalidTraffic, row_address
from adfunnel.sim.ipinyou import CHINA, LogRow, read_train_info
from adfunnel.sim.learn import AttributeClicks
from adfunnel.sim.replay_plans import SIZES, ad_request, landing_url, plans
from adfunnel.sim.server_proc import auth_headers
from adfunnel.tracking.http import without_click_id
from adfunnel.tracking.token import verify

RENDER_RATE = 0.90
DUPLICATE_RATE = 0.03
FORGED_RATE = 0.005


@dataclass
class ReplayStats:
    requests: int = 0
    filled_slots: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    impressions_fired: int = 0
    duplicates_fired: int = 0
    clicks_fired: int = 0
    forged_fired: int = 0
    forged_refused: int = 0
    bad_redirects: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class Replayer:
    """Drives a running server at ``base_url`` with the log rows, as an admin
    (``api_key``)."""

    #: prefixed to the nine campaigns' ``creative_ref`` (an http(s) one is an image the
    #: OpenRTB markup can show: :mod:`adfunnel.sim.replay_openrtb`)
    creative_prefix = ""

    def __init__(self, base_url: str, *, seed: int = 7, ctr_scale: float = 3.0,
                 speed: float | None = None, data_root: Path | None = None,
                 token_key: bytes | None = None, api_key: str | None = None) -> None:
        # the admin key opens the protected routes (the clock, campaigns, statistics)
        self.http = httpx.Client(base_url=base_url, timeout=10.0,
                                 headers=auth_headers(api_key))
        self.seed = seed
        self.rng = random.Random(seed)
        self.ctr_scale = ctr_scale
        self.speed = speed
        self.data_root = data_root
        self.campaigns: dict[int, dict[str, Any]] = {}  # campaign id -> {plan, info, ...}
        self.landing: dict[int, str] = {}  # ad id -> landing URL
        self.stats = ReplayStats()
        self.invalid = InvalidTraffic(seed + 1, data_root)
        self.token_key = token_key  # the server's token secret, when the replay knows it
        # the events sent, by their (impression id, event type): injected ones with their
        # source (adfunnel.sim.invalid), and the genuine ones
        self.injected: list[tuple[str | None, str, str]] = []
        self.genuine: list[tuple[str | None, str]] = []
        #: the --learn click model (None: the advertisers' scaled average CTRs)
        self.clicks: AttributeClicks | None = None
        self._headers: dict[str, str] = {}
        # serves of capped campaigns per (user, campaign, campaign's local day), from the
        # answers received: what the report's max_serves_per_user_window measures
        self.capped_serves: dict[tuple[str, int, str], int] = defaultdict(int)
        self.catalogue_ids: set[int] = set()  # --catalogue campaigns
        self.catalogue_slots = 0  # slots those won
        # direct lines (adfunnel.sim.replay_direct): campaign id -> {line, goal,
        # budget_micros}, and their serves per local day from the answers received
        self.direct: dict[int, dict[str, Any]] = {}
        self.direct_served: dict[int, dict[date, int]] = defaultdict(lambda: defaultdict(int))
        self._unsettled = False  # beacons sent since the server's events last settled
        #: called with the server's new time after each move of its clock (the direct
        #: lines' plan reads, adfunnel.sim.replay_direct)
        self.on_clock: Callable[[datetime], None] | None = None
        # what the replay sent and got, per placement and slot size (the report's
        # placements and slot_sizes, adfunnel.sim.replay_sales): requests sent per
        # placement; [requests, filled slots] per slot size "WxH"; every ad's size and
        # every advertiser the replay made
        self.placements_sent: dict[str, int] = defaultdict(int)
        self.sizes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.ad_sizes: dict[int, str] = {}
        self.advertiser_ids: list[int] = []

    def close(self) -> None:
        self.http.close()

    # -- set-up -------------------------------------------------------------------
    def create_campaigns(self, start: datetime) -> None:
        """One advertiser, campaign and ten ads per iPinYou advertiser, via the API."""
        for plan in plans():
            info = read_train_info(plan.advertiser, self.data_root)
            adv = self._post("/v1/advertisers", {"name": f"iPinYou {plan.advertiser}"})
            self.advertiser_ids.append(adv["id"])
            bid_fen = info.cpm_fen if plan.bid_type == "CPM" else info.cpc_fen
            body = {
                "advertiser_id": adv["id"], "name": f"ipinyou-{plan.advertiser}",
                "objective": "impressions" if plan.bid_type == "CPM" else "clicks",
                "bid_type": plan.bid_type, "bid_micros": round(bid_fen * MICROS_PER_FEN),
                "daily_budget_micros": round(plan.daily_budget_cny * MICROS_PER_UNIT),
                "time_zone": "Asia/Shanghai", "flight_start": start.date().isoformat(),
                "pacing_mode": plan.pacing_mode,
                # the iPinYou logs record served impressions, no viewability: the replay
                # fires only /i, so its impressions bill on render (the figures stay)
                "billable_event": "rendered",
            }
            if plan.targeting is not None:
                body["targeting"] = plan.targeting
            if plan.frequency_caps:
                body["frequency_caps"] = list(plan.frequency_caps)
            campaign = self._post("/v1/campaigns", body)
            self.campaigns[campaign["id"]] = {"plan": plan, "info": info, "record": campaign}
            for size in SIZES:
                w, h = (int(x) for x in size.split("x"))
                ad = self._post(f"/v1/campaigns/{campaign['id']}/ads", {
                    "landing_url": landing_url(plan.advertiser),
                    "creative_ref": f"{self.creative_prefix}ipinyou/{plan.advertiser}/{size}.png",
                    "format": "banner", "width": w, "height": h,
                })
                self.landing[ad["id"]] = ad["landing_url"]
                self.ad_sizes[ad["id"]] = size

    def create_catalogue(self, rows: list[LogRow], start: datetime, n: int) -> None:
        """``n`` run-of-network CPC campaigns (:mod:`adfunnel.sim.catalogue`), bidding
        around the nine's CPC bids, under advertisers of
        :data:`~adfunnel.sim.catalogue.CAMPAIGNS_PER_ADVERTISER` campaigns each."""
        if n == 0:
            return
        cpc = [c["record"]["bid_micros"] for c in self.campaigns.values()
               if c["record"]["bid_type"] == "CPC"]
        # a seed of its own: the render and click draws (self.rng) stay those of a
        # replay without a catalogue
        drawn = catalogue(n, rows, round(sum(cpc) / len(cpc)) if cpc else 1_000_000,
                          self.seed + 0xCA7)
        advertiser_id = 0
        for c in drawn:
            if (c.index - 1) % CAMPAIGNS_PER_ADVERTISER == 0:
                advertiser_id = self._post("/v1/advertisers",
                                           {"name": f"catalogue {c.index}"})["id"]
                self.advertiser_ids.append(advertiser_id)
            campaign = self._post("/v1/campaigns",
                                  c.campaign_body(advertiser_id, start.date().isoformat()))
            self.catalogue_ids.add(campaign["id"])
            ad = self._post(f"/v1/campaigns/{campaign['id']}/ads", c.ad_body())
            self.landing[ad["id"]] = ad["landing_url"]
            self.ad_sizes[ad["id"]] = f"{ad['width']}x{ad['height']}"

    def create_direct(self, sc: FlightScenario, line: Line, goal: int | None,
                      budget_micros: int | None) -> None:
        """One direct line of ``sc`` (a guaranteed ``goal`` in impressions, a
        sponsorship's daily ``budget_micros``) under an advertiser of its own, with an
        ad of each of the nine's sizes, by the body a flight line has
        (:func:`adfunnel.sim.flight.campaign_body`)."""
        adv = self._post("/v1/advertisers", {"name": line.key})
        self.advertiser_ids.append(adv["id"])
        campaign = self._post("/v1/campaigns",
                              campaign_body(sc, line, adv["id"], goal, budget_micros))
        self.direct[campaign["id"]] = {"line": line, "goal": goal,
                                       "budget_micros": budget_micros}
        for size in SIZES:
            w, h = (int(x) for x in size.split("x"))
            ad = self._post(f"/v1/campaigns/{campaign['id']}/ads", {
                "landing_url": f"https://{line.key}.example/landing",
                "creative_ref": f"direct/{line.key}/{size}.png",
                "format": "banner", "width": w, "height": h,
            })
            self.landing[ad["id"]] = ad["landing_url"]
            self.ad_sizes[ad["id"]] = size

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(path, json=body)
        if r.status_code >= 400:
            raise RuntimeError(f"POST {path} -> {r.status_code}: {r.text}")
        return r.json()

    # -- replay -------------------------------------------------------------------
    def replay(self, rows: list[LogRow], progress: Callable[[int], None] | None = None) -> None:
        last_clock: datetime | None = None
        wall0 = time.monotonic()
        sim0 = rows[0].timestamp if rows else None
        ctr_by_campaign = {cid: c["info"].ctr for cid, c in self.campaigns.items()}
        for row in rows:
            if self.speed and sim0 is not None:
                due = (row.timestamp - sim0).total_seconds() / self.speed
                wait = due - (time.monotonic() - wall0)
                if wait > 0:
                    time.sleep(wait)
            if last_clock is None or row.timestamp - last_clock >= timedelta(seconds=1):
                # moving the clock settles the server's events first
                self.http.put("/v1/admin/clock", json={"now": row.timestamp.isoformat()})
                last_clock = row.timestamp
                self._unsettled = False
                if self.on_clock is not None:
                    self.on_clock(row.timestamp)
            elif self._unsettled:
                self.settle()
            self._one(row, ctr_by_campaign)
            if progress is not None:
                progress(1)
        self.settle()

    def settle(self) -> None:
        """Wait until the server's aggregator has recorded every beacon sent (its
        thread bills, feeds budgets and the click model after the beacon's answer), so
        the next request, or the report, sees them: the replay then depends on its seed,
        not on the aggregator's timing. A server without the route is not waited on."""
        r = self.http.post("/v1/admin/events:settle")
        if r.status_code not in (200, 404):
            self.stats.errors[f"settle_{r.status_code}"] += 1
        self._unsettled = False

    def _one(self, row: LogRow, ctr_by_campaign: dict[int, float]) -> None:
        s = self.stats
        s.requests += 1
        size = self.sizes[f"{row.width}x{row.height}"]
        size[0] += 1
        self.placements_sent[row.slot_id] += 1
        t0 = time.perf_counter()
        # the request's id names the row (the seed's run, its place in it): a
        # sponsorship's share draw depends on it, so the report on the seed only
        r = self.http.post("/v1/ads:select",
                           json=ad_request(row, f"replay-{self.seed}-{s.requests}"))
        s.latencies_ms.append((time.perf_counter() - t0) * 1000)
        if r.status_code == 204:
            return
        if r.status_code != 200:
            s.errors[f"select_{r.status_code}"] += 1
            return
        for ad in r.json()["ads"]:
            s.filled_slots += 1
            size[1] += 1
            self.catalogue_slots += ad["campaign_id"] in self.catalogue_ids
            self._count_capped(row, ad["campaign_id"])
            if ad["campaign_id"] in self.direct:
                day = row.timestamp.astimezone(CHINA).date()
                self.direct_served[ad["campaign_id"]][day] += 1
            self._beacons(ad, ctr_by_campaign.get(ad["campaign_id"], 0.0), row)

    def _count_capped(self, row: LogRow, campaign_id: int) -> None:
        c = self.campaigns.get(campaign_id)
        if c is None or not c["plan"].frequency_caps:
            return
        day = row.timestamp.astimezone(ZoneInfo(c["record"]["time_zone"])).date().isoformat()
        self.capped_serves[(row.user, campaign_id, day)] += 1

    def _beacons(self, ad: dict[str, Any], ctr: float, row: LogRow) -> None:
        """The served ad's beacons, from the row's user agent and address (through the
        server's trusted proxy header), or — for an injected share of served ads — from a
        bot's user agent or a datacenter's address (:mod:`adfunnel.sim.invalid`). Every
        event sent is labelled genuine or injected (with its source)."""
        kind, source, value = self.invalid.draw()
        self._headers = {"user-agent": row.useragent, "x-forwarded-for": row_address(row.ip)}
        if kind == "crawler_ua":
            self._headers["user-agent"] = value or ""
        elif kind == "datacenter":
            self._headers["x-forwarded-for"] = value or ""
        before = (self.stats.impressions_fired + self.stats.duplicates_fired,
                  self.stats.clicks_fired)
        p_click = (self.clicks.rate(row) if self.clicks is not None
                   else min(1.0, ctr * self.ctr_scale))
        self._fire(ad, p_click)
        impressions = self.stats.impressions_fired + self.stats.duplicates_fired - before[0]
        clicks = self.stats.clicks_fired - before[1]
        if impressions + clicks == 0:
            return
        iid = self._impression_id(ad["token"])
        sent = [(iid, "impression")] * impressions + [(iid, "click")] * clicks
        if source is None:
            self.genuine.extend(sent)
        else:
            self.injected.extend((i, e, source) for i, e in sent)

    def _impression_id(self, token: str) -> str | None:
        if self.token_key is None:
            return None
        return verify(token, self.token_key, 0.0).impression_id

    def _fire(self, ad: dict[str, Any], p_click: float) -> None:
        s, rng = self.stats, self.rng
        if rng.random() < FORGED_RATE:
            s.forged_fired += 1
            forged = ad["token"][:-3] + ("AAA" if not ad["token"].endswith("AAA") else "BBB")
            if self.http.get("/i", params={"t": forged}).status_code == 400:
                s.forged_refused += 1
        if rng.random() >= RENDER_RATE:
            return
        self._get(ad["impression_url"], 204, "impression")
        s.impressions_fired += 1
        if rng.random() < DUPLICATE_RATE:
            self._get(ad["impression_url"], 204, "impression")
            s.duplicates_fired += 1
        if rng.random() < p_click:
            r = self._get(ad["click_url"] + "&utm_x=https%3A%2F%2Fevil.example", 302, "click")
            s.clicks_fired += 1
            landed = without_click_id(r.headers.get("location", "")) if r is not None else None
            if r is not None and landed != self.landing.get(ad["ad_id"]):
                s.bad_redirects += 1

    def _get(self, url: str, expect: int, what: str) -> httpx.Response | None:
        r = self.http.get(url, headers=self._headers)
        self._unsettled = True
        if r.status_code != expect:
            self.stats.errors[f"{what}_{r.status_code}"] += 1
            return None
        return r
