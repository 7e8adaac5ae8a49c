"""The main job: replay real iPinYou traffic through a real adfunnel server over HTTP.

1. Start the server (embedded SQLite, manual clock) unless a URL is given.
2. Create one campaign per iPinYou advertiser through the advertiser API, with bids
   from the advertiser's real CPM or CPC (``train-info.txt``), targeting built from
   attributes present in the log, and daily budgets of which some bind.
3. Replay the log in timestamp order on the simulated clock (the server's clock is
   moved with ``PUT /v1/admin/clock``), one ad request per row, firing impression
   beacons for rendered ads and clicks from the click model below.
4. Read the ledger back through the API and report.

Click model (stated): a rendered ad is clicked with probability
``min(1, ctr_scale × its advertiser's real average CTR)``; ``ctr_scale`` defaults to 3
so that ~12.5k requests bill enough clicks to exercise CPC billing (1 = real rates).
Render model: 90 % of served ads render. Requests carry a 2 s deadline so that the
report depends on the seed only, not on the machine's load (the report counts late
decisions all the same). A few beacons are re-sent (duplicates) and a
few tokens are forged, to show that both are refused without loss.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import numpy as np

from adfunnel.money import MICROS_PER_FEN, MICROS_PER_UNIT
from adfunnel.sim.catalogue import CAMPAIGNS_PER_ADVERTISER, catalogue
from adfunnel.sim.invalid import HELD_OUT_PROVIDERS, InvalidTraffic, row_address
from adfunnel.sim.ipinyou import (
    ADVERTISERS,
    LogRow,
    default_logs,
    read_log,
    read_train_info,
    split_useragent,
)
from adfunnel.sim.ivt_recall import distinct_events, measure_ivt
from adfunnel.sim.learn import (
    BASE_CTR,
    MAX_CTR,
    SIGMA,
    AttributeClicks,
    last_day_figures,
    split_last_day,
    train_and_register,
)
from adfunnel.sim.potential import Bidder, judge_delivery, potential_micros
from adfunnel.sim.server_proc import auth_headers
from adfunnel.tracking.http import without_click_id
from adfunnel.tracking.token import verify

REPLAY_DEADLINE_MS = 2_000
#: Seconds the started server may take to answer /healthz.
START_TIMEOUT_S = 180.0
RENDER_RATE = 0.90
DUPLICATE_RATE = 0.03
FORGED_RATE = 0.005
SIZES = ("300x250", "728x90", "1000x90", "250x250", "336x280", "950x90", "200x200",
         "468x60", "120x240", "960x90")


@dataclass(frozen=True)
class CampaignPlan:
    """How one iPinYou advertiser is set up: bid type, daily budget (CNY) and targeting."""

    advertiser: str
    bid_type: str
    daily_budget_cny: float
    targeting: dict[str, Any] | None
    pacing_mode: str = "accelerated"
    frequency_caps: tuple[dict[str, Any], ...] = ()


#: The frequency cap of two replay campaigns (1458 and 3386): 3 serves per user per
#: local day.
CAP_3_PER_DAY = ({"level": "campaign", "count": 3, "window": "day"},)


def plans() -> list[CampaignPlan]:
    """The nine campaigns. The small CPM budgets (2259, 3358, 3476: 50-700 impressions)
    bind. Two large CPM campaigns (1458, 3386) are capped at 3 serves per user per day.
    Four campaigns pace evenly over the day (2259 binds; 1458, 2261, 2821 do not).
    The CPC budgets hold ten clicks at the bid: at this log's traffic a CPC campaign
    earns about one click a day, and a budget small enough to bind would be one or two
    clicks, where a day's delivery moves in steps of 50 %."""
    cities_a = ["219", "217", "233"]
    cities_b = ["222", "227", "220", "234"]
    banners = ["728x90", "1000x90", "950x90", "960x90", "468x60"]
    return [
        CampaignPlan("1458", "CPM", 500.0, {"attr": "geo.city", "in": cities_a}, "even",
                     CAP_3_PER_DAY),
        CampaignPlan("2259", "CPM", 0.4, {"attr": "geo.region", "in": ["CN-216"]}, "even"),
        CampaignPlan("2261", "CPC", 30.0, {"attr": "interests", "in": ["10063", "10006"]},
                     "even"),
        CampaignPlan("2821", "CPC", 15.0, {"attr": "slot_size", "in": ["300x250", "336x280"]},
                     "even"),
        CampaignPlan("2997", "CPC", 500.0, {"attr": "exchange", "in": ["1"]}),
        CampaignPlan("3358", "CPM", 0.05, {"all": [
            {"attr": "exchange", "not_in": ["3"]},
            {"attr": "interests", "in": ["10110", "10083", "10059"]}]}),
        CampaignPlan("3386", "CPM", 500.0, {"attr": "slot_size", "in": banners},
                     frequency_caps=CAP_3_PER_DAY),
        CampaignPlan("3427", "CPC", 500.0, {"not": {"attr": "geo.city", "in": cities_b}}),
        CampaignPlan("3476", "CPM", 0.05, {"all": [
            {"attr": "os", "in": ["windows"]}, {"attr": "browser", "in": ["chrome"]}]}),
    ]


