"""``adfunnel bench events``: the event plane's three figures, each in one run.

Everything runs on a PostgreSQL schema and two JetStream streams of the run's own
(``bench_events_<run>``; ``ADFUNNEL_BENCH_<RUN>_A`` for the aggregator's events,
``…_T`` for the tracker's), all dropped at the end; the campaigns are real (created
through the store: half CPM, half CPC, one ad each, budgets that never bind), and so
are the tokens (signed with the run's secret, one impression id per beacon).

1. **Aggregator** — stream A is pre-filled with ``events`` valid events for those
   campaigns (impressions, and every
   :data:`~adfunnel.bench.events_setup.CLICK_EVERY`-th a click on the impression before
   it, as the tracker would append them; ``prefill_events_per_s`` is how fast the log
   took them), then ONE aggregator — the pieces of ``adfunnel aggregator``
   (:func:`adfunnel.runtime.standalone.run_aggregator`) in this process: its thread reads every
   partition through the durable consumer ``ledger`` into PostgreSQL — runs until it
   has recorded them all, or for ``aggregator_max_s`` seconds:
   ``aggregator_events_per_s`` = events recorded ÷ wall seconds (target ≥
   :data:`~adfunnel.bench.events_report.AGGREGATOR_TARGET_PER_S`); ``busy_cores`` is this
   process's CPU ÷ wall.
2. **Lag** — ``adfunnel tracker`` (a child process: one uvicorn worker, on stream T,
   trusting 127.0.0.1 as its proxy: each beacon names its client address in
   ``X-Forwarded-For``, a few beacons per address, as real traffic would pass tier-2
   scoring) and an aggregator run together while the load generator offers ``lag_rate_per_s``
   impression beacons per second, paced (:mod:`adfunnel.bench.beacon_load`), for
   ``lag_duration_s`` seconds; then the aggregator drains what is left (at most
   ``drain_timeout_s``). ``lag_p50_ms`` / ``lag_p99_ms``: the aggregator's
   beacon-to-ledger lag, from the tracker's append (``Event.tracked_ns``) to the
   acknowledgement after the ledger commit, over the last
   :data:`~adfunnel.billing.aggregator_metrics.LAG_SAMPLES` events (target p99 ≤
   :data:`~adfunnel.bench.events_report.LAG_TARGET_P99_MS`). When the aggregator is slower
   than the beacons the backlog grows with the window, and so does the lag:
   ``lag.backlog_at_end`` is how many were still unrecorded when the load stopped;
   ``lag.drained`` false means some were never recorded, and the figures are a lower
   bound.
3. **Tracker** — the same closed-loop load (``connections`` keep-alive connections,
   ``client_processes`` processes, ``duration_s`` seconds) first against a bare
   app answering ``GET /i`` with 204 (no work) and layered as the tracker is
   (:func:`adfunnel.runtime.standalone.beacon_layers`: request log, arrival stamp, ``/i`` a bare
   ASGI handler outside Starlette, the tracker's access-log settings), served the same
   way (:func:`adfunnel.runtime.server.serve_http`: one uvicorn process, uvloop, httptools), then
   against the tracker (nothing aggregates meanwhile):
   ``tracker_beacons_per_s`` ÷ ``baseline_204_per_s`` = ``tracker_ratio`` (target ≥
   :data:`~adfunnel.bench.events_report.TRACKER_TARGET_RATIO`). ``server_busy_cores`` of
   each is its CPU seconds (``/proc``) ÷ wall seconds: about 1.0 means the server, not
   the load generator, was the limit (``client_busy_cores``: the load generator's).

4. **Floors** — between 1 and 2, on stream A (:mod:`adfunnel.bench.floors`): the CPU
   nats-py alone spends receiving the pre-filled events (``nats_receive_cpu_us``) and
   publishing as many new ones the tracker's way (``nats_publish_cpu_us``), beside what
   the aggregator and the tracker cost per event in all (``aggregator_cpu_us_per_event``,
   ``tracker_cpu_us_per_beacon``; ``baseline_cpu_us_per_request`` for the bare route).

Figures are rates per wall second of their own window; times are wall-clock ms.

This module runs the phases; the run's schema, stream, campaigns and pre-filled events
are :mod:`adfunnel.bench.events_setup`, the bare 204 route
:mod:`adfunnel.bench.baseline_server`, the result and its targets
:mod:`adfunnel.bench.events_report`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from adfunnel.bench.baseline_server import BaselineServer
from adfunnel.bench.beacon_load import (
    BEACONS_PER_ADDRESS,
    BeaconLoad,
    LoadPool,
    Target,
)
from adfunnel.bench.events_report import events_report
from adfunnel.bench.events_setup import (
    CLICK_EVERY,
    PREFILL_BATCH,
    bench_events,
    create_campaigns,
    run_schema,
    run_stream,
    where,
)
from adfunnel.bench.http_server import cpu_seconds, process_tree
from adfunnel.billing.aggregator import Aggregator
from adfunnel.clock import SystemClock
from adfunnel.runtime.event_plane import EventPlane, make_event_log
from adfunnel.settings import Settings, load_settings
from adfunnel.sim.server_proc import ManagedProcess

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def default_client_processes() -> int:
    """Load-generator processes: half the cores (at least 1, at most 4)."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def run_events_bench(
    *, database_url: str = DEFAULT_DATABASE_URL, nats_url: str = DEFAULT_NATS_URL,
    campaigns: int = 100, events: int = 20_000, aggregator_max_s: float = 60.0,
    duration_s: float = 10.0, connections: int = 64, client_processes: int | None = None,
    tokens: int = 50_000, lag_rate_per_s: float = 5_000.0, lag_duration_s: float = 10.0,
    partitions: int = 16, drain_timeout_s: float = 300.0, log_path: Path | None = None,
) -> dict[str, Any]:
    """Measure the three figures (module docstring); the result dict.

    ``database_url``: the PostgreSQL database the run's schema is made in;
    ``aggregator_max_s``: the aggregator's window ends after this many seconds even
    when it has not recorded every pre-filled event (its rate is over what it did);
    ``tokens``: distinct tokens per client process in the closed-loop windows;
    ``drain_timeout_s``: the most seconds the lag phase waits for the aggregator to
    record the last beacon (past it, the lag figures are over what it recorded, a
    lower bound: ``lag.drained`` false); ``log_path``: where the tracker's output goes
    (default: discarded).

    Raises:
        ValueError: an argument out of its domain (or a database that is not PostgreSQL).
        RuntimeError: a server or the load generator did not start.
        sqlalchemy.exc.OperationalError: PostgreSQL unreachable.
        adfunnel.events.log.EventLogUnavailable: NATS unreachable.
    """
    if not database_url.startswith(("postgresql://", "postgresql+psycopg://")):
        raise ValueError("database_url must be a postgresql:// URL")
    if min(campaigns, events, connections, tokens, partitions) < 1:
        raise ValueError("campaigns, events, connections, tokens and partitions must be >= 1")
    procs = client_processes or default_client_processes()
    t_start = time.monotonic()
    run = uuid.uuid4().hex[:10]
    secret = secrets.token_hex(32)
    load_avg = os.getloadavg()[0]
    with run_schema(database_url, f"bench_events_{run}") as url:
        # the aggregator's pre-filled events and the tracker's beacons: a stream each
        agg_side, trk_side = (
            load_settings(database_url=url, event_log_url=nats_url,
                          event_stream=f"ADFUNNEL_BENCH_{run.upper()}_{part}",
                          event_partitions=partitions, token_secret=secret,
                          clock="system", aggregate=True, spool_dir=None)
            for part in ("A", "T"))
        with run_stream(agg_side), run_stream(trk_side):
            targets = create_campaigns(url, campaigns)
            setup_s = time.monotonic() - t_start
            agg = _aggregator_phase(agg_side, targets, events, run, aggregator_max_s)
            floors = _floors(agg_side, targets, events, run)
            env = {"ADFUNNEL_DATABASE_URL": url, "ADFUNNEL_TOKEN_SECRET": secret,
                   "ADFUNNEL_EVENT_STREAM": trk_side.event_stream,
                   "ADFUNNEL_EVENT_PARTITIONS": str(partitions),
                   "ADFUNNEL_TRUSTED_PROXIES": '["127.0.0.1/32"]'}
            # the three start together (imports and start-ups overlap), then wait
            base_args = (trk_side.access_log, trk_side.access_log_beacons)
            with BaselineServer(*base_args) as base, LoadPool(procs) as pool, ManagedProcess(
                    ["tracker", "--event-log", nats_url], extra_env=env, log_path=log_path,
                    timeout_s=120.0) as tracker:
                base.wait_ready()
                lag_load = BeaconLoad(tracker.url, secret, targets, f"{run}l",
                                      connections=connections, processes=procs,
                                      duration_s=lag_duration_s, rate_per_s=lag_rate_per_s)
                lag = _lag_phase(trk_side, pool, lag_load, drain_timeout_s)
                load = BeaconLoad(base.url, secret, targets, f"{run}b",
                                  connections=connections, processes=procs,
                                  duration_s=duration_s, tokens=tokens)
                baseline = _window(pool, base.pids(), load)
                base.stop()
                trk = _window(pool, process_tree(tracker.proc.pid),
                              replace(load, url=tracker.url, id_prefix=f"{run}t"))
    return events_report(
        agg=agg, lag=lag, baseline=baseline, tracker=trk, floors=floors,
        setup={
            "cpu_count": os.cpu_count(), "load_average_at_start": round(load_avg, 2),
            "database": where(database_url), "schema": f"bench_events_{run}",
            "nats_url": nats_url, "streams": [agg_side.event_stream, trk_side.event_stream],
            "partitions": partitions, "campaigns": campaigns,
            "server": "uvicorn, 1 process, uvloop + httptools",
            "client_addresses": ("X-Forwarded-For (127.0.0.1 a trusted proxy), "
                                 f"{BEACONS_PER_ADDRESS} beacons per address"),
            "load_generator": (f"{procs} process(es), raw asyncio (uvloop) HTTP/1.1 "
                               f"keep-alive, {connections} connections, pre-signed tokens"),
            "setup_s": round(setup_s, 2), "total_s": round(time.monotonic() - t_start, 2),
        })


