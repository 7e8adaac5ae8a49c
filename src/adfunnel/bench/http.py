"""HTTP benchmark: the real ``adfunnel serve`` holding a large catalogue, under load —
the run's steps, its load windows and its report.

``run_http_bench(ads, workers, concurrency, duration_s)``:

1. writes the catalogue database (:mod:`adfunnel.bench.http_workload`: ``ads``
   campaigns of one ad each, targeting drawn from the iPinYou log's attribute
   distributions as the index benchmark draws it, every ad CPM);
2. starts ``adfunnel serve --workers W`` (embedded default: that SQLite file, the
   in-process budget & pacing service, the system clock) as a subprocess and waits
   until ``/readyz`` has answered 200 from ``W`` distinct worker processes
   (:mod:`adfunnel.bench.http_server`);
3. measures the bare ``GET /v1/bench/noop`` route (204, no work) of the same server:
   ``baseline_route_per_s``;
4. drives ``POST /v1/ads:select`` with the workload's requests from a separate load
   generator process — ``wrk`` (C, one thread) when installed, else the asyncio
   client of :mod:`adfunnel.bench.overload` — on ``concurrency`` keep-alive
   connections for ``duration_s`` seconds (closed loop).

Result fields (latency is client-side, ms; rates per second of the load window):

- ``decisions_per_s``: answers decided in time (200, or 204 ``no_fill``) per second;
  shed and late answers (204 with ``x-adfunnel-outcome: shed|late``) are not counted;
- ``per_core``: ``decisions_per_s`` ÷ busy cores, where busy cores = the CPU seconds
  (user + system, from ``/proc/PID/stat``) of every server process (supervisor and
  workers) over the load window ÷ the window's wall seconds. It is not a rate the server
  reached: quote it beside ``decisions_per_s`` and ``busy_cores``;
- ``load_generator_cpu_s`` and ``load_generator_busy_cores``: the load generator's own
  CPU over the same window (:func:`generator_cpu_seconds`), which shares the machine's
  cores with the server; ``server_cpu_s`` and ``window_s`` the server's CPU and the
  window's wall seconds;
- ``p50_ms``, ``p99_ms``: of every select answer, as the load generator measured;
- ``no_fill_share``: ``no_fill`` answers ÷ decided answers; ``shed_share`` and
  ``late_share``: of all select answers;
- ``baseline_route_per_s``: answers/s of the no-op route, same connections and
  generator, measured just before the select load;
- ``noop_under_load``: p50/p99/max ms of a no-op request sent every 20 ms on its own
  connection *during* the select load (:class:`NoopProbe`): how long the server's
  other work waits behind decisions;
- ``setup_s``: seconds from the start of the run until every worker is ready (database
  written, server started, catalogue loaded), split as ``populate_s`` (workload drawn,
  database written) + ``start_s``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from adfunnel.bench.http_server import (
    NOOP_PATH,
    BenchServer,
    NoopProbe,
    cpu_seconds,
    generator_cpu_seconds,
)
from adfunnel.bench.http_workload import DEADLINE_MS, SELECT_PATH, catalogue, select_body
from adfunnel.bench.overload import Tally, drive_requests, encode_request, run_wrk


def run_http_bench(ads: int = 100_000, workers: int = 1, concurrency: int = 16,
                   duration_s: float = 10.0, *, seed: int = 1, load: str = "auto",
                   baseline_s: float | None = None, warmup_s: float = 2.0,
                   log_path: Path | None = None, db_path: Path | None = None,
                   start_timeout_s: float = 1_800.0) -> dict[str, Any]:
    """Populate, start ``adfunnel serve --workers W``, measure; the result dict (module doc).

    ``load``: ``wrk``, ``python`` or ``auto`` (wrk when installed). ``baseline_s``:
    seconds of no-op load (default half of ``duration_s``, 1 to 5). ``warmup_s``:
    seconds of select load before the measured window, not counted (first budget
    slices, first-use caches). The server inherits this process's environment, so
    ``ADFUNNEL_BUDGET=local`` measures it without the budget service (``budget``).
    ``db_path``: keep the SQLite database there, or reuse it when it exists (written
    with the same ``ads`` and ``seed``; ``populate_s`` then only draws the requests).

    Raises:
        ValueError: ``ads``, ``workers`` or ``concurrency`` below 1, or an unknown ``load``.
        RuntimeError: the server does not become ready within ``start_timeout_s``.
    """
    if min(ads, workers, concurrency) < 1:
        raise ValueError("ads, workers and concurrency must be at least 1")
    if load == "auto":
        load = "wrk" if shutil.which("wrk") else "python"
    if load not in ("wrk", "python"):
        raise ValueError(f"load must be wrk, python or auto, got {load!r}")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        url, reqs, source = catalogue(db_path or Path(tmp) / "http-bench.sqlite3", ads, seed)
        populate_s = time.monotonic() - t0
        bodies = [select_body(r, n) for n, r in enumerate(reqs)]
        with BenchServer(url, workers, log_path, start_timeout_s) as server:
            setup_s = time.monotonic() - t0
            base = _measure(server, NOOP_PATH, None, concurrency,
                            baseline_s or min(5.0, max(1.0, duration_s / 2)), load)
            if warmup_s > 0:
                _window(server, SELECT_PATH, bodies, concurrency, warmup_s, load)
            main = _measure(server, SELECT_PATH, bodies, concurrency, duration_s, load)
    return _report(ads, workers, concurrency, duration_s, load, source, main, base,
                   round(setup_s, 2), round(populate_s, 2))


def _measure(server: BenchServer, path: str, bodies: list[bytes] | None, concurrency: int,
             duration_s: float, load: str) -> dict[str, Any]:
    """One load window: the generator's figures plus the server's CPU seconds, and
    with ``bodies`` (the select load) a :class:`NoopProbe` running alongside."""
    if bodies is None:
        return _window(server, path, bodies, concurrency, duration_s, load)
    with NoopProbe(server.url) as probe:
        figures = _window(server, path, bodies, concurrency, duration_s, load)
    figures["noop_probe"] = probe.summary()
    return figures


def _window(server: BenchServer, path: str, bodies: list[bytes] | None, concurrency: int,
            duration_s: float, load: str) -> dict[str, Any]:
    pids = server.pids()
    gen0 = generator_cpu_seconds()
    cpu0, t0 = cpu_seconds(pids), time.monotonic()
    if load == "wrk":
        figures = run_wrk(server.url + path, concurrency, duration_s, bodies, count=True)
    else:
        host = server.url.removeprefix("http://").split(":")[0]
        method = "GET" if bodies is None else "POST"
        encoded = [encode_request(host, method, path, b) for b in (bodies or [None])]
        tally: Tally = uvloop.run(drive_requests(server.url, concurrency, duration_s, encoded))
        wall = time.monotonic() - t0
        figures = {**tally.summary(), "outcomes": tally.outcomes,
                   "answers_per_s": round(len(tally.latencies_ms) / wall, 1)}
    wall = time.monotonic() - t0
    figures["cpu_s"] = cpu_seconds(pids) - cpu0
    figures["generator_cpu_s"] = generator_cpu_seconds() - gen0
    figures["wall_s"] = wall
    return figures


def _report(ads: int, workers: int, concurrency: int, duration_s: float, load: str,
            source: str, main: dict[str, Any], base: dict[str, Any], setup_s: float,
            populate_s: float) -> dict[str, Any]:
    outcomes = main["outcomes"]
    answers = sum(outcomes.values())
    filled = outcomes.get("200", 0)
    no_fill = outcomes.get("204:no_fill", 0)
    decided = filled + no_fill
    # wrk's rate is over its own run; scale the decided share of it
    rate = main["answers_per_s"] * decided / answers if answers else 0.0
    busy = main["cpu_s"] / main["wall_s"] if main["wall_s"] > 0 else 0.0
    return {
        "ads": ads, "workers": workers, "concurrency": concurrency, "duration_s": duration_s,
        "decisions_per_s": round(rate, 1),
        "per_core": round(rate / busy, 1) if busy > 0 else None,
        "busy_cores": round(busy, 3),
        # the load generator shares the machine's cores: what it used beside the server
        "load_generator_cpu_s": round(main["generator_cpu_s"], 3),
        "load_generator_busy_cores": round(main["generator_cpu_s"] / main["wall_s"], 3)
        if main["wall_s"] > 0 else None,
        "server_cpu_s": round(main["cpu_s"], 3), "window_s": round(main["wall_s"], 3),
        "p50_ms": main["p50_ms"], "p99_ms": main["p99_ms"],
        "no_fill_share": round(no_fill / decided, 4) if decided else None,
        "shed_share": round(outcomes.get("204:shed", 0) / answers, 4) if answers else None,
        "late_share": round(outcomes.get("204:late", 0) / answers, 4) if answers else None,
        "answers": answers, "errors": main["errors"] + _others(outcomes),
        "outcomes": outcomes,
        "noop_under_load": main["noop_probe"],
        "baseline_route_per_s": base["answers_per_s"],
        "baseline_p50_ms": base["p50_ms"],
        "baseline_busy_cores": round(base["cpu_s"] / base["wall_s"], 3),
        "baseline_load_generator_busy_cores": round(base["generator_cpu_s"] / base["wall_s"], 3),
        "setup_s": setup_s, "populate_s": populate_s, "start_s": round(setup_s - populate_s, 2),
        "load_generator": load, "workload": source, "deadline_ms": DEADLINE_MS,
        "budget": os.environ.get("ADFUNNEL_BUDGET", "service"),
    }


def _others(outcomes: dict[str, int]) -> int:
    """Answers that are neither 200 nor a 204 with a known outcome."""
    known = ("200", "204:no_fill", "204:shed", "204:late")
    return sum(v for k, v in outcomes.items() if k not in known)