def landing_url(advertiser: str) -> str:
    return f"https://adv{advertiser}.example/landing?src=adfunnel&adv={advertiser}&q=a%20b"


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
        self._unsettled = False  # beacons sent since the server's events last settled

    def close(self) -> None:
        self.http.close()

    # -- set-up -------------------------------------------------------------------
    def create_campaigns(self, start: datetime) -> None:
        """One advertiser, campaign and ten ads per iPinYou advertiser, via the API."""
        for plan in plans():
            info = read_train_info(plan.advertiser, self.data_root)
            adv = self._post("/v1/advertisers", {"name": f"iPinYou {plan.advertiser}"})
            bid_fen = info.cpm_fen if plan.bid_type == "CPM" else info.cpc_fen
            body = {
                "advertiser_id": adv["id"], "name": f"ipinyou-{plan.advertiser}",
                "objective": "impressions" if plan.bid_type == "CPM" else "clicks",
                "bid_type": plan.bid_type, "bid_micros": round(bid_fen * MICROS_PER_FEN),
                "daily_budget_micros": round(plan.daily_budget_cny * MICROS_PER_UNIT),
                "time_zone": "Asia/Shanghai", "flight_start": start.date().isoformat(),
                "pacing_mode": plan.pacing_mode,
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
                    "creative_ref": f"ipinyou/{plan.advertiser}/{size}.png",
                    "format": "banner", "width": w, "height": h,
                })
                self.landing[ad["id"]] = ad["landing_url"]

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
            campaign = self._post("/v1/campaigns",
                                  c.campaign_body(advertiser_id, start.date().isoformat()))
            self.catalogue_ids.add(campaign["id"])
            ad = self._post(f"/v1/campaigns/{campaign['id']}/ads", c.ad_body())
            self.landing[ad["id"]] = ad["landing_url"]

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
        t0 = time.perf_counter()
        r = self.http.post("/v1/ads:select", json=ad_request(row))
        s.latencies_ms.append((time.perf_counter() - t0) * 1000)
        if r.status_code == 204:
            return
        if r.status_code != 200:
            s.errors[f"select_{r.status_code}"] += 1
            return
        for ad in r.json()["ads"]:
            s.filled_slots += 1
            self.catalogue_slots += ad["campaign_id"] in self.catalogue_ids
            self._count_capped(row, ad["campaign_id"])
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

    # -- report -------------------------------------------------------------------
    def potential(self, rows: list[LogRow], pctr_prior: float) -> dict[int, dict[str, int]]:
        """Each of the nine campaigns' potential spend per local day at p = 1, by the
        replay's own model of the rows it could win (:mod:`adfunnel.sim.potential`),
        with the replay's click model of scaled average CTRs."""
        bidders = [Bidder(cid, r["bid_type"], r["bid_micros"], r["daily_budget_micros"],
                          c["plan"].targeting, frozenset(SIZES), r["time_zone"],
                          min(1.0, c["info"].ctr * self.ctr_scale), pctr_prior)
                   for cid, c in self.campaigns.items() for r in (c["record"],)]
        return potential_micros(rows, bidders, RENDER_RATE)

    def report(self, first: datetime, last: datetime) -> dict[str, Any]:
        s = self.stats
        lat = np.array(s.latencies_ms) if s.latencies_ms else np.zeros(1)
        campaigns = []
        pacing = self.http.get("/v1/budget/pacing")
        summary = pacing.json() if pacing.status_code == 200 else None
        refusals = summary["budget_refusals"] if summary else {}
        for cid, c in sorted(self.campaigns.items()):
            rep = self.http.get(f"/v1/campaigns/{cid}/report", params={
                "from": first.date().isoformat(), "to": last.date().isoformat()}).json()
            budget = c["record"]["daily_budget_micros"]
            refused = refusals.get(str(cid), {})
            days = [{"date": d["day"], "budget_micros": budget, "billed_micros": d["billed_micros"],
                     "absorbed_overspend_micros": d["absorbed_overspend_micros"],
                     "impressions": d["impressions"], "clicks": d["clicks"],
                     # refused for budget (exhausted, no slice) at least once that day
                     "budget_bound": (refused.get(d["day"], 0) > 0) if summary else None}
                    for d in rep["days"]]
            campaigns.append({
                "campaign_id": cid, "name": c["record"]["name"],
                "bid_type": c["record"]["bid_type"], "bid_micros": c["record"]["bid_micros"],
                "pacing_mode": c["record"]["pacing_mode"],
                "daily_budget_micros": budget, "billed_micros": rep["billed_micros"],
                "absorbed_overspend_micros": rep["absorbed_overspend_micros"],
                "impressions": rep["impressions"], "clicks": rep["clicks"],
                "budget_bound_days": sum(bool(d["budget_bound"]) for d in days),
                "days": days,
            })
        ledger = self.http.get("/v1/ledger/stats").json()
        serving = self.http.get("/v1/serving/stats").json()
        return {
            "requests": s.requests,
            "filled_slots": s.filled_slots,
            "fill_rate": round(s.filled_slots / s.requests, 4) if s.requests else 0.0,
            "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 3),
                           "p99": round(float(np.percentile(lat, 99)), 3)},
            "late_decisions": serving["late"],
            "committed_decisions": serving["decisions"] - serving["late"] - serving["shed"],
            "pacing": ({"steps": summary["steps"], "p_min": summary["p_min"]} if summary
                       else {"steps": None, "p_min": None}),
            "campaigns": campaigns,
            "ledger": {"rows": ledger["rows"], "duplicates_rejected": ledger["duplicates_rejected"],
                       "invalid_tokens": ledger["invalid_tokens"]},
            "fired": {"impressions": s.impressions_fired, "duplicates": s.duplicates_fired,
                      "clicks": s.clicks_fired, "forged": s.forged_fired,
                      "forged_refused": s.forged_refused, "bad_redirects": s.bad_redirects},
            "caps": self._caps_report(serving.get("rejections")),
            # null: no --catalogue campaigns were added
            "catalogue": ({"campaigns": len(self.catalogue_ids),
                           "filled_slots": self.catalogue_slots}
                          if self.catalogue_ids else None),
            "events": self._events_report(ledger),
            "errors": dict(s.errors),
            "click_model": (
                f"P(click | rendered) = min({MAX_CTR}, {BASE_CTR} x exp(sum of attribute "
                f"effects ~ N(0, {SIGMA}^2)))" if self.clicks is not None else
                f"P(click | rendered) = min(1, {self.ctr_scale} x advertiser avg CTR)"),
        }


    def _events_report(self, ledger: dict[str, Any]) -> dict[str, Any]:
        """Beacons sent, the ledger's rows and duplicates, invalid traffic flagged per
        reason (the server's counters) and what was injected. Whether an injected event
        billed is read from the ledger after the run (``run_replay``); the beacon-to-ledger
        lag is the server aggregator's (wall clock, tracker append to ledger commit)."""
        s = self.stats
        counters: dict[str, int] = ledger.get("counters", {})
        ivt: dict[str, int] = {}
        for name, n in counters.items():
            for event in ("impression", "click"):
                prefix = f"ivt_{event}_"
                if name.startswith(prefix):
                    reason = name[len(prefix):]
                    ivt[reason] = ivt.get(reason, 0) + n
        return {
            "sent": s.impressions_fired + s.duplicates_fired + s.clicks_fired,
            "billed": ledger["rows"],
            "duplicates": ledger["duplicates_rejected"],
            "ivt": dict(sorted(ivt.items())),
            "ivt_total": counters.get("ivt_impression", 0) + counters.get("ivt_click", 0),
            "ivt_by_event": {"impression": counters.get("ivt_impression", 0),
                             "click": counters.get("ivt_click", 0)},
            "injected_invalid": len(distinct_events((i, e) for i, e, _ in self.injected)),
            # filled from the ledger by run_replay (adfunnel.sim.ivt_recall); null when
            # not measured (--server: the replay cannot read the impression ids)
            "injected_by_source": None,
            "injected_invalid_flagged": None,
            "injected_invalid_billed": None,
            "genuine_events": None,
            "ivt_false_positives": None,
            "lag_ms": ledger.get("events", {}).get("lag_ms", {"p50": None, "p99": None}),
        }

    def _caps_report(self, rejections: dict[str, int] | None) -> dict[str, Any]:
        """The capped campaigns, the server's rejections for caps (from its decision
        counts) and the most serves one user got from one capped campaign in one local
        day (from the answers received)."""
        capped = sorted(cid for cid, c in self.campaigns.items() if c["plan"].frequency_caps)
        return {
            "campaigns": capped,
            "cap": {str(cid): self.campaigns[cid]["record"]["frequency_caps"] for cid in capped},
            # null: the server does not report its rejections (not measured)
            **{name: None if rejections is None else rejections.get(reason, 0)
               for name, reason in (("capped_rejections", "capped"),
                                    ("cap_unavailable", "cap_unavailable"),
                                    ("no_user_key", "no_user_key"))},
            "max_serves_per_user_window": (max(self.capped_serves.values())
                                           if self.capped_serves else None),
            "users_served_capped": len({u for u, _, _ in self.capped_serves}),
        }


