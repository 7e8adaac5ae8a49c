"""In-process CPU per request of ``POST /openrtb2/bid`` and ``POST /v1/ads:select``.

The catalogue and request pairs of ``adfunnel bench openrtb``
(:mod:`adfunnel.bench.openrtb`: same ads, seed, ISO regions, ``public_base_url``), the
embedded app built in this process (:func:`adfunnel.runtime.asgi.build_app`, system
clock, the start-up heap frozen, as ``adfunnel serve`` builds it) and called as ASGI
directly — no sockets, no load generator — so the figure is the server's
own CPU per request (``time.process_time``, all threads), steadier than the HTTP
benchmark on a shared machine. Routes alternate in ``rounds`` windows of ``n`` requests
each (the request pairs cycled); each route's figure is the median of its windows, µs.

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


async def _window(app: Any, path: str, bodies: list[bytes], n: int, start: int,
                  outcomes: dict[int, int]) -> float:
    """CPU seconds of ``n`` requests (bodies cycled from ``start``), one at a time."""
    statuses: list[int] = []

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
    return cpu


async def measure(app: Any, bodies: dict[str, list[bytes]], n: int, rounds: int,
                  profile: str | None) -> dict[str, Any]:
    """µs per request per route (median of windows; module doc)."""
    outcomes: dict[str, dict[int, int]] = {r: {} for r in PATHS}
    for route in PATHS:  # warm-up: first-use caches, first budget slices
        await _window(app, PATHS[route], bodies[route], n, 0, {})
    us: dict[str, list[float]] = {r: [] for r in PATHS}
    for k in range(rounds):
        for route in PATHS if k % 2 == 0 else list(PATHS)[::-1]:
            cpu = await _window(app, PATHS[route], bodies[route], n, (k + 1) * n,
                                outcomes[route])
            us[route].append(cpu / n * 1e6)
    out: dict[str, Any] = {r: {"us_per_request": round(statistics.median(v), 1),
                               "us_windows": [round(x, 1) for x in v],
                               "statuses": outcomes[r]} for r, v in us.items()}
    out["cpu_ratio"] = round(out["openrtb"]["us_per_request"]
                             / out["select"]["us_per_request"], 3)
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
        freeze_heap()  # as a server process does after its start-up
        result = asyncio.run(measure(app, bodies, a.n, a.rounds, a.profile))
    finally:
        rt.close()
    print(json.dumps({"ads": a.ads, "n": a.n, "rounds": a.rounds, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
