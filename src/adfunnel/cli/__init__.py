"""Command-line entry points: ``adfunnel serve | tracker | aggregator | replay | simulate |
bench | events``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from adfunnel.cli.summary import progress_bar
from adfunnel.money import format_units
from adfunnel.settings import Settings, SettingsError, load_settings

app = typer.Typer(help="adfunnel: an ad server for owned-and-operated inventory.",
                  no_args_is_help=True, add_completion=False)
bench_app = typer.Typer(help="Benchmarks (figures are ratios against a baseline in the same run).")
app.add_typer(bench_app, name="bench")
events_app = typer.Typer(help="The served log: SQL over its hourly Parquet files.")
app.add_typer(events_app, name="events")
model_app = typer.Typer(help="The click model: train and evaluate (hashed logistic regression, "
                        "isotonic calibration).")
app.add_typer(model_app, name="model")
console = Console()


def _print_version(value: bool) -> None:
    if value:
        from adfunnel import __version__

        typer.echo(f"adfunnel {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """adfunnel: an ad server for owned-and-operated inventory."""


def _setting(name: str) -> str:
    """What ``--help`` shows as the default of an option that falls back to a setting:
    the setting's own default and its environment variable."""
    default = Settings.model_fields[name].get_default(call_default_factory=False)
    shown = "none" if default is None else str(default).lower() if isinstance(default, bool) \
        else str(default)
    return f"{shown}, or ADFUNNEL_{name.upper()}"


@app.command()
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
    from adfunnel.runtime.app import (
        build_app,
        build_runtime,
        freeze_startup_heap,
        serve_http,
        serve_workers,
    )

    flags = {"host": host, "port": port, "database_url": database_url, "clock": clock,
             "token_secret": token_secret, "budget_service_url": budget_service,
             "redis_url": redis_url, "served_log_dir": served_log,
             "event_log_url": event_log, "spool_dir": spool_dir, "model_dir": model,
             "cvr_model_dir": cvr_model, "log_format": log_format, "access_log": access_log,
             "workers": workers, "caps": caps}
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
        asgi = build_app(runtime)
        freeze_startup_heap()
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
    address = f"http://{settings.host}:{settings.port} ({workers} workers)"
    with _listening_or_exit(settings.host, settings.port):
        status = serve_workers(settings.host, settings.port, workers,
                               on_start=lambda: log_start(settings, address))
    raise typer.Exit(status)