def ad_request(row: LogRow) -> dict[str, Any]:
    """The ad request a feed would send for one log row."""
    device, os_name, browser = split_useragent(row.useragent)
    attrs: dict[str, Any] = {
        "geo.country": "CN", "geo.region": f"CN-{row.region}", "geo.city": row.city,
        "device_type": device, "os": os_name, "browser": browser,
    }
    if row.usertags:
        attrs["interests"] = list(row.usertags)
    return {
        "user": {"key": row.user, "attributes": attrs},
        "placement": {"id": row.slot_id, "exchange": row.exchange, "domain": row.domain,
                      "reserve_cpm_micros": row.slot_price_fen * MICROS_PER_FEN},
        "slots": [{"id": "s1", "position": 1, "width": row.width, "height": row.height,
                   "format": "banner", "visibility": row.visibility}],
        # a generous deadline: a replay checks decisions, not this machine's load, and a
        # late decision (204) would make the report depend on timing
        "deadline_ms": REPLAY_DEADLINE_MS,
    }


def run_replay(
    rows: list[LogRow],
    *,
    server: str | None = None,
    database_url: str | None = None,
    seed: int = 7,
    ctr_scale: float = 3.0,
    pctr_prior: float = 0.0005,
    speed: float | None = None,
    progress: Callable[[int], None] | None = None,
    workdir: Path | None = None,
    server_env: dict[str, str] | None = None,
    event_log: str | None = None,
    learn: bool = False,
    catalogue: int = 0,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Replay ``rows`` against ``server`` (with its admin key ``api_key``), or against a
    server started here (with an admin key of its own), and report.

    ``learn`` (not with ``server``; ValueError): click by :class:`AttributeClicks`, serve the days
    before the last, train a model on their served log, register it, serve the last day
    with it and report ``model`` (:mod:`adfunnel.sim.learn`).

    ``catalogue`` adds that many run-of-network CPC campaigns
    (:meth:`Replayer.create_catalogue`), so that requests have more candidates than the
    pre-rank keeps; with ``learn`` the started server then checks the pre-rank's recall
    on every model decision (``model.prerank_recall``).

    The started server uses ``database_url`` (default: a SQLite file in ``workdir`` or a
    temporary directory), a manual clock, and ``pctr_prior`` as its prior click rate.
    Its event log is in memory, or NATS JetStream at ``event_log`` (a stream of this
    run's own, deleted afterwards, read by the server's aggregator thread).
    """
    import tempfile

    from adfunnel.sim.server_proc import ServerProcess

    if learn and server is not None:
        raise ValueError("--learn trains on the served log and ledger of the server the "
                         "replay starts: it cannot be used with --server")
    first, last = first_last(rows)
    with tempfile.TemporaryDirectory() as tmp:
        work = workdir or Path(tmp)
        proc = None
        served_dir = work / "served-log"
        url = database_url or f"sqlite:///{work / 'replay.sqlite3'}"
        secret = None
        stream = f"ADFUNNEL_REPLAY_{secrets.token_hex(4).upper()}"
        if server is None:
            secret = secrets.token_hex(32)
            # every model decision with more candidates than the pre-rank keeps is checked
            recall_env = {"ADFUNNEL_RECALL_SAMPLE": "1.0"} if learn and catalogue else {}
            events_env = ({"ADFUNNEL_EVENT_LOG_URL": event_log, "ADFUNNEL_EVENT_STREAM": stream,
                           "ADFUNNEL_SPOOL_DIR": str(work / "spool")} if event_log else {})
            # a start-up deadline, not a measurement: a loaded machine starts slowly
            proc = ServerProcess(url, clock="manual", log_path=work / "server.log",
                                 timeout_s=START_TIMEOUT_S,
                                 extra_env={"ADFUNNEL_PCTR_PRIOR": str(pctr_prior),
                                            "ADFUNNEL_SEED": str(seed),
                                            "ADFUNNEL_SERVED_LOG_DIR": str(served_dir),
                                            "ADFUNNEL_TOKEN_SECRET": secret,
                                            # beacons come through this loopback "proxy"
                                            # with the log row's address
                                            "ADFUNNEL_TRUSTED_PROXIES": '["127.0.0.1/32"]',
                                            # the manual clock does not move between a
                                            # serve and its click: no delay to judge
                                            "ADFUNNEL_IVT_MIN_CLICK_DELAY_MS": "0",
                                            # rollups once per quarter-hour of the log:
                                            # the clock moves every request, and the
                                            # report reads the ledger
                                            "ADFUNNEL_ROLLUP_REFRESH_S": "900",
                                            # the lists the injected addresses come
                                            # from: the filter's recall on lists it
                                            # has not seen (adfunnel.sim.invalid)
                                            "ADFUNNEL_IVT_HELD_OUT_LISTS":
                                                json.dumps(HELD_OUT_PROVIDERS),
                                            **recall_env, **events_env,
                                            **(server_env or {})})
            server = proc.url
            api_key = proc.admin_key
        replayer = Replayer(server, seed=seed, ctr_scale=ctr_scale, speed=speed,
                            token_key=secret.encode() if secret else None, api_key=api_key)
        learned: dict[str, Any] | None = None
        try:
            replayer.http.put("/v1/admin/clock", json={"now": first.isoformat()})
            replayer.create_campaigns(first)
            replayer.create_catalogue(rows, first, catalogue)
            if learn:
                replayer.clicks = AttributeClicks(seed)
                before, last_day = split_last_day(rows)
                replayer.replay(before, progress)
                day_start = last_day[0].timestamp.replace(hour=0, minute=0, second=0,
                                                          microsecond=0)
                learned = train_and_register(replayer.http, served_dir, url, work / "model",
                                             day_start)
                replayer.replay(last_day, progress)
                learned["serving"] = replayer.http.get("/v1/serving/stats").json().get("model")
                learned["fallbacks"] = _fallbacks(replayer.http.get("/metrics").text)
                learned["last_day_decisions"] = len(last_day)
            else:
                replayer.replay(rows, progress)
            report = replayer.report(first, last)
            report["delivery"] = judge_delivery(report["campaigns"],
                                                replayer.potential(rows, pctr_prior))
        finally:
            replayer.close()
            if proc is not None:
                proc.stop()  # a graceful stop: the served log's queue is written out
                if event_log:
                    _delete_stream(event_log, stream)
        report["served_log"] = (served_log_summary(served_dir, url, last, report)
                                if proc is not None else None)
        report["model"] = (_model_report(learned, served_dir, url, rows, pctr_prior)
                           if learned is not None else None)
        if proc is not None:
            measure_ivt(report["events"], replayer.injected, replayer.genuine, url)
        return report


def _fallbacks(metrics: str) -> int:
    """Decisions that fell back to the pre-rank scores, from ``/metrics``."""
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("adfunnel_model_fallback_total{")))


def _model_report(learned: dict[str, Any], served_dir: Path, url: str, rows: list[LogRow],
                  pctr_prior: float) -> dict[str, Any]:
    """``model``: the version trained and served, its figures on the last day's billed
    events next to the smoothed-rate baseline's, its fallback share and pre-rank recall."""
    _, last_day = split_last_day(rows)
    day_start = last_day[0].timestamp.replace(hour=0, minute=0, second=0, microsecond=0)
    version = learned["model_version"]
    figures = last_day_figures(served_dir, url, version, day_start, pctr_prior, 1_000.0)
    model = figures["model"] or {}
    serving = learned.get("serving") or {}
    recall = serving.get("prerank_recall") or {}
    decisions = learned["last_day_decisions"]
    return {
        "version": version,
        "trained_rows": learned["trained_rows"], "trained_clicks": learned["trained_clicks"],
        "held_out": learned.get("metrics"),
        "last_day_rows": figures["rows"],
        "normalized_entropy": model.get("normalized_entropy"),
        "calibration_ratio": model.get("calibration_ratio"),
        "auc": model.get("auc"),
        "fallback_share": round(learned["fallbacks"] / decisions, 4) if decisions else None,
        # share of checked decisions whose best candidate by the model the pre-rank kept;
        # null when no decision had more candidates than the pre-rank keeps
        "prerank_recall": recall.get("recall"),
        "prerank_recall_checked": recall.get("checked"),
        "baseline": figures["baseline"],
    }


def _delete_stream(url: str, stream: str) -> None:
    """Remove the run's JetStream stream (its events are in the ledger by now)."""
    from adfunnel.events.jetstream_log import JetStreamEventLog

    log = JetStreamEventLog(url, stream=stream, subject_prefix=f"adfunnel.{stream.lower()}")
    try:
        log.delete_stream()
    finally:
        log.close()


def served_log_summary(directory: Path, database_url: str, last: datetime,
                       report: dict[str, Any]) -> dict[str, Any]:
    """What the started server's served log holds after the replay, compacted to Parquet
    and read back with DuckDB: decisions logged against those committed, winners against
    filled slots, and the join with the ledger (the trainer's input): winners, those with
    a billed impression and with a click."""
    from adfunnel.db import make_engine
    from adfunnel.events.compactor import compact
    from adfunnel.learn.query import billed_events, join_served_with_billed, query

    compact(directory, last + timedelta(days=1))
    [(records, winners)] = query(directory, "select count(*), coalesce(sum(len(winners)), 0) "
                                            "from served")
    engine = make_engine(database_url)
    try:
        joined = join_served_with_billed(directory, billed_events(engine))
    finally:
        engine.dispose()
    return {
        "records": records,
        "decisions_committed": report.get("committed_decisions"),
        "winners": winners,
        "training_rows": joined.num_rows,
        "impressed": sum(joined.column("impressed").to_pylist()),
        "clicked": sum(joined.column("clicked").to_pylist()),
    }


def load_rows(limit: int | None = None, data_root: Path | None = None) -> list[LogRow]:
    rows = read_log(default_logs(data_root))
    return rows[:limit] if limit else rows


def first_last(rows: list[LogRow]) -> tuple[datetime, datetime]:
    return rows[0].timestamp, rows[-1].timestamp


__all__ = ["ADVERTISERS", "Replayer", "ad_request", "first_last", "load_rows", "plans",
           "run_replay"]
