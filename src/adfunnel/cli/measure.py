"""``adfunnel bench …``: the benchmark commands, each a front of its module in
``adfunnel.bench`` that shows the figures (cli/summary.py) and writes them with ``--json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from adfunnel.cli.console import console
from adfunnel.cli.summary import progress_bar, summary_table

bench_app = typer.Typer(help="Benchmarks (figures are ratios against a baseline in the same run).")


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


@bench_app.command("openrtb")
def bench_openrtb(
    ads: Annotated[int, typer.Option(help="Campaigns of one ad each.")] = 100_000,
    workers: Annotated[int, typer.Option(help="Ad-server processes (SO_REUSEPORT).")] = 1,
    concurrency: Annotated[int, typer.Option(help="Keep-alive connections.")] = 16,
    duration_s: Annotated[float, typer.Option(help="Measured seconds per route.")] = 20.0,
    rounds: Annotated[int, typer.Option(help="Alternating windows per route.")] = 4,
    warmup_s: Annotated[float, typer.Option(help="Unmeasured seconds per route first.")] = 2.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
) -> None:
    """POST /openrtb2/bid against POST /v1/ads:select on one server and catalogue,
    windows alternating: decisions/s, per busy core, p50/p99, fill rates (target:
    OpenRTB >= 80 % of select's rate, p99 <= 25 ms)."""
    from adfunnel.bench.openrtb import run_openrtb_bench

    with progress_bar(console, f"bench openrtb: {ads:,} ads, {workers} worker(s)"):
        result = run_openrtb_bench(ads=ads, workers=workers, concurrency=concurrency,
                                   duration_s=duration_s, rounds=rounds, warmup_s=warmup_s)
    _bench_summary("bench openrtb", result, json_path)


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


@bench_app.command("bidding")
def bench_bidding(
    advertisers: Annotated[str, typer.Option(help="Comma-separated iPinYou advertisers.")] = "1458,2259,2261,2821,2997,3358,3386,3427,3476",
    c0: Annotated[str, typer.Option(help="Comma-separated budget shares c0 (fractions like 1/32).")] = "1/32,1/16,1/8,1/4,1/2",
    data: Annotated[Path | None, typer.Option(help="Folder of <adv>.validation.txt and <adv>.train-info.txt.", show_default="shared/data/ipinyou/rlbdp_click_marketprice_pctr")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the rows here.", show_default="none")] = None,
) -> None:
    """Automatic bidding (λ-paced value bids, first-price shading) against linear bidding on
    the iPinYou auctions of Cai et al. (WSDM 2017); tuned on episodes 1-50, measured on 51-100."""
    from fractions import Fraction

    from adfunnel.bench.bidding import run_bidding_bench

    try:
        c0s = tuple(float(Fraction(x.strip())) for x in c0.split(",") if x.strip())
    except (ValueError, ZeroDivisionError):
        console.print("[red]--c0: comma-separated fractions, e.g. 1/32,1/16[/red]")
        raise typer.Exit(2) from None
    names = tuple(x.strip() for x in advertisers.split(",") if x.strip())
    with progress_bar(console, f"bench bidding: {len(names)} advertisers x {len(c0s)} c0"):
        result = run_bidding_bench(data, names, c0s)
    shown = {f"c0={Fraction(t['c0']).limit_denominator()} {t['auction']}":
             {k: v for k, v in t.items() if k.endswith(("_clicks", "_over_budget", "ratio"))}
             for t in result["totals"]}
    _bench_summary("bench bidding", {**shown, "wall_s": result["wall_s"],
                                     "cpu_s": result["cpu_s"]}, None)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))
        console.print(f"rows written to {json_path}")


def _bench_summary(title: str, result: dict, json_path: Path | None) -> None:
    """The figures as a table with units (cli/summary.py); the exact values as JSON at
    ``json_path``."""
    console.print(summary_table(title, result))
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))
        console.print(f"figures written to {json_path}")