# ---- the aggregator --------------------------------------------------------------------


@contextlib.contextmanager
def _aggregating(settings: Settings, *, start: bool = True) -> Iterator[EventPlane]:
    """An event plane with one aggregator over every partition, wired as ``adfunnel
    aggregator`` wires it (:func:`adfunnel.runtime.standalone.run_aggregator`: campaign read
    model, SQL ledger, rollup refresh of the hours it touched), its thread running unless
    ``start`` is False."""
    from adfunnel.billing.rollup_store import DirtyHours
    from adfunnel.billing.sql_ledger import SqlLedger
    from adfunnel.billing.sql_rollups import make_rollup_store
    from adfunnel.budget.gate import LocalSpendGate
    from adfunnel.periodic import Periodic
    from adfunnel.runtime.embedded import ROLLUP_REFRESH_S, mark_completed
    from adfunnel.runtime.event_plane import make_event_plane
    from adfunnel.runtime.heap import freeze_heap
    from adfunnel.runtime.standalone import CampaignSide

    side = CampaignSide.open(settings)
    dirty = DirtyHours(make_rollup_store(side.store.engine))
    refresh = Periodic(dirty.flush, ROLLUP_REFRESH_S, "rollup-refresh", side.clock).start()
    try:
        plane = make_event_plane(
            settings, side.clock, SqlLedger(side.store.engine), side.model.campaign,
            LocalSpendGate(), None, aggregate=True,
            on_lifetime_spent=lambda cid: mark_completed(side.store, cid),
            on_hours=dirty.mark, start=start)
        freeze_heap()
        try:
            assert plane.aggregator is not None
            yield plane
        finally:
            plane.close()
    finally:
        side.feed.stop()
        refresh.stop(final=True)
        side.store.engine.dispose()


