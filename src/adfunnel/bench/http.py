"""HTTP benchmark: the real ``adfunnel serve`` holding a large catalogue, under load.

``run_http_bench(ads, workers, concurrency, duration_s)``:

1. writes a SQLite database holding ``ads`` campaigns of one ad each, in bulk through
   the store's tables (:mod:`adfunnel.campaigns.tables`), each record with its
   ``change_log`` row carrying the same payload the store writes
   (:func:`populate`). Targeting is drawn from the iPinYou log's attribute
   distributions exactly as ``adfunnel bench index --workload real`` draws it
   (:func:`adfunnel.bench.index._real`: at most 200,000 distinct expressions, ads
   share them); every ad is CPM, sized like the log's slots;
2. starts ``adfunnel serve --workers W`` (embedded default: that SQLite file, the
   in-process budget & pacing service, the system clock) as a subprocess and waits
   until ``/readyz`` has answered 200 from ``W`` distinct worker processes;
3. measures the bare ``GET /v1/bench/noop`` route (204, no work) of the same server:
   ``baseline_route_per_s``;
4. drives ``POST /v1/ads:select`` with requests built from the log's rows (region,
   city, slot size, exchange, domain, OS, browser, user tags; some moved to other
   provinces and given audiences, as the index benchmark does) from a separate load
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

import http.client
import json
import os
import random
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvloop
from sqlalchemy import Engine

from adfunnel.bench.index import MAX_TEMPLATES, _real
from adfunnel.bench.overload import Tally, drive_requests, encode_request, run_wrk
from adfunnel.campaigns import codec
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import Ad, Advertiser, BidType, Campaign, Objective
from adfunnel.campaigns.tables import ads as ads_table
from adfunnel.campaigns.tables import advertisers, campaigns, change_log
from adfunnel.db import make_engine
from adfunnel.sim.server_proc import ManagedProcess
from adfunnel.targeting.expr import All, Any_, Expr, In, Not, NotIn, parse_expr

#: Campaigns per advertiser in the generated catalogue.
CAMPAIGNS_PER_ADVERTISER = 10
#: Distinct request bodies the load generator cycles through.
REQUESTS = 2_000
#: Rows per bulk INSERT statement batch.
BATCH = 20_000
#: deadline_ms of every benchmark request (the server's default).
DEADLINE_MS = 100
SELECT_PATH = "/v1/ads:select"
NOOP_PATH = "/v1/bench/noop"
TIME_ZONE = "Asia/Shanghai"
#: Slot sizes of the iPinYou log (the fallback stand-in's too), for ads' sizes.
_FALLBACK_SIZES = ("300x250", "728x90", "1000x90", "250x250")


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


# ---- the catalogue ----------------------------------------------------------------------


def _workload(ads: int, seed: int) -> tuple[list[Expr], list[dict[str, frozenset[str]]], str]:
    """Targeting templates and requests of the index benchmark's ``real`` workload."""
    rng = random.Random(seed)
    exprs, reqs, source = _real(rng, min(ads, MAX_TEMPLATES), REQUESTS, None)
    return exprs, reqs, source


def catalogue(path: Path, ads: int, seed: int,
              rewrite: Callable[[Expr], Expr] | None = None,
              ) -> tuple[str, list[dict[str, frozenset[str]]], str]:
    """(the SQLite URL of the catalogue at ``path``, the workload's requests, their
    source): the database is written (:func:`populate`, each targeting through
    ``rewrite`` first) unless it exists, when it is reused as it is."""
    url = f"sqlite:///{path}"
    exprs, reqs, source = _workload(ads, seed)
    if not path.exists():
        populate(make_engine(url), ads, [rewrite(e) for e in exprs] if rewrite else exprs,
                 reqs, seed)
    return url, reqs, source


def expr_json(expr: Expr) -> dict[str, Any]:
    """The targeting JSON of an expression tree (values sorted; the inverse of
    :func:`adfunnel.targeting.parse_expr`)."""
    if isinstance(expr, In):
        return {"attr": expr.attr, "in": sorted(expr.values)}
    if isinstance(expr, NotIn):
        return {"attr": expr.attr, "not_in": sorted(expr.values)}
    if isinstance(expr, Not):
        return {"not": expr_json(expr.child)}
    op = "all" if isinstance(expr, All) else "any"
    assert isinstance(expr, All | Any_)
    return {op: [expr_json(c) for c in expr.children]}


def targeting_text(expr: Expr) -> str:
    """Canonical stored text of ``expr``, checked by the API's own parser.

    Raises:
        TargetingError: an expression the advertiser API would refuse.
    """
    raw = expr_json(expr)
    parse_expr(raw)
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":"))


