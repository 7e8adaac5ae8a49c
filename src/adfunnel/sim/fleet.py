"""The real fleet on the wall clock: N ad servers, the budget service and a tracker as
separate OS processes on PostgreSQL, driven by real HTTP load for a short run.

During the run a small-budget campaign exhausts, a campaign is paused (at 1/3 of the
run) and one ad server is killed with SIGKILL (at 1/2). The report gives, per
campaign, billed spend against the budget, absorbed overspend and how long it kept
winning auctions after it was paused or exhausted, and per server the change-stream
lag. Each run uses a fresh PostgreSQL schema (dropped afterwards).
"""

from __future__ import annotations

import random
import secrets
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import create_engine, text

from adfunnel.auth.keys import generate_key
from adfunnel.campaigns.migrate import upgrade
from adfunnel.internal_auth import internal_headers
from adfunnel.sim.invalid import PERSON_UA
from adfunnel.sim.server_proc import ManagedProcess

INTERESTS = ("cars", "news", "sports", "travel")


@dataclass
class FleetConfig:
    """A fleet run. ``rate`` is ad requests per second over all servers."""

    database_url: str = "postgresql://postgres@127.0.0.1:5432/test"
    #: the frequency-cap store every ad server shares (a fleet without one would not
    #: serve capped campaigns: adfunnel.frequency.scope)
    redis_url: str = "redis://127.0.0.1:6379"
    servers: int = 3
    duration_s: float = 120.0
    rate: float = 100.0
    control_interval_s: float = 10.0
    billed_every_s: float = 2.0
    #: Clicks per rendered CPC impression; the ad servers' pCTR prior is set to the same
    #: rate, so expected costs are calibrated (an uncalibrated pCTR shows up as absorbed
    #: overspend: the budget plane can only hold back what it expects to be billed).
    click_rate: float = 0.02
    driver_threads: int = 6
    seed: int = 1
    log_dir: Path | None = None


@dataclass(frozen=True)
class CampaignSpec:
    name: str
    bid_type: str
    bid_micros: int
    daily_budget_micros: int
    pacing_mode: str
    targeting: dict[str, Any] | None = None


CAMPAIGNS = (
    CampaignSpec("small-budget", "CPM", 5_000_000, 25_000, "accelerated"),
    CampaignSpec("paused-midway", "CPM", 4_500_000, 1_000_000_000, "accelerated"),
    CampaignSpec("paced-even", "CPM", 3_000_000, 20_000_000, "even"),
    CampaignSpec("cpc-cars", "CPC", 1_500_000, 60_000_000, "even",
                 {"attr": "interests", "in": ["cars"]}),
    CampaignSpec("broad-cheap", "CPM", 1_000_000, 1_000_000_000, "accelerated"),
)


@dataclass
class _Observed:
    requests: int = 0
    filled: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    serves: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_fleet(cfg: FleetConfig) -> dict[str, Any]:
    """Start the fleet, drive it for ``cfg.duration_s`` seconds and report."""
    schema = f"fleet_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_sqlalchemy_url(cfg.database_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in cfg.database_url else "?"
    url = f"{cfg.database_url}{sep}options={quote(f'-csearch_path={schema}')}"
    procs: list[ManagedProcess] = []
    try:
        upgrade(url)
        return _run(cfg, url, procs)
    finally:
        for p in procs:
            p.stop()
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def _sqlalchemy_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def _log(cfg: FleetConfig, name: str) -> Path | None:
    if cfg.log_dir is None:
        return None
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    return cfg.log_dir / f"{name}.log"


