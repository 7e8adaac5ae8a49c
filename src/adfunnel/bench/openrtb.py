"""OpenRTB benchmark: ``POST /openrtb2/bid`` against ``POST /v1/ads:select`` over HTTP,
on one server, one catalogue, one run.

``run_openrtb_bench(ads, workers, concurrency, duration_s, rounds)``:

1. the catalogue and the server of ``bench http`` (:mod:`adfunnel.bench.http_workload`,
   :mod:`adfunnel.bench.http_server`), with one change to the catalogue: ``geo.region``
   targeting holds ISO 3166-2 codes (``CN-216`` for the log's region 216), since that is
   what an OpenRTB ``device.geo.region`` becomes in our request (:mod:`adfunnel.openrtb.mapping`);
   the server gets ``public_base_url`` (https), so a ``secure`` imp can be bid on;
2. a request pair per workload row (the index benchmark's ``real`` requests): a
   Prebid-like OpenRTB 2.6 ``BidRequest`` (:func:`bid_request`: ``site`` with
   publisher, ``device`` with ``ua``/``ip``/``geo``/``language``/``devicetype``,
   ``user`` with ``id``/``buyeruid``/consent ``ext``, one ``imp`` with ``banner.format[]``,
   ``bidfloor``, ``secure``, ``tagid`` and Prebid's ``ext``, ``tmax``, ``at``, ``cur``,
   ``bcat``/``badv``, ``source`` with ``schain``, ``regs``, Prebid's request ``ext``) and
   the select request it maps to (:func:`request_pair`: the server's own mapping of the
   bid request, encoded as a select body), so both ask for the same thing — same
   placement, slot, floor, user key, attributes, block lists and deadline. What OpenRTB
   does not carry into our request is left out of both: ``interests`` and ``audiences``
   (``user.data`` is not mapped) and ``exchange`` (only an exchange key names it);
3. a warm-up window of each route; the first :data:`PAIRED` pairs sent once to each
   route (:func:`same_answers`: do both fill the same rows with the same ad?); then
   ``rounds`` rounds, each a window of
   ``duration_s / rounds`` seconds on each route, the order alternating (select first in
   even rounds), so drift of the shared machine falls on both alike. The load generator
   is the asyncio client of :mod:`adfunnel.bench.overload` (a closed loop on
   ``concurrency`` keep-alive connections) in this process.

Result (per route under ``select`` and ``openrtb``; latency client-side, ms):
``decisions_per_s`` (answers decided in time — 200, or 204 ``no_fill`` — per second of
the route's windows), ``fill_rate`` (200 ÷ decided), ``p50_ms``/``p99_ms`` over every
answer of every window, ``p99_ms_windows``, ``busy_cores`` (server CPU ÷ wall),
``per_core`` (decisions/s ÷ busy cores), ``load_generator_busy_cores``, shed and late
shares, ``request_bytes`` (mean body size); ``paired_fill_agreement`` and
``paired_same_ad`` (:func:`same_answers`); and ``rate_ratio`` (OpenRTB ÷ select
decisions/s), ``targets`` (rate ≥ 80 % of select's, OpenRTB p99 ≤ 25 ms: met or not),
the load settings, the machine's load average before and after (``os.getloadavg``).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np
import uvloop

from adfunnel.bench.http_server import BenchServer, cpu_seconds, generator_cpu_seconds
from adfunnel.bench.http_workload import DEADLINE_MS, SELECT_PATH, catalogue
from adfunnel.bench.overload import Tally, drive_requests, encode_request
from adfunnel.openrtb.endpoint import BID_PATH
from adfunnel.openrtb.mapping import MappingConfig, map_request
from adfunnel.openrtb.request import decode_bid_request
from adfunnel.targeting.expr import All, Any_, Expr, In, Not, NotIn

#: the server's ``openrtb_network_margin_ms`` (its default): ``tmax`` = deadline + it
NETWORK_MARGIN_MS = 10
TMAX_MS = DEADLINE_MS + NETWORK_MARGIN_MS
#: ``imp.bidfloor`` (USD CPM) of every bid request: 100,000 micros, the select's reserve
FLOOR_CPM = 0.1
#: the server's ``public_base_url``: https, so ``imp.secure = 1`` imps can be bid on
BASE_URL = "https://ads.adfunnel.example"
COUNTRY3 = {"CN": "CHN"}
#: targets of issue #28's "Speed"
TARGET_RATE_RATIO = 0.8
TARGET_P99_MS = 25.0
ROUTES = ("select", "openrtb")
#: request pairs sent once to each route before the timed windows (:func:`same_answers`)
PAIRED = 200
#: desktop user agents telling ua-parser the log's (os, browser); ``{v}``: a version
_UAS = {
    ("windows", "ie"): "Mozilla/5.0 (Windows NT 6.1; WOW64; Trident/7.0; rv:11.0) like Gecko",
    ("windows", "chrome"): "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
                           "(KHTML, like Gecko) Chrome/{v}.0.0.0 Safari/537.36",
    ("windows", "firefox"): "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:{v}.0) "
                            "Gecko/20100101 Firefox/{v}.0",
    ("windows", "maxthon"): "Mozilla/5.0 (Windows NT 6.1; WOW64) AppleWebKit/537.36 (KHTML, "
                            "like Gecko) Maxthon/4.4.3.4000 Chrome/30.0.1599.101 Safari/537.36",
    ("windows", "opera"): "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
                          "(KHTML, like Gecko) Chrome/{v}.0.0.0 Safari/537.36 OPR/106.0.0.0",
    ("mac", "safari"): "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 "
                       "(KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    ("mac", "chrome"): "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 "
                       "(KHTML, like Gecko) Chrome/{v}.0.0.0 Safari/537.36",
    ("android", "chrome"): "Mozilla/5.0 (Linux; Android 13; Pixel 7) AppleWebKit/537.36 "
                           "(KHTML, like Gecko) Chrome/{v}.0.0.0 Mobile Safari/537.36",
}
#: a size no log slot has: listed second in ``format[]``, so the mapping keeps the first
_SECOND_FORMAT = {"w": 320, "h": 50}
_BCAT = ["IAB25", "IAB26", "IAB7-39", "IAB8-18", "IAB9-9"]
_BADV = ["competitor.example", "blocked-brand.example"]


def run_openrtb_bench(ads: int = 100_000, workers: int = 1, concurrency: int = 16,
                      duration_s: float = 20.0, rounds: int = 4, *, seed: int = 1,
                      warmup_s: float = 2.0, log_path: Path | None = None,
                      db_path: Path | None = None,
                      start_timeout_s: float = 1_800.0) -> dict[str, Any]:
    """Populate, start ``adfunnel serve``, drive both routes alternately (module doc).

    ``duration_s``: measured seconds per route, split over ``rounds`` windows.
    ``db_path``: keep the SQLite catalogue there, or reuse it (written by this benchmark
    with the same ``ads`` and ``seed``: its regions are ISO, unlike ``bench http``'s).

    Raises:
        ValueError: ``ads``, ``workers``, ``concurrency`` or ``rounds`` below 1.
        RuntimeError: the server does not become ready within ``start_timeout_s``.
    """
    if min(ads, workers, concurrency, rounds) < 1:
        raise ValueError("ads, workers, concurrency and rounds must be at least 1")
    load_before = os.getloadavg()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        url, reqs, source = catalogue(db_path or Path(tmp) / "openrtb-bench.sqlite3", ads,
                                      seed, iso_regions)
        pairs = [request_pair(r, n) for n, r in enumerate(reqs)]
        bodies = {"select": [s for s, _ in pairs], "openrtb": [o for _, o in pairs]}
        paths = {"select": SELECT_PATH, "openrtb": BID_PATH}
        setup: dict[str, float] = {"populate_s": round(time.monotonic() - t0, 2)}
        with BenchServer(url, workers, log_path, start_timeout_s,
                         extra_env={"ADFUNNEL_PUBLIC_BASE_URL": BASE_URL}) as server:
            setup["setup_s"] = round(time.monotonic() - t0, 2)
            host = server.url.removeprefix("http://").split(":")[0]
            wire = {r: [encode_request(host, "POST", paths[r], b) for b in bodies[r]]
                    for r in ROUTES}
            for route in ROUTES:  # first-use caches, first budget slices: not counted
                if warmup_s > 0:
                    _window(server, wire[route], concurrency, warmup_s)
            same = same_answers(server.url, bodies["select"][:PAIRED], bodies["openrtb"][:PAIRED])
            windows: dict[str, list[Window]] = {r: [] for r in ROUTES}
            for k in range(rounds):
                for route in ROUTES if k % 2 == 0 else ROUTES[::-1]:
                    windows[route].append(_window(server, wire[route], concurrency,
                                                  duration_s / rounds))
    sides = {r: _side(windows[r], bodies[r]) for r in ROUTES}
    return _report(sides, {**same,
        "ads": ads, "workers": workers, "concurrency": concurrency,
        "duration_s_per_route": duration_s, "rounds": rounds,
        "window_s": round(duration_s / rounds, 3), "warmup_s_per_route": warmup_s,
        "deadline_ms": DEADLINE_MS, "tmax_ms": TMAX_MS, "load_generator": "python",
        "workload": source, "seed": seed, "requests": len(pairs),
        "budget": os.environ.get("ADFUNNEL_BUDGET", "service"),
        "cpu_count": os.cpu_count(), **setup,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()]})


# ---- the requests -----------------------------------------------------------------------


def iso_regions(expr: Expr) -> Expr:
    """``expr`` with every ``geo.region`` value an ISO 3166-2 code (``216`` → ``CN-216``,
    the log being China's), as OpenRTB's ``device.geo.region`` maps to."""
    if isinstance(expr, In | NotIn):
        if expr.attr != "geo.region":
            return expr
        return type(expr)(expr.attr, frozenset(_iso_region(v) for v in expr.values))
    if isinstance(expr, Not):
        return Not(iso_regions(expr.child))
    assert isinstance(expr, All | Any_)
    return type(expr)(tuple(iso_regions(c) for c in expr.children))


def _iso_region(value: str) -> str:
    return value if "-" in value else f"CN-{value}"


def bid_request(req: dict[str, frozenset[str]], n: int) -> dict[str, Any]:
    """The ``n``-th workload request as a Prebid-like OpenRTB 2.6 ``BidRequest``: the
    shape of a Prebid Server request to a bidder (``site``, ``device`` with ``ua``, ``ip``
    and ``geo``, ``user``, ``imp`` with ``banner.format[]``, ``bidfloor``, ``tagid``,
    ``source.schain``, Prebid's ``ext`` objects), with the row's values."""
    one = {k: min(v) for k, v in req.items() if v and k not in ("interests", "audiences")}
    w, h = (int(x) for x in one.get("slot_size", "300x250").split("x"))
    domain = one.get("domain", "news.example")
    ua = _UAS.get((one.get("os", ""), one.get("browser", "")),
                  _UAS[("windows", "chrome")]).format(v=109 + n % 12)
    geo: dict[str, Any] = {"country": COUNTRY3.get(one.get("geo.country", "CN"), "CHN"),
                           "type": 2, "ipservice": 3}
    if "geo.region" in one:
        geo["region"] = one["geo.region"]
    if "geo.city" in one:
        geo["city"] = one["geo.city"]
    user = f"u{n % 997}"
    return {
        "id": f"bench-{n}", "at": 2, "tmax": TMAX_MS, "cur": ["USD"],
        "imp": [{"id": "1", "tagid": "ipinyou", "secure": 1,
                 "banner": {"format": [{"w": w, "h": h}, _SECOND_FORMAT], "pos": 1,
                            "topframe": 1},
                 "bidfloor": FLOOR_CPM, "bidfloorcur": "USD",
                 "ext": {"gpid": f"/1234/{domain[:8]}/ipinyou",
                         "data": {"pbadslot": "ipinyou", "adserver": {
                             "name": "gam", "adslot": f"/1234/{domain[:8]}/ipinyou"}},
                         "prebid": {"bidder": {"adfunnel": {"placement": "ipinyou"}}}}}],
        "site": {"id": f"site-{domain[:6]}", "domain": domain,
                 "page": f"https://{domain}/news/{n % 50}.html",
                 "ref": "https://www.baidu.com/", "cat": ["IAB12"],
                 "publisher": {"id": "pub-ipinyou", "domain": domain},
                 "ext": {"amp": 0}},
        "device": {"ua": ua, "ip": f"123.{n % 250}.{(n // 250) % 250}.0",
                   "geo": geo, "language": "zh", "devicetype": 2, "js": 1, "dnt": 0,
                   "w": 1920, "h": 1080, "connectiontype": 2,
                   "sua": {"source": 2, "platform": {"brand": one.get("os", "windows")},
                           "browsers": [{"brand": one.get("browser", "chrome")}],
                           "mobile": 0}},
        "user": {"id": user, "buyeruid": f"b-{user}",
                 "ext": {"eids": [{"source": "pubcid.org",
                                   "uids": [{"id": f"pc-{user}", "atype": 1}]}]}},
        "regs": {"coppa": 0, "ext": {"us_privacy": "1---"}},
        "source": {"tid": f"tid-{n}", "schain": {
            "ver": "1.0", "complete": 1, "nodes": [
                {"asi": "ssp.example", "sid": "12345", "hp": 1, "rid": f"bench-{n}"},
                {"asi": "prebid.example", "sid": "pbs-1", "hp": 1}]}},
        "bcat": _BCAT, "badv": _BADV,
        "ext": {"prebid": {"targeting": {"pricegranularity": "medium",
                                         "includewinners": True},
                           "cache": {"bids": {}}, "channel": {"name": "web"}}},
    }


def request_pair(req: dict[str, frozenset[str]], n: int) -> tuple[bytes, bytes]:
    """(select body, OpenRTB body) of the ``n``-th workload request: the select body is
    the bid request as the server maps it (:func:`map_request`, deployment defaults),
    so both routes ask for the same ad (module doc).

    Raises:
        AssertionError: the bid request maps to no ad request.
    """
    ortb = msgspec.json.encode(bid_request(req, n))
    mapped = map_request(decode_bid_request(ortb),
                         MappingConfig(network_margin_ms=NETWORK_MARGIN_MS))
    if mapped.select is None:
        raise AssertionError(f"bid request {n} maps to no ad request: {mapped.no_bid}")
    return msgspec.json.encode(mapped.select), ortb


def same_answers(url: str, select: list[bytes], openrtb: list[bytes]) -> dict[str, Any]:
    """Each pair sent once to each route, one after the other (untimed): the share of
    pairs both fill or both leave unfilled (``paired_fill_agreement``), and of those both
    fill, the share won by the same ad (``paired_same_ad``; pacing coins and
    exploration may part them)."""
    agree = both = same_ad = 0
    with httpx.Client(base_url=url, timeout=30.0,
                      headers={"content-type": "application/json"}) as http:
        for s, o in zip(select, openrtb, strict=True):
            a, b = http.post(SELECT_PATH, content=s), http.post(BID_PATH, content=o)
            agree += (a.status_code == 200) == (b.status_code == 200)
            if a.status_code == b.status_code == 200:
                both += 1
                same_ad += (str(a.json()["ads"][0]["ad_id"])
                            == b.json()["seatbid"][0]["bid"][0]["adid"])
    return {"paired_requests": len(select),
            "paired_fill_agreement": round(agree / len(select), 4) if select else None,
            "paired_same_ad": round(same_ad / both, 4) if both else None}


# ---- the load -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """One load window: what the clients saw and the CPU both sides spent."""

    tally: Tally
    wall_s: float
    server_cpu_s: float
    generator_cpu_s: float


def _window(server: BenchServer, wire: list[bytes], concurrency: int,
            seconds: float) -> Window:
    pids = server.pids()
    gen0, cpu0, t0 = generator_cpu_seconds(), cpu_seconds(pids), time.monotonic()
    tally = uvloop.run(drive_requests(server.url, concurrency, seconds, wire))
    wall = time.monotonic() - t0
    return Window(tally, wall, cpu_seconds(pids) - cpu0, generator_cpu_seconds() - gen0)


def _side(windows: list[Window], bodies: list[bytes]) -> dict[str, Any]:
    """One route's figures over its windows (module doc)."""
    outcomes: dict[str, int] = {}
    for w in windows:
        for k, v in w.tally.outcomes.items():
            outcomes[k] = outcomes.get(k, 0) + v
    wall = sum(w.wall_s for w in windows)
    cpu = sum(w.server_cpu_s for w in windows)
    answers = sum(outcomes.values())
    filled, no_fill = outcomes.get("200", 0), outcomes.get("204:no_fill", 0)
    decided = filled + no_fill
    rate = decided / wall if wall > 0 else 0.0
    busy = cpu / wall if wall > 0 else 0.0
    lat = np.concatenate([np.asarray(w.tally.latencies_ms) for w in windows]
                         ) if answers else np.zeros(1)
    known = ("200", "204:no_fill", "204:shed", "204:late")
    return {
        "decisions_per_s": round(rate, 1),
        "per_core": round(rate / busy, 1) if busy > 0 else None,
        "busy_cores": round(busy, 3),
        "load_generator_busy_cores": round(sum(w.generator_cpu_s for w in windows) / wall, 3)
        if wall > 0 else None,
        "fill_rate": round(filled / decided, 4) if decided else None,
        "p50_ms": round(float(np.percentile(lat, 50)), 2),
        "p99_ms": round(float(np.percentile(lat, 99)), 2),
        "p99_ms_windows": [w.tally.summary()["p99_ms"] for w in windows],
        "decisions_per_s_windows": [
            round((w.tally.outcomes.get("200", 0) + w.tally.outcomes.get("204:no_fill", 0))
                  / w.wall_s, 1) for w in windows],
        "shed_share": round(outcomes.get("204:shed", 0) / answers, 4) if answers else None,
        "late_share": round(outcomes.get("204:late", 0) / answers, 4) if answers else None,
        "answers": answers, "outcomes": outcomes,
        "errors": sum(w.tally.errors for w in windows)
        + sum(v for k, v in outcomes.items() if k not in known),
        "server_cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
        "request_bytes": round(sum(map(len, bodies)) / len(bodies)),
    }


def _report(sides: dict[str, dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    sel, rtb = sides["select"], sides["openrtb"]
    ratio = (rtb["decisions_per_s"] / sel["decisions_per_s"]
             if sel["decisions_per_s"] else None)
    per_core_ratio = (rtb["per_core"] / sel["per_core"]
                      if rtb["per_core"] and sel["per_core"] else None)
    return {
        **settings, "select": sel, "openrtb": rtb,
        "rate_ratio": None if ratio is None else round(ratio, 3),
        "per_core_ratio": None if per_core_ratio is None else round(per_core_ratio, 3),
        "targets": {
            "rate_ratio_min": TARGET_RATE_RATIO, "p99_ms_max": TARGET_P99_MS,
            "rate_met": ratio is not None and ratio >= TARGET_RATE_RATIO,
            "p99_met": rtb["answers"] > 0 and rtb["p99_ms"] <= TARGET_P99_MS},
    }