def _wait_recorded(agg: Aggregator, n: int, timeout_s: float) -> bool:
    """Wait (wall seconds) until ``agg`` has handled ``n`` first deliveries, at most
    ``timeout_s``; whether it has."""
    deadline = time.monotonic() + timeout_s
    while agg.first_deliveries < n:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _progress(agg: Aggregator, n: int, max_s: float) -> tuple[int, float]:
    """Wait until ``agg`` has handled ``n`` first deliveries, or ``max_s`` seconds have
    passed and it has acknowledged some batch (at most ``3 × max_s``); how many it has
    handled and when (monotonic seconds) the last acknowledged batch was seen."""
    t0 = time.monotonic()
    done, last = agg.first_deliveries, t0
    start = done
    while done < n:
        now = time.monotonic()
        if now - t0 > 3 * max_s or (now - t0 > max_s and done > start):
            break
        time.sleep(0.01)
        if agg.first_deliveries != done:
            done, last = agg.first_deliveries, time.monotonic()
    return done, last


def _aggregator_phase(settings: Settings, targets: tuple[Target, ...], n: int, run: str,
                      max_s: float) -> dict[str, Any]:
    events = bench_events(targets, n, f"{run}a")
    log = make_event_log(settings, SystemClock())
    try:
        t0 = time.monotonic()
        for lo in range(0, n, PREFILL_BATCH):
            log.publish_many(events[lo:lo + PREFILL_BATCH])
        prefill_s = time.monotonic() - t0
    finally:
        log.close()
    # the thread starts once CPU and time are sampled: a small backlog is otherwise handled
    # before the first sample and costs nothing measured
    with _aggregating(settings, start=False) as plane:
        agg = plane.aggregator
        assert agg is not None
        cpu0, t0, done0 = _cpu(), time.monotonic(), agg.first_deliveries
        plane.start()
        done, last = _progress(agg, n, max_s)
        wall = last - t0
        cpu = _cpu() - cpu0
        busy = cpu / (time.monotonic() - t0)
        stats = agg.stats
    return {"events": n, "recorded": done, "wall_s": round(wall, 3),
            "events_per_s": round((done - done0) / wall, 1) if wall > 0 else None,
            "busy_cores": round(busy, 3), "cpu_s": round(cpu, 6), "batches": stats.batches,
            "mean_batch": round(stats.events / stats.batches, 1) if stats.batches else None,
            "billed": stats.billed, "not_billable": stats.not_billable,
            "duplicates": stats.duplicates, "outcomes": dict(agg.outcomes),
            "clicks": n // CLICK_EVERY, "prefill_s": round(prefill_s, 3),
            "prefill_events_per_s": round(n / prefill_s, 1) if prefill_s else None}