def _run(cfg: FleetConfig, url: str, procs: list[ManagedProcess]) -> dict[str, Any]:
    # one token secret, one admin key and one internal token for every process of the fleet
    env = {"ADFUNNEL_TOKEN_SECRET": secrets.token_hex(32), "ADFUNNEL_ADMIN_KEY": generate_key(),
           "ADFUNNEL_INTERNAL_TOKEN": secrets.token_hex(32)}
    budget = ManagedProcess(
        ["budget-service", "--database-url", url, "--control-interval-s",
         str(cfg.control_interval_s), "--billed-every-s", str(cfg.billed_every_s)],
        extra_env=env, log_path=_log(cfg, "budget-service"))
    procs.append(budget)
    env["ADFUNNEL_BUDGET_SERVICE_URL"] = budget.url
    env["ADFUNNEL_REDIS_URL"] = cfg.redis_url
    env["ADFUNNEL_PCTR_PRIOR"] = str(cfg.click_rate)
    serve = ["serve", "--database-url", url, "--clock", "system"]
    servers = [ManagedProcess(serve, health_path="/readyz", extra_env=env,
                              log_path=_log(cfg, f"adserver-{i}")) for i in range(cfg.servers)]
    procs.extend(servers)
    tracker = ManagedProcess(serve, health_path="/readyz", extra_env=env,
                             log_path=_log(cfg, "tracker"))
    procs.append(tracker)

    api = httpx.Client(base_url=servers[0].url, timeout=10.0, headers=servers[0].headers)
    ids = _create_campaigns(api)
    _wait_for_catalogs([*servers, tracker], expected_ads=len(ids))
    obs = _Observed()
    alive = list(servers)
    events: dict[str, float] = {}
    stop = threading.Event()
    t0 = time.time()
    states: list[tuple[float, dict[int, str]]] = []
    threads = [threading.Thread(target=_drive, args=(cfg, i, alive, tracker.url, obs, stop, t0))
               for i in range(cfg.driver_threads)]
    latest: dict[int, dict[str, Any]] = {}
    threads.append(threading.Thread(target=_monitor, args=(
        budget.url, env["ADFUNNEL_INTERNAL_TOKEN"], states, latest, stop)))
    for t in threads:
        t.start()
    _at(t0 + cfg.duration_s / 3)
    api.post(f"/v1/campaigns/{ids['paused-midway']}:pause").raise_for_status()
    events["paused_at"] = time.time()
    _at(t0 + cfg.duration_s / 2)
    victim = alive.pop()
    victim.kill()
    events["killed_at"] = time.time()
    _at(t0 + cfg.duration_s)
    stop.set()
    for t in threads:
        t.join()
    time.sleep(cfg.billed_every_s + 1.0)  # last beacons reach the ledger and the service
    _settle(api, ids)
    lags = {s.url: httpx.get(s.url + "/readyz", timeout=5).json() for s in alive}
    result = _report(cfg, api, ids, obs, events, t0, lags, states, latest)
    api.close()
    return result


def _create_campaigns(api: httpx.Client) -> dict[str, int]:
    ids: dict[str, int] = {}
    today = datetime.now(UTC).date().isoformat()
    for spec in CAMPAIGNS:
        adv = api.post("/v1/advertisers", json={"name": spec.name}).json()
        body: dict[str, Any] = {
            "advertiser_id": adv["id"], "name": spec.name,
            "objective": "clicks" if spec.bid_type == "CPC" else "impressions",
            "bid_type": spec.bid_type, "bid_micros": spec.bid_micros,
            "daily_budget_micros": spec.daily_budget_micros, "time_zone": "UTC",
            "flight_start": today, "pacing_mode": spec.pacing_mode,
            # the fleet's simulated clients fire only /i: bill on render
            "billable_event": "rendered",
        }
        if spec.targeting:
            body["targeting"] = spec.targeting
        r = api.post("/v1/campaigns", json=body)
        r.raise_for_status()
        cid = r.json()["id"]
        api.post(f"/v1/campaigns/{cid}/ads", json={
            "landing_url": f"https://{spec.name}.example/", "creative_ref": f"{spec.name}.png",
            "format": "banner", "width": 300, "height": 250}).raise_for_status()
        ids[spec.name] = cid
    return ids


def _wait_for_catalogs(procs: list[ManagedProcess], expected_ads: int) -> None:
    deadline = time.monotonic() + 10
    with httpx.Client(timeout=2) as client:  # one TLS context for every poll
        while time.monotonic() < deadline:
            if all(client.get(p.url + "/readyz").json().get("ads") == expected_ads
                   for p in procs):
                return
            time.sleep(0.05)
    raise RuntimeError("ad servers did not receive the campaigns in 10 s")


def _settle(api: httpx.Client, ids: dict[str, int], timeout_s: float = 30.0) -> None:
    """Waits until the campaigns' billed figures read the same twice, 2 s apart (at most
    ``timeout_s``): on a loaded machine the tracker, aggregator and rollups can trail the
    load's end by more than the fixed pause, and a report read early shows too little."""
    def billed() -> list[int]:
        return [api.get(f"/v1/campaigns/{cid}/report").json()["billed_micros"]
                for cid in ids.values()]
    deadline = time.time() + timeout_s
    last = billed()
    while time.time() < deadline:
        time.sleep(2.0)
        now = billed()
        if now == last:
            return
        last = now


