"""In-process CPU per request of ``POST /openrtb2/bid`` and ``POST /v1/ads:select``.

The catalogue and request pairs of ``adfunnel bench openrtb``
(:mod:`adfunnel.bench.openrtb`: same ads, seed, ISO regions, ``public_base_url``), the
embedded app built in this process (:func:`adfunnel.runtime.asgi.build_app`, system
clock, the start-up heap frozen, as ``adfunnel serve`` builds it) and called as ASGI
directly — no sockets, no load generator — so the figure is the server's
own CPU per request (``time.process_time``, all threads), steadier than the HTTP
benchmark on a shared machine. Routes alternate in ``rounds`` windows of ``n`` requests
each (the request pairs cycled); each route's figure is the median of its windows, µs:
``us_per_request`` in all, and ``us_outside_decide`` without the decider's ``decide``
(the funnel both routes share, most of the CPU and most of its noise): each route's
own work.

python -m benchmarks.openrtb_cpu --db /tmp/ortb.sqlite3 --n 2000 --rounds 6 [--profile R]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from adfunnel.bench.http import SELECT_PATH, catalogue
from adfunnel.bench.openrtb import BASE_URL, iso_regions, request_pair
from adfunnel.openrtb.endpoint import BID_PATH
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.runtime.heap import freeze_heap
from adfunnel.settings import load_settings

PATHS = {"select": SELECT_PATH, "openrtb": BID_PATH}


def _scope(path: str, body: bytes) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "scheme": "http", "http_version": "1.1",
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000),
            "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                        (b"content-length", b"%d" % len(body))]}


#: CPU seconds spent in the decider's ``decide`` (the shared funnel), while counted
DECIDE_CPU = [0.0]


def count_decide_cpu(decider: Any) -> None:
    """Add the CPU of each ``decider.decide`` call to :data:`DECIDE_CPU` (the route's own
    work is the rest: parsing, mapping, pricing, markup, answer, HTTP-free framing)."""
    decide = decider.decide

    def counted(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return decide(*args, **kwargs)
        finally:
            DECIDE_CPU[0] += time.process_time() - t0

    decider.decide = counted


async def _window(app: Any, path: str, bodies: list[bytes], n: int, start: int,
                  outcomes: dict[int, int]) -> tuple[float, float]:
    """(CPU seconds, of which in ``decide``) of ``n`` requests (bodies cycled from
    ``start``), one at a time."""
    statuses: list[int] = []
    DECIDE_CPU[0] = 0.0

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    cpu0 = time.process_time()
    for k in range(n):
        body = bodies[(start + k) % len(bodies)]

        async def receive(body: bytes = body) -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await app(_scope(path, body), receive, send)
    cpu = time.process_time() - cpu0
    for s in statuses:
        outcomes[s] = outcomes.get(s, 0) + 1
    return cpu, DECIDE_CPU[0]


async def measure(app: Any, bodies: dict[str, list[bytes]], n: int, rounds: int,
                  profile: str | None) -> dict[str, Any]:
    """µs per request per route (median of windows; module doc)."""
    outcomes: dict[str, dict[int, int]] = {r: {} for r in PATHS}
    for route in PATHS:  # warm-up: first-use caches, first budget slices
        await _window(app, PATHS[route], bodies[route], n, 0, {})
    us: dict[str, list[float]] = {r: [] for r in PATHS}
    own: dict[str, list[float]] = {r: [] for r in PATHS}
    for k in range(rounds):
        for route in PATHS if k % 2 == 0 else list(PATHS)[::-1]:
            cpu, decide = await _window(app, PATHS[route], bodies[route], n, (k + 1) * n,
                                        outcomes[route])
            us[route].append(cpu / n * 1e6)
            own[route].append((cpu - decide) / n * 1e6)
    out: dict[str, Any] = {r: {"us_per_request": round(statistics.median(v), 1),
                               "us_outside_decide": round(statistics.median(own[r]), 1),
                               "us_windows": [round(x, 1) for x in v],
                               "us_outside_decide_windows": [round(x, 1) for x in own[r]],
                               "statuses": outcomes[r]} for r, v in us.items()}
    out["cpu_ratio"] = round(out["openrtb"]["us_per_request"]
                             / out["select"]["us_per_request"], 3)
    out["outside_decide_extra_us"] = round(out["openrtb"]["us_outside_decide"]
                                           - out["select"]["us_outside_decide"], 1)
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        await _window(app, PATHS[profile], bodies[profile], n, 0, {})
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(60)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(40)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ads", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--db", required=True, help="SQLite catalogue (written when missing)")
    p.add_argument("--n", type=int, default=2_000, help="requests per window")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--profile", choices=list(PATHS), default=None,
                   help="cProfile one more window of this route (to stderr)")
    a = p.parse_args(argv)
    url, reqs, _ = catalogue(Path(a.db), a.ads, a.seed, iso_regions)
    pairs = [request_pair(r, n) for n, r in enumerate(reqs)]
    bodies = {"select": [s for s, _ in pairs], "openrtb": [o for _, o in pairs]}
    settings = load_settings(database_url=url, clock="system", public_base_url=BASE_URL)
    rt = build_runtime(settings)
    try:
        app = build_app(rt)
        count_decide_cpu(rt.decider)
        freeze_heap()  # as a server process does after its start-up
        result = asyncio.run(measure(app, bodies, a.n, a.rounds, a.profile))
    finally:
        rt.close()
    print(json.dumps({"ads": a.ads, "n": a.n, "rounds": a.rounds, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