def _floors(settings: Settings, targets: tuple[Target, ...], n: int, run: str
            ) -> dict[str, Any]:
    """nats-py's own cost per event (:mod:`adfunnel.bench.floors`) on the aggregator's
    stream: receiving its ``n`` pre-filled events, then publishing ``n`` new ones."""
    from adfunnel.bench.floors import publish_floor, receive_floor
    from adfunnel.events.jetstream_log import JetStreamEventLog

    log = make_event_log(settings, SystemClock())
    try:
        assert isinstance(log, JetStreamEventLog)
        subjects = [log.subject(p) for p in range(log.partitions)]
        receive = receive_floor(str(settings.event_log_url), log.stream, subjects, n)
        publish = publish_floor(log, bench_events(targets, n, f"{run}f"))
    finally:
        log.close()
    return {"receive": receive, "publish": publish}


def _cpu() -> float:
    """CPU seconds of this process, all threads (``CLOCK_PROCESS_CPUTIME_ID``): ``os.times``
    counts in 10 ms ticks, so a tiny run's aggregator read 0.0 CPU (a flaky test)."""
    return time.process_time()


# ---- the lag ----------------------------------------------------------------------------

#: Events one stored ``/i`` appends: the beacon load's tokens bill on render (token
#: default), so the render event and the impression.
EVENTS_PER_BEACON = 2


def _lag_phase(settings: Settings, pool: LoadPool, load: BeaconLoad, timeout_s: float
               ) -> dict[str, Any]:
    with _aggregating(settings) as plane:
        agg = plane.aggregator
        assert agg is not None
        t0 = time.monotonic()
        figures = pool.run(load)
        load_s = time.monotonic() - t0
        # each stored /i of a render-billed token is two events: its render, its impression
        appended = EVENTS_PER_BEACON * figures["statuses"].get("204", 0)
        backlog = max(0, appended - agg.first_deliveries)
        drained = _wait_recorded(agg, appended, timeout_s)
        total_s = time.monotonic() - t0
        recorded = agg.first_deliveries
        lag = agg.lag_ms()
    return {**figures, "appended": appended, "recorded": recorded, "drained": drained,
            "lag_p50_ms": lag["p50"], "lag_p99_ms": lag["p99"], "backlog_at_end": backlog,
            "drain_s": round(total_s - load_s, 3),
            "aggregator_events_per_s": round(recorded / total_s, 1) if total_s else None}

def _window(pool: LoadPool, pids: list[int], load: BeaconLoad) -> dict[str, Any]:
    """One closed-loop window; the load's figures and the server's busy cores."""
    cpu0 = cpu_seconds(pids)
    figures = pool.run(load)
    cpu = cpu_seconds(pids) - cpu0  # includes token signing and connecting: idle server
    wall = figures["wall_s"]
    return {**figures, "server_busy_cores": round(cpu / wall, 3) if wall else None}
