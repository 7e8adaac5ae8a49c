"""The processes: ``adfunnel serve | tracker | aggregator | budget-service | fleet``, and
how a setting, a port, a database or an event log that cannot be used becomes one line on
stderr and an exit code."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from adfunnel.cli.console import console, first_line
from adfunnel.settings import Settings, SettingsError, load_settings

#: The event log of ``tracker`` and ``aggregator`` when neither ``--event-log`` nor
#: ``ADFUNNEL_EVENT_LOG_URL`` names one (they need NATS: no memory log).
DEFAULT_NATS = "nats://127.0.0.1:4222"


def _nats(flag: str | None) -> str:
    """The event log URL of a process that needs NATS: ``--event-log``, else the
    ``ADFUNNEL_EVENT_LOG_URL`` setting, else :data:`DEFAULT_NATS`."""
    if flag is not None:
        return flag
    return os.environ.get("ADFUNNEL_EVENT_LOG_URL") or DEFAULT_NATS


def _setting(name: str) -> str:
    """What ``--help`` shows as the default of an option that falls back to a setting:
    the setting's own default and its environment variable."""
    default = Settings.model_fields[name].get_default(call_default_factory=False)
    shown = "none" if default is None else str(default).lower() if isinstance(default, bool) \
        else str(default)
    return f"{shown}, or ADFUNNEL_{name.upper()}"


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address.", show_default=_setting("host"))] = None,
    port: Annotated[int | None, typer.Option(help="TCP port.", show_default=_setting("port"))] = None,
    database_url: Annotated[str | None, typer.Option(help="sqlite:///file or postgresql://…", show_default=_setting("database_url"))] = None,
    clock: Annotated[str | None, typer.Option(help="system, or manual (moved by PUT /v1/admin/clock).", show_default=_setting("clock"))] = None,
    token_secret: Annotated[str | None, typer.Option(help="HMAC key for tracking tokens (>= 32 chars).", show_default="ADFUNNEL_TOKEN_SECRET, else kept beside an SQLite store, else random per process")] = None,
    budget_service: Annotated[str | None, typer.Option(help="URL of the budget & pacing service.", show_default="in-process, or ADFUNNEL_BUDGET_SERVICE_URL")] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis for frequency caps, redis://….", show_default="in-process memory, or ADFUNNEL_REDIS_URL")] = None,
    served_log: Annotated[str | None, typer.Option(help="Directory of the served log (every committed decision; hourly Parquet).", show_default="none, or ADFUNNEL_SERVED_LOG_DIR")] = None,
    event_log: Annotated[str | None, typer.Option(help="NATS JetStream event log, nats://….", show_default="in-process memory, or ADFUNNEL_EVENT_LOG_URL")] = None,
    spool_dir: Annotated[str | None, typer.Option(help="Where beacons are spooled while the event log is down.", show_default="none (503), or ADFUNNEL_SPOOL_DIR")] = None,
    model: Annotated[str | None, typer.Option(help="A click model artifact (adfunnel model train --out DIR) that scores the pre-rank's survivors.", show_default="none: the smoothed per-ad rate, or ADFUNNEL_MODEL_DIR")] = None,
    cvr_model: Annotated[str | None, typer.Option(help="A conversion model artifact (model train --target conversion): the pCVR of CPA candidates, with --model.", show_default="none: the pcvr prior, or ADFUNNEL_CVR_MODEL_DIR")] = None,
    workers: Annotated[int | None, typer.Option(help="Ad-server processes sharing the port.", show_default=_setting("workers"))] = None,
    caps: Annotated[str | None, typer.Option(help="Frequency caps without --redis-url on one of several serving processes: strict (capped campaigns are not served) or per-process (each counts its own: up to N x cap).", show_default=_setting("caps"))] = None,
    log_format: Annotated[str | None, typer.Option(help="Log lines on stderr: text or json.", show_default=_setting("log_format"))] = None,
    access_log: Annotated[bool | None, typer.Option("--access-log/--no-access-log", help="One log line per HTTP request.", show_default=_setting("access_log"))] = None,
    demo: Annotated[bool | None, typer.Option("--demo/--no-demo", help="Serve /demo (an article page with three ads from this server) and seed its demo advertiser, placements and campaigns.", show_default="on with the default SQLite store only, or ADFUNNEL_DEMO")] = None,
) -> None:
    """Run the ad server (embedded default: every plane in one process, SQLite).

    With ``--workers N`` (N > 1) N processes each load the catalogue and then bind
    their own socket to the port with SO_REUSEPORT, so the kernel spreads connections
    over them; every accepted connection has TCP_NODELAY set."""
    import os

    from adfunnel.auth import bootstrap_admin_key
    from adfunnel.campaigns.migrate import upgrade
    from adfunnel.frequency.scope import cap_policy_warning
    from adfunnel.observability.logs import log_start
    from adfunnel.runtime.asgi import build_app
    from adfunnel.runtime.embedded import build_runtime
    from adfunnel.runtime.heap import freeze_heap
    from adfunnel.runtime.server import serve_http, serve_workers

    flags = {"host": host, "port": port, "database_url": database_url, "clock": clock,
             "token_secret": token_secret, "budget_service_url": budget_service,
             "redis_url": redis_url, "served_log_dir": served_log,
             "event_log_url": event_log, "spool_dir": spool_dir, "model_dir": model,
             "cvr_model_dir": cvr_model, "log_format": log_format, "access_log": access_log,
             "workers": workers, "caps": caps, "demo": demo}
    settings = _settings_or_exit(**flags)
    _configure_logging(settings)
    with _reachable_or_exit(settings):  # before the admin key is printed: one line
        upgrade(settings.database_url)
        _event_log_or_raise(settings)
    settings = bootstrap_admin_key(settings)
    for path, target in ((settings.model_dir, "click"), (settings.cvr_model_dir, "conversion")):
        if path is None:
            continue
        from adfunnel.prediction.model import ClickModel, ModelError

        try:
            loaded = ClickModel.load(Path(path))
        except ModelError as exc:
            typer.echo(f"adfunnel: cannot use the model: {exc}", err=True)
            raise typer.Exit(1) from None
        if loaded.target != target:
            typer.echo(f"adfunnel: {path} is a {loaded.target} model, not a {target} model",
                       err=True)
            raise typer.Exit(1)
    cap_warning = cap_policy_warning(settings)
    if cap_warning is not None:
        console.print(f"[yellow]{cap_warning}[/yellow]")
    workers = settings.workers
    if workers <= 1:
        with _reachable_or_exit(settings):
            runtime = build_runtime(settings)
        _seed_demo(settings, runtime.store)
        asgi = build_app(runtime)
        freeze_heap()
        with _listening_or_exit(settings.host, settings.port):
            if not serve_http(asgi, settings.host, settings.port,
                              on_bound=lambda address: log_start(settings, address)):
                raise typer.Exit(1)
        return
    if not settings.budget_service_url:
        console.print("[yellow]several workers without --budget-service: each holds its own "
                      "committed spend, so more overspend is absorbed (never billed)[/yellow]")
    # N processes: each worker builds its own runtime from the environment; they must
    # share one token secret and admin key (the schema was migrated once, above).
    for key, value in flags.items():
        if value is not None:
            os.environ[f"ADFUNNEL_{key.upper()}"] = str(value)
    # the secret this process resolved (set, or kept in the data directory) for all
    os.environ.setdefault("ADFUNNEL_TOKEN_SECRET", settings.token_secret)
    os.environ["ADFUNNEL_ADMIN_KEY"] = str(settings.admin_key)  # one bootstrap key for all
    _seed_demo(settings, None)
    address = f"http://{settings.host}:{settings.port} ({workers} workers)"
    with _listening_or_exit(settings.host, settings.port):
        status = serve_workers(settings.host, settings.port, workers,
                               on_start=lambda: log_start(settings, address))
    raise typer.Exit(status)


