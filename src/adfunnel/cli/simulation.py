"""The product's runs: ``adfunnel replay`` (the real iPinYou log through a real server)
and ``adfunnel simulate`` (a day of the budget & pacing service on a virtual clock)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from adfunnel.cli.console import console
from adfunnel.cli.summary import progress_bar
from adfunnel.money import format_units

#: The availability forecast check (:mod:`adfunnel.sim.forecast_check`): two weeks on a
#: real embedded server.
FORECAST = "forecast"
#: The automatic bidding scenario (:mod:`adfunnel.sim.auto_bidding`): two passes of a day.
AUTO_BIDDING = "auto-bidding"


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
    direct: Annotated[bool, typer.Option(help="Add a guaranteed line (exchange 2, goal a third of its matching supply) and a sponsorship (exchange 1, share 0.5, two days) and report `direct_lines`.")] = True,
    openrtb: Annotated[bool, typer.Option(help="Sell the nine campaigns over OpenRTB 2.6 (POST /openrtb2/bid), the replay playing the exchange (second price against each row's real payprice; win, billing and loss notices, a few forged, late and above-the-bid ones), and report `openrtb`; no direct lines.")] = False,
    auto_bidding: Annotated[str | None, typer.Option(help="Add an automatic bidding campaign (exchange 1, 8 CNY a day) and report `auto_bidding`: max_clicks, manual:<cpc micros>, or ceiling (max_clicks at λ = 1, a budget that never binds); compare: three replays of the rows, max_clicks, manual at its average CPC, and ceiling (which judges the days traffic allows), and report them.", show_default="none")] = None,
) -> None:
    """Replay the real iPinYou log (12,526 rows) through a real server and report."""
    from rich.progress import Progress

    from adfunnel.sim.ipinyou import load_rows
    from adfunnel.sim.replay import run_replay
    from adfunnel.sim.replay_auto import COMPARE, compare, parse_mode, summary_lines

    try:
        rows = load_rows(limit)[::every]
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    if learn and server is not None:
        console.print("[red]--learn needs the replay's own server: leave out --server[/red]")
        raise typer.Exit(2)
    if auto_bidding is not None:
        try:
            if auto_bidding != COMPARE:
                parse_mode(auto_bidding)
            elif server is not None or database_url is not None:
                raise ValueError("--auto-bidding compare starts a fresh server for each "
                                 "pass: leave out --server and --database-url")
        except ValueError as exc:
            console.print(f"[red]{exc}[/red]")
            raise typer.Exit(2) from None
    if server is None:
        console.print("starting a server (embedded SQLite, manual clock) …")
    with Progress(console=console) as progress:
        task = progress.add_task("replaying", total=len(rows) * (
            3 if auto_bidding == COMPARE else 1))
        kwargs: dict[str, Any] = {
            "server": server, "database_url": database_url, "seed": seed,
            "ctr_scale": ctr_scale, "pctr_prior": pctr_prior, "speed": speed,
            "progress": lambda n: progress.advance(task, n), "event_log": event_log,
            "learn": learn, "catalogue": catalogue, "api_key": api_key, "direct": direct,
            "openrtb": openrtb}
        if auto_bidding == COMPARE:
            both = compare(rows, run_replay, report, ceiling=True, **kwargs)
        else:
            result = run_replay(rows, auto_bidding=auto_bidding, **kwargs)
    if auto_bidding == COMPARE:
        for line in summary_lines(both):
            typer.echo(line)
        console.print(f"report written to {report}")
        return
    report.write_text(json.dumps(result, indent=2))
    print_replay_summary(result)
    for line in _openrtb_summary(result.get("openrtb")):
        console.print(line, markup=False)
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
    for line in _direct_lines_summary(result.get("direct_lines")):
        console.print(line, markup=False)
    for line in _sales_summary(result):
        console.print(line, markup=False)
    by_source = result["events"].get("injected_by_source") or {}
    if by_source:
        console.print("IVT recall (flagged/injected): " + "  ".join(
            f"{source} {n['flagged']}/{n['injected']}" for source, n in by_source.items()))


def _openrtb_summary(rtb: dict | None) -> list[str]:
    """``--openrtb``: bids, wins, spend, clearing prices, bad notices refused."""
    if not rtb:
        return []
    clearing = rtb["clearing"] or {}
    spend = "n/a" if rtb["spend_micros"] is None else format_units(rtb["spend_micros"])
    out = [f"openrtb: requests {rtb['requests']}  bids {rtb['bids']}  wins {rtb['wins']}  "
           f"win rate {rtb['win_rate']}  spend {spend}  clearing/bid mean "
           f"{clearing.get('mean_ratio_to_bid')} (above the bid: {clearing.get('above_bid')})",
           "  no bids: " + "  ".join(f"{k} {v}" for k, v in rtb["no_bids"].items())]
    out += [f"  {kind} notices: sent {n['sent']}, refused by the server {n['refused_by_server']}"
            for kind, n in rtb["bad_notices"].items()]
    if rtb["money_checks"] is not None:
        m = rtb["money_checks"]
        out.append(f"  campaign-days above budget {len(m['above_budget_days'])}  billed twice "
                   f"{m['billed_twice']}  late notices billed {m['late_billed']}")
    return out


def _direct_lines_summary(direct: dict | None) -> list[str]:
    """Each direct line's matching requests, serves, delivered against its goal, billed,
    a sponsorship's share, and every target's verdict."""
    if not direct:
        return []
    out = []
    for ln in direct["lines"]:
        goal = f"/{ln['goal']}" if ln["goal"] is not None else ""
        share = f"  share {ln['share']}" if "share" in ln else ""
        out.append(f"{ln['key']} ({ln['kind']}): matching {ln['matching_requests']}  "
                   f"served {ln['served']}  delivered {ln['delivered']}{goal}  "
                   f"billed {format_units(ln['billed_micros'])}{share}")
    for t in direct["targets"]:
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "MISSED")
        out.append(f"  [{verdict}] {t['line']}: {t['target']}: {t['value']} ({t['limit']})")
    return out


def _sales_summary(result: dict, top: int = 5) -> list[str]:
    """Total revenue; revenue, fill and eCPM of the ``top`` placements by revenue (of
    how many) and of every slot size (adfunnel.sim.replay_sales)."""
    revenue = result.get("revenue")
    if not revenue:
        return []
    cur = revenue["currency"] or ""

    def units(micros: int) -> str:  # four decimals: the replay's CPMs are fractions of ¥1
        whole, frac = divmod(micros, 1_000_000)
        return f"{whole:,}.{frac // 100:04d} {cur}".strip()

    def row(name: str, f: dict) -> str:
        fill = "—" if f["fill_rate"] is None else f"{f['fill_rate']:.1%}"
        ecpm = "—" if f["ecpm_micros"] is None else units(f["ecpm_micros"])
        return (f"  {name}: revenue {units(f['revenue_micros'])}  fill {fill}  "
                f"eCPM {ecpm}  requests {f['requests']}")

    placements = result["placements"]
    out = [f"revenue {units(revenue['total_micros'])} over "
           f"{placements['totals']['placements']} placements; the top {top}:"]
    out += [row(p["placement"], p) for p in placements["rows"][:top]]
    out.append("by slot size:")
    out += [row(s["size"], s) for s in result["slot_sizes"]]
    return out


def _judged_days(c: dict) -> str:
    """'k/n': of the n days whose potential spend at p = 1 reaches the budget, k billed
    at least 98 % of it."""
    judged = [d for d in c["days"] if d.get("judged")]
    full = sum(d["billed_micros"] >= 0.98 * d["budget_micros"] for d in judged)
    return f"{full}/{len(judged)}"


def _scenario_names() -> str:
    """Every ``--scenario`` name, listed by ``adfunnel simulate --help``: the day
    simulation's (:mod:`adfunnel.sim.scenarios`) and the flight simulation's
    (:mod:`adfunnel.sim.flight_scenarios`), read from data modules without running
    anything."""
    from adfunnel.sim.flight_scenarios import flight_scenarios
    from adfunnel.sim.scenarios import scenarios

    return ", ".join([*scenarios(), AUTO_BIDDING, *flight_scenarios(), FORECAST])


def simulate(
    scenario: Annotated[str, typer.Option(help=f"Scenario name: {_scenario_names()}. "
                                          "'flight': a week of direct and auction lines on "
                                          "a real server; 'forecast': forecasts judged on "
                                          "the week after.")] = "baseline",
    report: Annotated[Path | None, typer.Option(help="Write the JSON report here.", show_default="none")] = None,
    plots: Annotated[Path | None, typer.Option(help="Directory for one PNG per campaign (day scenarios).", show_default="none")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    short: Annotated[bool, typer.Option(help="The short form used by tests.")] = False,
) -> None:
    """Simulate a day of the budget & pacing service on a virtual clock, or (``--scenario
    flight``) a week of sponsorship, guaranteed and auction lines on a real server."""
    from adfunnel.sim.flight_scenarios import flight_scenarios

    if scenario in flight_scenarios():
        _simulate_flight(scenario, report, seed, short)
        return
    if scenario == FORECAST:
        _simulate_forecast(report, seed, short)
        return
    if scenario == AUTO_BIDDING:
        _simulate_auto_bidding(report, seed, short)
        return
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


def _simulate_auto_bidding(report: Path | None, seed: int, short: bool) -> None:
    """``simulate --scenario auto-bidding``: max_clicks, then its manual twin."""
    from adfunnel.sim.auto_bidding import run_auto_bidding, summary_lines

    with progress_bar(console, "simulating auto-bidding (simulated time, two passes)") as update:
        result = run_auto_bidding(report, seed=seed, short=short, progress=update)
    for line in summary_lines(result):
        typer.echo(line)
    if report is not None:
        console.print(f"report written to {report}")


def _simulate_forecast(report: Path | None, seed: int, short: bool) -> None:
    """``simulate --scenario forecast``: two weeks, the forecasts' verdicts."""
    from adfunnel.sim.forecast_check import run_forecast_check, summary_lines

    with progress_bar(console, "simulating forecast (two weeks of requests)") as update:
        result = run_forecast_check(report, seed=seed, short=short, progress=update)
    for line in summary_lines(result):
        typer.echo(line)
    if report is not None:
        console.print(f"report written to {report}")


def _simulate_flight(scenario: str, report: Path | None, seed: int, short: bool) -> None:
    """``simulate --scenario flight``: both runs, the summary with every target's verdict."""
    from adfunnel.sim.flight_report import run_flight, summary_lines

    with progress_bar(console, f"simulating {scenario} (requests, both runs)") as update:
        result = run_flight(scenario, report, seed=seed, short=short, progress=update)
    for line in summary_lines(result):
        typer.echo(line)
    if report is not None:
        console.print(f"report written to {report}")