def _at(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def _drive(cfg: FleetConfig, n: int, alive: list[ManagedProcess], tracker: str, obs: _Observed,
           stop: threading.Event, t0: float) -> None:
    rng = random.Random(cfg.seed * 1000 + n)
    period = cfg.driver_threads / cfg.rate
    http = httpx.Client(timeout=2.0, headers={"user-agent": PERSON_UA})  # people's beacons
    i = 0
    while not stop.is_set():
        _at(t0 + (i + n / cfg.driver_threads) * period)
        i += 1
        servers = list(alive)
        server = servers[rng.randrange(len(servers))]
        body = {
            "user": {"key": f"u{rng.randrange(10_000)}",
                     "attributes": {"geo.country": "US",
                                    "interests": [rng.choice(INTERESTS)]}},
            "placement": {"id": "feed"},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
        }
        try:
            r = http.post(server.url + "/v1/ads:select", json=body)
        except httpx.HTTPError as exc:
            with obs.lock:
                obs.requests += 1
                obs.errors[type(exc).__name__] += 1
            continue
        now = time.time()
        with obs.lock:
            obs.requests += 1
            if r.status_code not in (200, 204):
                obs.errors[f"select_{r.status_code}"] += 1
        if r.status_code != 200:
            continue
        for ad in r.json()["ads"]:
            with obs.lock:
                obs.filled += 1
                obs.serves[ad["campaign_id"]].append(now)
            if rng.random() < 0.9:
                http.get(tracker + ad["impression_url"])
                if ad["billing_type"] == "CPC" and rng.random() < cfg.click_rate:
                    http.get(tracker + ad["click_url"])
    http.close()


def _monitor(budget_url: str, token: str, states: list[tuple[float, dict[int, str]]],
             latest: dict[int, dict[str, Any]], stop: threading.Event) -> None:
    """Poll the budget service's per-campaign state twice a second (with the fleet's
    internal ``token``)."""
    http = httpx.Client(timeout=2.0, headers=internal_headers(token))
    while not stop.wait(0.5):
        try:
            rows = http.get(budget_url + "/v1/status").json()
        except httpx.HTTPError:
            continue
        states.append((time.time(), {r["campaign_id"]: r["state"] for r in rows}))
        latest.clear()
        latest.update({r["campaign_id"]: r for r in rows})
    http.close()


def _exhausted_since(states: list[tuple[float, dict[int, str]]], cid: int) -> float | None:
    """Start of the final run of ``exhausted`` states of ``cid`` (None if it ended open)."""
    since = None
    for t, by_id in states:
        if by_id.get(cid) != "exhausted":
            since = None
        elif since is None:
            since = t
    return since


def _report(cfg: FleetConfig, api: httpx.Client, ids: dict[str, int], obs: _Observed,
            events: dict[str, float], t0: float, lags: dict[str, Any],
            states: list[tuple[float, dict[int, str]]],
            latest: dict[int, dict[str, Any]]) -> dict[str, Any]:
    campaigns = []
    specs = {s.name: s for s in CAMPAIGNS}
    for name, cid in ids.items():
        spec = specs[name]
        rep = api.get(f"/v1/campaigns/{cid}/report").json()
        serves = obs.serves.get(cid, [])
        row: dict[str, Any] = {
            "campaign_id": cid, "name": name, "bid_type": spec.bid_type,
            "bid_micros": spec.bid_micros,
            "daily_budget_micros": spec.daily_budget_micros,
            "billed_micros": rep["billed_micros"],
            "absorbed_overspend_micros": rep["absorbed_overspend_micros"],
            "impressions": rep["impressions"], "clicks": rep["clicks"], "serves": len(serves),
            "final_state": latest.get(cid, {}).get("state"),
            "final_pacing_status": latest.get(cid, {}).get("status"),
            "final_p": latest.get(cid, {}).get("p"),
        }
        if name == "paused-midway":
            after = [t - events["paused_at"] for t in serves if t > events["paused_at"]]
            row["last_serve_after_pause_s"] = round(max(after, default=0.0), 3)
        t_ex = _exhausted_since(states, cid)
        row["exhausted_at_s"] = None if t_ex is None else round(t_ex - t0, 3)
        if t_ex is not None:
            after = [t - t_ex for t in serves if t > t_ex]
            row["last_serve_after_exhausted_s"] = round(max(after, default=0.0), 3)
        campaigns.append(row)
    return {
        "servers": cfg.servers, "duration_s": cfg.duration_s, "rate": cfg.rate,
        "requests": obs.requests, "filled_slots": obs.filled, "errors": dict(obs.errors),
        "paused_at_s": round(events["paused_at"] - t0, 3),
        "killed_server_at_s": round(events["killed_at"] - t0, 3),
        "campaigns": campaigns,
        "change_stream": {u: {"behind_s": v.get("behind_s"),
                              "last_apply_lag_s": v.get("last_apply_lag_s")}
                          for u, v in lags.items()},
    }