def _seed_demo(settings: Settings, store: object | None) -> None:
    """With the demo on: seed its records (on ``store``, else on a store opened here for
    the workers to load) and say where the page is."""
    from adfunnel.web.demo_seed import demo_base_url, demo_enabled, seed_demo

    if not demo_enabled(settings):
        return
    if store is None:
        from adfunnel.campaigns.sql_store import SqlCampaignStore
        from adfunnel.clock import SystemClock
        from adfunnel.db import make_engine

        engine = make_engine(settings.database_url)
        try:
            seed_demo(SqlCampaignStore(engine, SystemClock()), demo_base_url(settings))
        finally:
            engine.dispose()
    else:
        seed_demo(store, demo_base_url(settings))  # type: ignore[arg-type]
    typer.echo(f"adfunnel: demo page at {demo_base_url(settings)}/demo (--no-demo: off)")


def tracker(
    event_log: Annotated[str | None, typer.Option(help="NATS JetStream event log, nats://….", show_default=f"{DEFAULT_NATS}, or ADFUNNEL_EVENT_LOG_URL")] = None,
    host: Annotated[str | None, typer.Option(help="Bind address.", show_default=_setting("host"))] = None,
    port: Annotated[int | None, typer.Option(help="TCP port.", show_default=_setting("port"))] = None,
    database_url: Annotated[str | None, typer.Option(help="The campaign store (landing URLs), sqlite:///file or postgresql://….", show_default=_setting("database_url"))] = None,
    token_secret: Annotated[str | None, typer.Option(help="The ad servers' HMAC key for tracking tokens.", show_default="ADFUNNEL_TOKEN_SECRET, else kept beside an SQLite store, else random per process")] = None,
    spool_dir: Annotated[str | None, typer.Option(help="Where beacons are spooled while the event log is down.", show_default="none (503), or ADFUNNEL_SPOOL_DIR")] = None,
    log_format: Annotated[str | None, typer.Option(help="Log lines on stderr: text or json.", show_default=_setting("log_format"))] = None,
    access_log: Annotated[bool | None, typer.Option("--access-log/--no-access-log", help="One log line per HTTP request.", show_default=_setting("access_log"))] = None,
) -> None:
    """Run the tracker on its own: /i, /c and /v verify the token, apply tier-1 IVT rules,
    append to the event log and answer without waiting on the database."""
    from adfunnel.observability.logs import log_start
    from adfunnel.runtime.server import serve_http
    from adfunnel.runtime.standalone import build_tracker_app

    settings = _settings_or_exit(event_log_url=_nats(event_log), host=host, port=port,
                                 database_url=database_url, token_secret=token_secret,
                                 spool_dir=spool_dir, aggregate=False,
                                 log_format=log_format, access_log=access_log)
    _configure_logging(settings)
    with _reachable_or_exit(settings):
        _event_log_or_raise(settings)
        asgi = build_tracker_app(settings)
    with _listening_or_exit(settings.host, settings.port):
        if not serve_http(asgi, settings.host, settings.port,
                          on_bound=lambda a: log_start(settings, a, role="tracker")):
            raise typer.Exit(1)