def populate(engine: Engine, n: int, exprs: list[Expr], reqs: list[dict[str, frozenset[str]]],
             seed: int) -> None:
    """Migrate ``engine``'s database and write ``n`` active CPM campaigns of one approved
    ad each (one advertiser per :data:`CAMPAIGNS_PER_ADVERTISER`), each record with the
    ``change_log`` row the store would append, in one transaction.

    Rows are inserted with the DB-API's ``executemany`` on statements named after the
    tables' own columns, :data:`BATCH` records at a time; values are the codec's row and
    payload forms (:mod:`adfunnel.campaigns.codec`), built from one record per entity
    with the fields that differ replaced — the first record of each batch is checked
    against the codec's own output."""
    upgrade(engine)
    now = datetime.now(UTC)
    gen = np.random.default_rng(seed)
    texts = [targeting_text(e) for e in exprs]
    tmpl = gen.integers(0, len(exprs), size=n).tolist()
    bids = (np.round(gen.lognormal(0.0, 0.6, size=n) * 2_000_000).astype(np.int64)
            + 100_000).tolist()
    sizes = _ad_sizes(reqs, gen, n)
    start = (now - timedelta(days=1)).date()
    n_adv = -(-n // CAMPAIGNS_PER_ADVERTISER)
    makers = (
        ("advertiser", advertisers, n_adv, lambda i: Advertiser(i, f"bench-{i}")),
        ("campaign", campaigns, n, lambda i: _campaign(i, texts[tmpl[i - 1]], bids[i - 1],
                                                        start)),
        ("ad", ads_table, n, lambda i: _ad(i, *sizes[i - 1])),
    )
    writer = _BulkWriter(engine, now)
    with engine.begin() as conn:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        for entity, table, count, make in makers:
            for lo in range(1, count + 1, BATCH):
                records = [make(i) for i in range(lo, min(count, lo + BATCH - 1) + 1)]
                writer.write(cursor, entity, table, records)
        cursor.close()
    engine.dispose()


class _BulkWriter:
    """Positional rows of the entity tables and ``change_log`` for the DB-API cursor.

    Column values go through each column type's bind processor (dates and instants as
    SQLAlchemy stores them), once per distinct value kind; the varying fields of a
    record are plain strings and integers."""

    def __init__(self, engine: Engine, now: datetime) -> None:
        self.dialect = engine.dialect
        self.now = now
        self._proto: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def write(self, cursor: Any, entity: str, table: Any, records: list[Any]) -> None:
        row0, payload0 = self._prototype(entity, records[0])
        names = codec.field_names(entity)
        cols = [*names, "updated_at"]
        rows = []
        payloads = []
        for r in records:
            values = {k: getattr(r, k) for k in _VARYING[entity]}
            rows.append(tuple({**row0, **values}[c] for c in cols))
            payloads.append(_dumps({**payload0, **values}))
        if payloads[0] != codec.dumps_payload(records[0]):
            raise AssertionError(f"{entity} payload differs from the store's")
        cursor.executemany(_insert_sql(table, cols), rows)
        log_cols = ["entity", "entity_id", "version", "payload", "committed_at"]
        at = self._bind(change_log, "committed_at", self.now)
        cursor.executemany(_insert_sql(change_log, log_cols),
                           [(entity, r.id, r.version, p, at) for r, p in zip(records, payloads,
                                                                              strict=True)])

    def _prototype(self, entity: str, record: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Bound column values and payload of a record, less what varies per record."""
        if entity not in self._proto:
            table = _TABLES[entity]
            names = codec.field_names(entity)
            row = codec.to_row(entity, {k: getattr(record, k) for k in names})
            row["updated_at"] = self.now
            bound = {k: self._bind(table, k, v) for k, v in row.items()}
            self._proto[entity] = (bound, codec.to_payload(record))
        return self._proto[entity]

    def _bind(self, table: Any, column: str, value: Any) -> Any:
        proc = table.c[column].type.dialect_impl(self.dialect).bind_processor(self.dialect)
        return value if proc is None or value is None else proc(value)


#: Fields of a generated record that differ between records (plain str or int values).
_VARYING = {
    "advertiser": ("id", "name"),
    "campaign": ("id", "advertiser_id", "name", "bid_micros", "targeting"),
    "ad": ("id", "campaign_id", "landing_url", "creative_ref", "width", "height"),
}
_TABLES = {"advertiser": advertisers, "campaign": campaigns, "ad": ads_table}


def _insert_sql(table: Any, cols: list[str]) -> str:
    names = ", ".join(table.c[c].name for c in cols)
    return f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(cols))})"


def _dumps(payload: dict[str, Any]) -> str:
    """As :func:`adfunnel.campaigns.codec.dumps_payload` writes a payload."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def _campaign(i: int, targeting: str, bid_micros: int, start: date) -> Campaign:
    """Campaign ``i``: CPM, a daily budget that never binds, running since ``start``."""
    return Campaign(
        id=i, advertiser_id=(i - 1) // CAMPAIGNS_PER_ADVERTISER + 1, name=f"bench-{i}",
        objective=Objective.IMPRESSIONS, bid_type=BidType.CPM, bid_micros=bid_micros,
        daily_budget_micros=10**12, time_zone=TIME_ZONE, flight_start=start,
        targeting=targeting)


def _ad(i: int, width: int, height: int) -> Ad:
    """Ad ``i`` of campaign ``i``: an approved banner whose creative is an https image
    (so an OpenRTB bid has markup to render: :mod:`adfunnel.openrtb.markup`)."""
    return Ad(id=i, campaign_id=i, landing_url=f"https://example.test/{i}",
              creative_ref=f"https://cdn.example.test/bench/{i}.png", format="banner",
              width=width, height=height)


def _ad_sizes(reqs: list[dict[str, frozenset[str]]], gen: np.random.Generator,
              n: int) -> list[tuple[int, int]]:
    """``n`` ad sizes drawn from the requests' slot sizes (as often as they occur)."""
    seen = [s for r in reqs for s in r.get("slot_size", ())] or list(_FALLBACK_SIZES)
    picked = gen.choice(np.array(seen), size=n)
    return [(int(w), int(h)) for w, h in (s.split("x") for s in picked.tolist())]


# ---- the requests -----------------------------------------------------------------------

#: Request attributes the server derives from placement and slots (not sent as user's).
_DERIVED = ("slot_size", "exchange", "domain", "placement")


def select_body(req: dict[str, frozenset[str]], n: int) -> bytes:
    """The wire form (JSON) of one workload request."""
    attrs: dict[str, Any] = {}
    for name, values in req.items():
        if name in _DERIVED:
            continue
        vals = sorted(values)
        attrs[name] = vals if name in ("interests", "audiences") else vals[0]
    w, h = next(iter(sorted(req.get("slot_size", {"300x250"})))).split("x")
    placement: dict[str, Any] = {"id": "ipinyou"}
    for name in ("exchange", "domain"):
        if req.get(name):
            placement[name] = min(req[name])
    return json.dumps({
        "user": {"key": f"u{n % 997}", "attributes": attrs},
        "placement": placement,
        "slots": [{"id": "s1", "position": 1, "width": int(w), "height": int(h)}],
        "deadline_ms": DEADLINE_MS,
    }, separators=(",", ":")).encode()


# ---- the server and the load --------------------------------------------------------------


class BenchServer:
    """``adfunnel serve --workers W`` on ``url``, ready on every worker (``extra_env``:
    settings beside this process's environment)."""

    def __init__(self, url: str, workers: int, log_path: Path | None, timeout_s: float,
                 extra_env: dict[str, str] | None = None) -> None:
        args = ["serve", "--database-url", url, "--clock", "system", "--workers", str(workers)]
        self.proc = ManagedProcess(args, health_path="/readyz", log_path=log_path,
                                   timeout_s=timeout_s, extra_env=extra_env)
        self.url = self.proc.url
        try:
            wait_workers(self.url, workers, timeout_s)
        except BaseException:
            self.proc.stop()
            raise

    def pids(self) -> list[int]:
        return process_tree(self.proc.proc.pid)

    def __enter__(self) -> BenchServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.proc.stop()


def wait_workers(url: str, workers: int, timeout_s: float) -> set[int]:
    """Poll ``/readyz`` on fresh connections until ``workers`` distinct worker pids have
    answered 200 (the kernel spreads new connections over SO_REUSEPORT sockets).

    Raises:
        RuntimeError: fewer ready workers seen within ``timeout_s``.
    """
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url + "/readyz", timeout=5.0)
            if r.status_code == 200:
                seen.add(int(r.json().get("pid", 0)))
        except httpx.HTTPError:
            pass
        if len(seen) >= workers:
            return seen
        time.sleep(0.02)
    raise RuntimeError(f"only {len(seen)} of {workers} workers ready in {timeout_s} s")


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant process (from ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by ``pids`` (those still running)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / tick


class NoopProbe:
    """A thread sending ``GET /v1/bench/noop`` on one keep-alive connection every
    ``interval_s`` seconds, timing each answer (ms): how long the server's other work
    waits while decisions run (on the worker its connection landed on)."""

    def __init__(self, url: str, interval_s: float = 0.02) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.interval_s = interval_s
        self.latencies_ms: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="noop-probe", daemon=True)

    def __enter__(self) -> NoopProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.conn.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            t0 = time.perf_counter()
            try:
                self.conn.request("GET", NOOP_PATH)
                self.conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                self.errors += 1
                self.conn.close()
                continue
            self.latencies_ms.append((time.perf_counter() - t0) * 1000.0)

    def summary(self) -> dict[str, Any]:
        lat = np.array(self.latencies_ms) if self.latencies_ms else None
        pct = (lambda q: None) if lat is None else (
            lambda q: round(float(np.percentile(lat, q)), 2))
        return {"probes": len(self.latencies_ms), "p50_ms": pct(50), "p99_ms": pct(99),
                "max_ms": None if lat is None else round(float(lat.max()), 2)}


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


def generator_cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its reaped children: the load
    generator's, whether it ran here (the asyncio client) or as a child that has exited
    (``wrk``; the server, a child still running, is not counted until it is reaped).
    Includes the :class:`NoopProbe` thread's few requests."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


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