@app.command()
def tracker(
    event_log: Annotated[str, typer.Option(help="NATS JetStream event log, nats://….")] = "nats://127.0.0.1:4222",
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
    from adfunnel.runtime.app import serve_http
    from adfunnel.runtime.standalone import build_tracker_app

    settings = _settings_or_exit(event_log_url=event_log, host=host, port=port,
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


@app.command()
def aggregator(
    event_log: Annotated[str, typer.Option(help="NATS JetStream event log, nats://….")] = "nats://127.0.0.1:4222",
    database_url: Annotated[str | None, typer.Option(help="The ledger's database, sqlite:///file or postgresql://….", show_default=_setting("database_url"))] = None,
    partitions: Annotated[str | None, typer.Option(help="Partitions to read, e.g. 0-7 or 0,2,4.", show_default="all")] = None,
) -> None:
    """Read partitions of the event log in batches into the ledger, acknowledging after
    each commit (redelivered events are recorded once: replaying is always safe)."""
    import signal
    import threading

    from adfunnel.observability.logs import log_start
    from adfunnel.runtime.standalone import run_aggregator

    settings = _settings_or_exit(event_log_url=event_log, database_url=database_url)
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
        console.print(f"aggregating partitions {chosen or 'all'} of {event_log}")
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
                   f"{_first_line(exc.orig or exc)}", err=True)
        raise typer.Exit(UNREACHABLE) from None
    except EventLogUnavailable as exc:
        typer.echo(f"adfunnel: cannot use the event log {settings.event_log_url}: "
                   f"{_one_line(exc)}", err=True)
        raise typer.Exit(UNREACHABLE) from None


def _event_log_or_raise(settings: Settings) -> None:
    """Check that the event log (NATS) answers, when there is one: a process that needs
    it stops at start rather than spooling or failing later.

    Raises:
        EventLogUnavailable: it does not answer.
    """
    if settings.event_log_url is not None:
        from adfunnel.events.jetstream_log import probe

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


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _settings_or_exit(**flags: object):
    try:
        return load_settings(**flags)
    except SettingsError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None


@app.command()
def replay(
    report: Annotated[Path, typer.Option(help="Write the JSON report here.")] = Path("replay-report.json"),
    server: Annotated[str | None, typer.Option(help="Use a running server (started with --clock manual).", show_default="none: start one")] = None,
    speed: Annotated[float | None, typer.Option(help="Pace at X times the log's real time.", show_default="as fast as the server answers")] = None,
    limit: Annotated[int | None, typer.Option(help="Replay only the first N rows.", show_default="every row")] = None,
    every: Annotated[int, typer.Option(min=1, help="Replay every K-th row (of the first --limit rows): the same days, K times fewer requests.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the render and click draws.")] = 7,
    ctr_scale: Annotated[float, typer.Option(help="Click model: P(click) = scale × advertiser CTR.")] = 3.0,
    pctr_prior: Annotated[float, typer.Option(help="Prior click rate of the started server's pCTR.")] = 0.0005,
    database_url: Annotated[str | None, typer.Option(help="Database of the started server.", show_default="a temporary SQLite file")] = None,
    event_log: Annotated[str | None, typer.Option(help="Event log of the started server: nats://… for JetStream.", show_default="in memory")] = None,
    learn: Annotated[bool, typer.Option(help="Click by an attribute click model, train a click model on the served log of the days before the last, roll it out, serve the last day with it, and report `model`.")] = False,
    catalogue: Annotated[int, typer.Option(min=0, help="Add N run-of-network CPC campaigns (one banner each) so requests have more candidates than the pre-rank keeps; with --learn the report's model.prerank_recall is measured on every model decision.")] = 0,
    api_key: Annotated[str | None, typer.Option(envvar="ADFUNNEL_API_KEY", help="Admin API key of the --server (the started server gets one of its own).", show_default="none, or ADFUNNEL_API_KEY")] = None,
) -> None:
    """Replay the real iPinYou log (12,526 rows) through a real server and report."""
    from rich.progress import Progress

    from adfunnel.sim.ipinyou import load_rows
    from adfunnel.sim.replay import run_replay

    try:
        rows = load_rows(limit)[::every]
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    if learn and server is not None:
        console.print("[red]--learn needs the replay's own server: leave out --server[/red]")
        raise typer.Exit(2)
    if server is None:
        console.print("starting a server (embedded SQLite, manual clock) …")
    with Progress(console=console) as progress:
        task = progress.add_task("replaying", total=len(rows))
        result = run_replay(rows, server=server, database_url=database_url, seed=seed,
                            ctr_scale=ctr_scale, pctr_prior=pctr_prior, speed=speed,
                            progress=lambda n: progress.advance(task, n), event_log=event_log,
                            learn=learn, catalogue=catalogue, api_key=api_key)
    report.write_text(json.dumps(result, indent=2))
    print_replay_summary(result)
    console.print(f"report written to {report}")


def print_replay_summary(result: dict) -> None:
    table = Table(title="adfunnel replay: iPinYou dlf_2259 (CNY)")
    for col in ("campaign", "bid", "daily budget", "billed", "absorbed", "imps", "clicks",
                "pacing", "judged days ≥98 %"):
        table.add_column(col, justify="right")
    for c in result["campaigns"]:
        table.add_row(c["name"].removeprefix("ipinyou-"), f"{c['bid_type']} {format_units(c['bid_micros'])}",
                      format_units(c["daily_budget_micros"]), format_units(c["billed_micros"]),
                      format_units(c["absorbed_overspend_micros"]), str(c["impressions"]),
                      str(c["clicks"]), c["pacing_mode"], _judged_days(c))
    console.print(table)
    lat, led = result["latency_ms"], result["ledger"]
    console.print(
        f"requests {result['requests']}  filled {result['filled_slots']}  "
        f"fill rate {result['fill_rate']:.1%}  latency p50 {lat['p50']} ms p99 {lat['p99']} ms  "
        f"late decisions {result['late_decisions']}\n"
        f"ledger rows {led['rows']}  duplicates rejected {led['duplicates_rejected']}  "
        f"invalid tokens {led['invalid_tokens']}  errors {result['errors'] or 'none'}"
    )
    by_source = result["events"].get("injected_by_source") or {}
    if by_source:
        console.print("IVT recall (flagged/injected): " + "  ".join(
            f"{source} {n['flagged']}/{n['injected']}" for source, n in by_source.items()))


def _judged_days(c: dict) -> str:
    """'k/n': of the n days whose potential spend at p = 1 reaches the budget, k billed
    at least 98 % of it."""
    judged = [d for d in c["days"] if d.get("judged")]
    full = sum(d["billed_micros"] >= 0.98 * d["budget_micros"] for d in judged)
    return f"{full}/{len(judged)}"


@app.command("budget-service")
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
    from adfunnel.campaigns.store import SqlCampaignStore
    from adfunnel.clock import SystemClock
    from adfunnel.db import make_engine

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
    try:
        uvicorn.run(proc.app(settings.internal_token, max_body_bytes=max_body_bytes),
                    host=host, port=port, log_level="warning", access_log=False)
    finally:
        proc.stop()


@app.command()
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


@app.command()
def simulate(
    scenario: Annotated[str, typer.Option(help="Scenario name.")] = "baseline",
    report: Annotated[Path | None, typer.Option(help="Write the JSON report here.", show_default="none")] = None,
    plots: Annotated[Path | None, typer.Option(help="Directory for one PNG per campaign.", show_default="none")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    short: Annotated[bool, typer.Option(help="The short form used by tests.")] = False,
) -> None:
    """Simulate a day of the budget & pacing service on a virtual clock."""
    from adfunnel.sim.day_report import SUMMARY_UNITS, run_simulation, summary_lines

    try:
        with progress_bar(console, f"simulating {scenario} (simulated time)") as update:
            result = run_simulation(scenario, report, plots, seed=seed, short=short,
                                    progress=update)
    except KeyError as exc:
        console.print(f"[red]{exc.args[0]}[/red]")
        raise typer.Exit(2) from None
    for line in summary_lines(result):
        typer.echo(line)
    typer.echo(SUMMARY_UNITS)
    if report is not None:
        console.print(f"report written to {report}")
    if plots is not None:
        console.print(f"plots (PNG) written to {plots}/")


@bench_app.command("index")
def bench_index(
    ads: Annotated[int, typer.Option(help="Number of ads.")] = 100_000,
    workload: Annotated[str, typer.Option(help="go, paper or real.")] = "real",
    queries: Annotated[int, typer.Option(help="Queries to time.")] = 2_000,
    seed: Annotated[int, typer.Option()] = 1,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """Conjunction index vs brute-force scan: build time, bytes per ad, query latency."""
    from adfunnel.bench.index import run_index_bench

    with progress_bar(console, f"bench index: {ads:,} ads, {workload}"):
        result = run_index_bench(ads=ads, workload=workload, queries=queries, seed=seed)
    _bench_summary("bench index", result, json_path)


@bench_app.command("overload")
def bench_overload(
    clients: Annotated[int, typer.Option(help="Concurrent keep-alive clients (closed loop).")] = 1000,
    duration_s: Annotated[float, typer.Option(help="Seconds of load.")] = 5.0,
    deadline_ms: Annotated[int, typer.Option(help="deadline_ms of every ad request.")] = 100,
    campaigns: Annotated[int, typer.Option(help="Campaigns created through the API.")] = 5,
    load: Annotated[str, typer.Option(help="Load generator: python (asyncio, a separate process) or wrk (Debian package wrk).")] = "python",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """One real server under many concurrent clients: client p50/p99, shed share, fill,
    against a one-client baseline measured in the same run (target: p99 <= 2 x deadline)."""
    from adfunnel.bench.overload import run_overload

    if load not in ("python", "wrk"):
        console.print("[red]--load: python or wrk[/red]")
        raise typer.Exit(2)
    with progress_bar(console, f"bench overload: {clients:,} clients"):
        result = run_overload(clients, duration_s, deadline_ms, campaigns, load=load)
    _bench_summary("bench overload", result, json_path)

@bench_app.command("decide")
def bench_decide(
    ads: Annotated[int, typer.Option(help="Number of ads (one campaign per 10 ads).")] = 100_000,
    workload: Annotated[str, typer.Option(help="go, paper or real.")] = "real",
    queries: Annotated[int, typer.Option(help="Decisions to time.")] = 1_000,
    seed: Annotated[int, typer.Option()] = 1,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
    model: Annotated[Path | None, typer.Option(help="A click model artifact: time the predict stage too.", show_default="none")] = None,
) -> None:
    """Whole in-process decisions (columnar path) against the per-candidate reference
    path on the same catalogue and requests: p50/p99, per-stage p50, decisions/s."""
    from adfunnel.bench.decide import run_decide_bench

    with progress_bar(console, f"bench decide: {ads:,} ads, {workload}"):
        result = run_decide_bench(ads=ads, workload=workload, queries=queries, seed=seed,
                                  model=model)
    _bench_summary("bench decide", result, json_path)


@bench_app.command("http")
def bench_http(
    ads: Annotated[int, typer.Option(help="Campaigns of one ad each.")] = 100_000,
    workers: Annotated[int, typer.Option(help="Ad-server processes (SO_REUSEPORT).")] = 1,
    concurrency: Annotated[int, typer.Option(help="Keep-alive connections.")] = 16,
    duration_s: Annotated[float, typer.Option(help="Seconds of load.")] = 10.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """`adfunnel serve` (embedded default) under load from a separate process: decisions/s,
    per busy core, p50/p99, against a bare 204 route of the same process and run."""
    from adfunnel.bench.http import run_http_bench

    with progress_bar(console, f"bench http: {ads:,} ads, {workers} worker(s)"):
        result = run_http_bench(ads=ads, workers=workers, concurrency=concurrency,
                                duration_s=duration_s)
    _bench_summary("bench http", result, json_path)


@bench_app.command("budget")
def bench_budget(
    campaigns: Annotated[int, typer.Option(help="Campaigns in the budget service.")] = 100_000,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """Budget & pacing service at scale: start-up (bulk state read) and one control step."""
    from adfunnel.bench.budget import run_budget_bench

    with progress_bar(console, f"bench budget: {campaigns:,} campaigns"):
        result = run_budget_bench(campaigns=campaigns)
    _bench_summary("bench budget", result, json_path)


@bench_app.command("caps")
def bench_caps(
    decisions: Annotated[int, typer.Option(help="Decisions to time (each decided with and without caps).")] = 5_000,
    redis_url: Annotated[str, typer.Option(help="The Redis holding the cap records.")] = "redis://127.0.0.1:6379",
    users: Annotated[int, typer.Option(help="Distinct user keys, cycled (deleted at the end).")] = 1_000,
    capped: Annotated[int, typer.Option(help="Candidates with caps per request (2 caps each).")] = 5,
    seed: Annotated[int, typer.Option()] = 1,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """Decision time added by frequency caps on a real Redis: in-process decisions with
    CAPPED capped candidates, caps enforced vs none, same run (target: p99 <= 1 ms)."""
    from adfunnel.bench.caps import run_caps_bench

    try:
        with progress_bar(console, f"bench caps: {decisions:,} decisions"):
            result = run_caps_bench(decisions, redis_url, users=users, capped=capped,
                                    seed=seed)
    except (ConnectionError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    _bench_summary("bench caps", result, json_path)


@bench_app.command("model")
def bench_model(
    dataset: Annotated[str, typer.Option(help="criteo or avazu.")] = "criteo",
    input_path: Annotated[Path | None, typer.Option("--input", help="The dataset's file.", show_default="the shared sample")] = None,
    candidates: Annotated[int, typer.Option(help="Rows scored per call (the pre-rank keeps 200).")] = 200,
    calls: Annotated[int, typer.Option(help="Calls timed.")] = 1_000,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """Click-model inference per call on the request path against scikit-learn's own
    estimators on the same rows, same run: p50/p99 µs, speedup, largest difference."""
    from adfunnel.bench.model import run_model_bench
    from adfunnel.data import data_dir

    if dataset not in ("criteo", "avazu") or candidates < 1 or calls < 1:
        console.print("[red]--dataset criteo|avazu, --candidates and --calls >= 1[/red]")
        raise typer.Exit(2)
    path = input_path or data_dir(dataset) / dataset / "wideresdnn_train.csv"
    with progress_bar(console, f"bench model: {dataset}, {candidates} candidates per call"):
        result = run_model_bench(dataset, path, candidates=candidates, calls=calls)
    _bench_summary("bench model", result, json_path)


@bench_app.command("events")
def bench_events(
    database_url: Annotated[str, typer.Option(help="PostgreSQL database the run's own schema is made in (dropped after).")] = "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    event_log: Annotated[str, typer.Option(help="NATS JetStream server (the run's own streams, deleted after).")] = "nats://127.0.0.1:4222",
    campaigns: Annotated[int, typer.Option(help="Campaigns created (half CPM, half CPC).")] = 100,
    events: Annotated[int, typer.Option(help="Events pre-filled for the aggregator.")] = 20_000,
    aggregator_max_s: Annotated[float, typer.Option(help="Longest aggregator window, seconds.")] = 60.0,
    duration_s: Annotated[float, typer.Option(help="Seconds of each closed-loop window (bare route, tracker).")] = 10.0,
    connections: Annotated[int, typer.Option(help="Keep-alive connections of the load generator.")] = 64,
    client_processes: Annotated[int | None, typer.Option(help="Load-generator processes.", show_default="half the cores, 1-4")] = None,
    tokens: Annotated[int, typer.Option(help="Distinct tokens per load-generator process in a closed-loop window (then reused).")] = 50_000,
    lag_rate: Annotated[float, typer.Option(help="Beacons/s offered (paced) while the lag is measured.")] = 5_000.0,
    lag_duration_s: Annotated[float, typer.Option(help="Seconds of paced beacons.")] = 10.0,
    drain_timeout_s: Annotated[float, typer.Option(help="Longest wait for the aggregator after the paced beacons.")] = 300.0,
    tracker_log: Annotated[Path | None, typer.Option(help="Write the tracker's output here.", show_default="none")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """The event plane on PostgreSQL and JetStream: tracker beacons/s against a bare 204
    route (same server kind and client, same run), aggregator events/s on one core,
    beacon-to-ledger lag p99 at LAG_RATE beacons/s offered."""
    from sqlalchemy.exc import OperationalError

    from adfunnel.bench.events import run_events_bench
    from adfunnel.events.log import EventLogUnavailable

    try:
        with progress_bar(console, "bench events"):
            result = run_events_bench(
                database_url=database_url, nats_url=event_log, campaigns=campaigns, events=events,
                aggregator_max_s=aggregator_max_s, duration_s=duration_s, connections=connections,
                client_processes=client_processes, tokens=tokens, lag_rate_per_s=lag_rate,
                lag_duration_s=lag_duration_s, drain_timeout_s=drain_timeout_s,
                log_path=tracker_log)
    except (ValueError, OperationalError, EventLogUnavailable) as exc:
        console.print(f"[red]{str(exc).splitlines()[0]}[/red]")
        raise typer.Exit(2) from None
    _bench_summary("bench events", result, json_path)


@events_app.command("query")
def events_query(
    sql: Annotated[str, typer.Argument(help="DuckDB SQL over the view `served` (one row per decision).")],
    directory: Annotated[Path, typer.Option("--dir", help="The served log's directory (serve --served-log).")] = Path("served-log"),
    compact_first: Annotated[bool, typer.Option(help="Compact closed hours into Parquet first.")] = True,
    output: Annotated[str, typer.Option(help="table, csv or json.")] = "table",
) -> None:
    """Run SQL over the served log, e.g. `adfunnel events query "select count(*) from served"`."""
    import duckdb

    from adfunnel.events.compactor import compact
    from adfunnel.learn.query import query_table

    if output not in ("table", "csv", "json"):
        console.print("[red]--output must be table, csv or json[/red]")
        raise typer.Exit(2)
    if not directory.is_dir():
        console.print(f"[red]no served log at {directory}[/red]")
        raise typer.Exit(2)
    if compact_first:
        compact(directory, datetime.now(UTC))
    try:
        table = query_table(directory, sql)
    except duckdb.Error as exc:
        console.print(f"[red]{_first_line(exc)}[/red]")
        raise typer.Exit(2) from None
    rows = table.to_pylist()
    if output == "json":
        print(json.dumps(rows, default=str))
    elif output == "csv":
        import csv
        import sys

        writer = csv.DictWriter(sys.stdout, fieldnames=table.column_names)
        writer.writeheader()
        writer.writerows(rows)
    else:
        out = Table(*table.column_names)
        for r in rows:
            out.add_row(*(str(v) for v in r.values()))
        console.print(out)


DATASET_HELP = "served-log (a served log directory, with --database-url), criteo or avazu."


@model_app.command("train")
def model_train(
    dataset: Annotated[str, typer.Option(help=DATASET_HELP)],
    input_path: Annotated[Path, typer.Option("--input", help="The dataset's file (served-log: its directory).")],
    out: Annotated[Path, typer.Option(help="Directory the model artifact is written to.")],
    database_url: Annotated[str | None, typer.Option(help="The ledger to join a served log with.", show_default="none")] = None,
    hash_bits: Annotated[int, typer.Option(help="Hashed feature columns: 2**hash_bits.")] = 18,
    c: Annotated[float, typer.Option("--c", help="Inverse L2 regularisation strength.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the 80/20 training/held-out split.")] = 7,
    current: Annotated[Path | None, typer.Option(help="The model in use: refuse the new one when its normalised entropy on the held-out slice is worse.", show_default="none")] = None,
    target: Annotated[str, typer.Option(help="click (pCTR of impressions) or conversion (pCVR of clicks; served-log only).")] = "click",
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the held-out figures here.", show_default="none")] = None,
) -> None:
    """Train, calibrate and measure a click model; write the artifact to --out."""
    from adfunnel.learn import datasets
    from adfunnel.prediction import model

    if not 10 <= hash_bits <= 24 or c <= 0:
        console.print("[red]--hash-bits must be in 10..24 and --c > 0[/red]")
        raise typer.Exit(2)
    try:
        examples = datasets.load(dataset, input_path, database_url=database_url,
                                 target=target)
        trained = model.train(examples, dataset, hash_bits=hash_bits, c=c, seed=seed,
                              target=target)
        if current is not None:
            model.check_not_worse(trained, model.ClickModel.load(current))
    except (datasets.DatasetError, model.ModelError, OSError) as exc:
        console.print(f"[red]{_first_line(exc)}[/red]")
        raise typer.Exit(1) from None
    trained.model.save(out)
    _emit({"version": trained.model.version, "out": str(out), **trained.model.metrics},
          json_path)


@model_app.command("evaluate")
def model_evaluate(
    model_dir: Annotated[Path, typer.Option("--model", help="A model artifact directory.")],
    dataset: Annotated[str, typer.Option(help=DATASET_HELP)],
    input_path: Annotated[Path, typer.Option("--input", help="The dataset's file (served-log: its directory).")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
    database_url: Annotated[str | None, typer.Option(help="The ledger to join a served log with.", show_default="none")] = None,
) -> None:
    """Evaluate a model on every row of a dataset: rows, log_loss, normalized_entropy,
    calibration_ratio (Σ predicted / Σ observed), auc."""
    from adfunnel.learn import datasets
    from adfunnel.prediction import model
    from adfunnel.prediction.metrics import evaluate

    try:
        loaded = model.ClickModel.load(model_dir)
        examples = datasets.load(dataset, input_path, database_url=database_url)
    except (datasets.DatasetError, model.ModelError, OSError) as exc:
        console.print(f"[red]{_first_line(exc)}[/red]")
        raise typer.Exit(1) from None
    _emit(evaluate(examples.labels, loaded.predict(examples.tokens)), json_path)


@model_app.command("ope")
def model_ope(
    logged: Annotated[Path, typer.Option(help="The logged decisions: a served log directory, or an Open Bandit Dataset CSV.")],
    format_: Annotated[str, typer.Option("--format", help="served-log or obd.")],
    target_policy: Annotated[Path, typer.Option(help="CSV item_id,position,probability (summing to 1 per position).")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the estimates here.", show_default="none")] = None,
    database_url: Annotated[str | None, typer.Option(help="The ledger a served log is joined with (its clicks).", show_default="none")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap and the cross-fitting folds.")] = 7,
) -> None:
    """Estimate a target policy's click rate from logged decisions: IPS, SNIPS and doubly
    robust, each with a 95 % bootstrap interval."""
    from adfunnel.learn import ope

    if format_ not in ope.FORMATS:
        console.print(f"[red]--format must be one of {', '.join(ope.FORMATS)}[/red]")
        raise typer.Exit(2)
    try:
        policy = ope.load_policy(target_policy)
        if format_ == "obd":
            rows, left_out = ope.load_obd(logged), 0
        elif database_url is None:
            console.print("[red]--format served-log needs --database-url (the ledger)[/red]")
            raise typer.Exit(2)
        else:
            rows, left_out = ope.load_served(logged, database_url)
        result = ope.estimate(rows, policy, seed=seed)
    except (ope.OpeError, OSError) as exc:
        console.print(f"[red]{_first_line(exc)}[/red]")
        raise typer.Exit(1) from None
    if format_ == "served-log":
        result["left_out_without_propensity"] = left_out
    _emit(result, json_path)


def _bench_summary(title: str, result: dict, json_path: Path | None) -> None:
    """The figures as a table with units (cli/summary.py); the exact values as JSON at
    ``json_path``."""
    from adfunnel.cli.summary import summary_table

    console.print(summary_table(title, result))
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))
        console.print(f"figures written to {json_path}")


def _emit(result: dict, json_path: Path | None) -> None:
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))
    console.print_json(json.dumps(result))


if __name__ == "__main__":
    app()