def aggregator(
    event_log: Annotated[str | None, typer.Option(help="NATS JetStream event log, nats://….", show_default=f"{DEFAULT_NATS}, or ADFUNNEL_EVENT_LOG_URL")] = None,
    database_url: Annotated[str | None, typer.Option(help="The ledger's database, sqlite:///file or postgresql://….", show_default=_setting("database_url"))] = None,
    partitions: Annotated[str | None, typer.Option(help="Partitions to read, e.g. 0-7 or 0,2,4.", show_default="all")] = None,
) -> None:
    """Read partitions of the event log in batches into the ledger, acknowledging after
    each commit (redelivered events are recorded once: replaying is always safe)."""
    import signal
    import threading

    from adfunnel.observability.logs import log_start, shown_url
    from adfunnel.runtime.standalone import run_aggregator

    settings = _settings_or_exit(event_log_url=_nats(event_log), database_url=database_url)
    _configure_logging(settings)
    try:
        chosen = parse_partitions(partitions, settings.event_partitions)
    except ValueError as exc:
        typer.echo(f"adfunnel: --partitions: {exc}", err=True)
        raise typer.Exit(2) from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with _reachable_or_exit(settings):
        _event_log_or_raise(settings)
        log_start(settings, "-", role="aggregator")
        console.print(f"aggregating partitions {chosen or 'all'} of "
                      f"{shown_url(str(settings.event_log_url))}")
        plane = run_aggregator(settings, chosen, stop)
    agg = plane.aggregator
    if agg is not None:
        console.print(f"stopped after {agg.stats.events} events ({agg.stats.billed} billed)")


def parse_partitions(text: str | None, total: int) -> list[int] | None:
    """``"0-3,8"`` → [0, 1, 2, 3, 8]; None → None (all).

    Raises:
        ValueError: a part that is not a number or range inside ``[0, total)``.
    """
    if text is None:
        return None
    chosen: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not all(n.isascii() and n.isdigit() for n in ((lo, hi) if dash else (lo,))):
            raise ValueError(f"{part!r} is not N or N-M")
        first, last = int(lo), int(hi or lo)
        if not 0 <= first <= last < total:
            raise ValueError(f"{part!r} is outside 0-{total - 1}")
        chosen.update(range(first, last + 1))
    return sorted(chosen)


@contextmanager
def _listening_or_exit(host: str, port: int) -> Iterator[None]:
    """Turn a port that cannot be bound into one line on stderr and exit code 1."""
    try:
        yield
    except (OSError, ValueError) as exc:
        typer.echo(f"adfunnel: cannot listen on {host}:{port}: {exc}", err=True)
        raise typer.Exit(1) from None


#: Exit status of a process whose database or event log cannot be reached at start.
UNREACHABLE = 2


@contextmanager
def _reachable_or_exit(settings: Settings) -> Iterator[None]:
    """Turn a database or an event log (NATS) that cannot be reached into one line on
    stderr and exit code :data:`UNREACHABLE` (2), with no traceback."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    from adfunnel.events.log import EventLogUnavailable

    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        typer.echo(f"adfunnel: cannot use the database {hide_password(settings.database_url)}: "
                   f"{first_line(exc.orig or exc)}", err=True)
        raise typer.Exit(UNREACHABLE) from None
    except EventLogUnavailable as exc:
        from adfunnel.observability.logs import shown_url

        typer.echo(f"adfunnel: cannot use the event log {shown_url(str(settings.event_log_url))}: "
                   f"{_one_line(exc)}", err=True)
        raise typer.Exit(UNREACHABLE) from None


def _event_log_or_raise(settings: Settings) -> None:
    """Check that the event log (NATS) answers, when there is one: a process that needs
    it stops at start rather than spooling or failing later.

    Raises:
        EventLogUnavailable: it does not answer.
    """
    if settings.event_log_url is not None:
        from adfunnel.events.jetstream_connection import probe

        probe(settings.event_log_url)


def _one_line(exc: BaseException) -> str:
    return " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or \
        type(exc).__name__


def _configure_logging(settings: Settings) -> None:
    from adfunnel.observability.logs import configure_logging

    configure_logging(settings.log_format)


def hide_password(url: str) -> str:
    """``url`` with its password shown as ``***`` (SQLAlchemy's own rendering)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(an unparsable URL)"


def _settings_or_exit(**flags: object) -> Settings:
    """The settings, or every problem found in them printed and exit code 2."""
    try:
        return load_settings(**flags)
    except SettingsError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None


def budget_service(
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8090,
    database_url: Annotated[str | None, typer.Option(help="The fleet's PostgreSQL (campaigns and ledger).", show_default=_setting("database_url"))] = None,
    shard: Annotated[int, typer.Option(help="This shard's number.")] = 0,
    shards: Annotated[int, typer.Option(help="Number of shards (routing: campaign id % shards).")] = 1,
    control_interval_s: Annotated[float, typer.Option(help="Seconds between pacing steps.")] = 10.0,
    billed_every_s: Annotated[float, typer.Option(help="Seconds between ledger reads (<= 10).")] = 5.0,
    token_ttl_s: Annotated[float | None, typer.Option(help="Life of the ad servers' tracking tokens, s (a serve's estimate is kept until its events can no longer bill; default: ADFUNNEL_TOKEN_TTL_S or 3600).", show_default=_setting("token_ttl_s"))] = None,
    warmup_s: Annotated[float, typer.Option(help="Seconds after start before the first slice is granted (every server reports and re-sends first).")] = 3.0,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body, bytes (413 past it).")] = 16 << 20,
) -> None:
    """Run one shard of the budget & pacing service as its own process.

    At start it reads the campaigns and today's billed spend, and grants nothing until
    every ad server has reported to it (a restart or a standby taking over is safe).
    Callers send ADFUNNEL_INTERNAL_TOKEN (required, >= 32 characters) as a bearer."""
    import uvicorn

    from adfunnel.billing.sql_ledger import SqlLedger
    from adfunnel.budget.process import BudgetServiceProcess
    from adfunnel.campaigns.migrate import upgrade
    from adfunnel.campaigns.sql_store import SqlCampaignStore
    from adfunnel.clock import SystemClock
    from adfunnel.db import make_engine
    from adfunnel.observability.logs import log_start

    settings = _settings_or_exit(database_url=database_url, required=("internal_token",))
    assert settings.internal_token is not None  # required above
    _configure_logging(settings)
    ttl = token_ttl_s if token_ttl_s is not None else float(settings.token_ttl_s)
    engine = make_engine(settings.database_url)
    with _reachable_or_exit(settings):
        upgrade(engine)
    clock = SystemClock()
    proc = BudgetServiceProcess(
        SqlCampaignStore(engine, clock), SqlLedger(engine), clock, shard=shard, shards=shards,
        control_interval_s=control_interval_s, billed_every_s=billed_every_s,
        token_ttl_s=ttl, engine=engine, warmup_s=warmup_s,
    )
    proc.start()
    log_start(settings, f"http://{host}:{port}", role="budget-service")
    try:
        uvicorn.run(proc.app(settings.internal_token, max_body_bytes=max_body_bytes),
                    host=host, port=port, log_level="warning", access_log=False)
    finally:
        proc.stop()


def fleet(
    database_url: Annotated[str, typer.Option(help="PostgreSQL; each run uses a fresh schema in it.")] = "postgresql://postgres@127.0.0.1:5432/test",
    redis_url: Annotated[str, typer.Option(help="The Redis every ad server keeps frequency caps in.")] = "redis://127.0.0.1:6379",
    servers: Annotated[int, typer.Option(help="Ad-server processes.")] = 3,
    duration_s: Annotated[float, typer.Option(help="Seconds of load.")] = 120.0,
    rate: Annotated[float, typer.Option(help="Ad requests per second (all servers).")] = 150.0,
    control_interval_s: Annotated[float, typer.Option(help="Seconds between pacing steps.")] = 10.0,
    report: Annotated[Path | None, typer.Option(help="Write the JSON report here.", show_default="none")] = None,
) -> None:
    """Start the real fleet (ad servers, budget service, tracker) and drive it with HTTP load.

    During the run a small-budget campaign exhausts, a campaign is paused and one ad
    server is killed; the report gives billing per campaign and how fast each stopped.
    """
    from adfunnel.sim.fleet import FleetConfig, run_fleet

    result = run_fleet(FleetConfig(database_url=database_url, redis_url=redis_url,
                                   servers=servers,
                                   duration_s=duration_s, rate=rate,
                                   control_interval_s=control_interval_s))
    if report is not None:
        report.write_text(json.dumps(result, indent=2))
    console.print_json(json.dumps(result))
