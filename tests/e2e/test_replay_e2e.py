"""End to end: start the real server, replay the whole real iPinYou trace, check the report."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

from adfunnel.sim import replay_plans, replayer
from adfunnel.sim.invalid import CRAWLER_SOURCE, HELD_OUT_PROVIDERS
from adfunnel.sim.ipinyou import load_rows
from adfunnel.sim.replay import run_replay
from adfunnel.sim.server_proc import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    rows = load_rows()
    return run_replay(rows, workdir=tmp_path_factory.mktemp("replay"))


def test_every_row_is_one_request(report: dict) -> None:
    assert report["requests"] == 12_526
    assert report["errors"] == {}
    assert 0 < report["filled_slots"] <= report["requests"]
    assert report["latency_ms"]["p50"] > 0
    assert report["catalogue"] is None  # no --catalogue: the nine advertisers only
    assert report["auto_bidding"] is None  # no --auto-bidding: no automatic campaign


def _one_charge(c: dict) -> int:
    return c["bid_micros"] // 1000 if c["bid_type"] == "CPM" else c["bid_micros"]


def test_budgets_bind_and_overspend_stays_within_the_margin(report: dict) -> None:
    # the ledger bills at most the budget by construction; what the budget gate decides
    # is how much was charged beyond it (absorbed): within 1 % or one charge
    limited = 0
    for c in report["campaigns"]:
        assert c["billed_micros"] == sum(d["billed_micros"] for d in c["days"])
        for day in c["days"]:
            margin = max(day["budget_micros"] // 100, _one_charge(c))
            assert day["absorbed_overspend_micros"] <= margin, (c["name"], day)
        limited += c["budget_bound_days"] > 0
    # the plan makes some campaigns budget-bound… (seed 7: 3476 on 19 Oct; 2259 and
    # 3476 on two days each before the direct lines took their slots, README)
    assert limited >= 1
    assert limited < len(report["campaigns"])  # …and not all


def test_every_day_with_the_traffic_for_its_budget_is_judged(report: dict) -> None:
    """Every campaign-day whose potential spend at p = 1 (the replay's own model of the
    rows it could win, not the server's refusals) reaches the budget is judged, and the
    summary counts exactly those."""
    judged = [(c["name"], d) for c in report["campaigns"] for d in c["days"]
              if d["potential_micros"] >= d["budget_micros"]]
    assert all(d["judged"] for _, d in judged)
    assert not any(d["judged"] for c in report["campaigns"] for d in c["days"]
                   if d["potential_micros"] < d["budget_micros"])
    # the three small CPM budgets have the traffic every day (7 days each, at least)
    assert report["delivery"]["judged_days"] == len(judged) >= 21
    missed = {(m["name"], m["date"]) for m in report["delivery"]["missed"]}
    short = {(name, d["date"]) for name, d in judged
             if d["billed_micros"] < 0.98 * d["budget_micros"]}
    assert missed == short
    assert report["delivery"]["met_days"] == len(judged) - len(short)


@pytest.mark.xfail(strict=True, reason=(
    "target missed, reported (README): seed 7 meets 98 % on 1 of 21 judged days (4 "
    "before the direct lines took their slots); 2259 (even) 58-95 % on 7 days, 3358 and "
    "3476 (accelerated) lose most rows they could win to rivals the potential's upper "
    "bound does not charge them for"))
def test_every_judged_day_delivers_98_percent(report: dict) -> None:
    """A day with the traffic for its budget bills ≥ 98 % of it, paced or accelerated, at
    the log's sparse traffic."""
    assert report["delivery"]["missed"] == []


def test_the_replay_paces(report: dict) -> None:
    modes = [c["pacing_mode"] for c in report["campaigns"]]
    assert modes.count("even") >= 3
    assert report["pacing"]["steps"] > 0
    assert 0.0 < report["pacing"]["p_min"] <= 1.0


def _ledger_events(report: dict) -> tuple[int, int]:
    """Impressions and clicks the ledger recorded: the nine campaigns' and the direct
    lines' (which take their slots before the auction)."""
    lines = report["direct_lines"]["lines"]
    return (sum(c["impressions"] for c in report["campaigns"])
            + sum(ln["delivered"] for ln in lines),
            sum(c["clicks"] for c in report["campaigns"]) + sum(ln["clicks"] for ln in lines))


def test_direct_lines_over_the_week(report: dict) -> None:
    """The guaranteed line and the sponsorship run over the whole trace: the sponsorship
    (exchange 1, 21-22 Oct) has more than 1,000 matching requests and is served on 0.5
    of them within ±3 points; the guaranteed line (exchange 2, 20-25 Oct) delivers at
    most its goal, a third of its matching supply counted before the run. (Its
    delivery against the goal and per day against the supply-shaped plan are reported
    in ``targets``, measured, not asserted: README.)"""
    lines = {ln["kind"]: ln for ln in report["direct_lines"]["lines"]}
    s, g = lines["sponsorship"], lines["guaranteed"]
    assert s["matching_requests"] > 1_000
    assert abs(s["served"] / s["matching_requests"] - 0.5) <= 0.03
    assert g["goal"] == round(g["matching_requests"] / 3)
    assert 0 < g["delivered"] <= g["goal"]
    assert report["direct_lines"]["totals"]["served"] == s["served"] + g["served"]


def test_duplicates_billed_once_and_forgeries_refused(report: dict) -> None:
    """Every impression beacon fired is billed once, refused as a duplicate, or flagged as
    invalid traffic; every click is recorded or flagged."""
    fired, ledger, events = report["fired"], report["ledger"], report["events"]
    assert fired["duplicates"] > 0 and fired["forged"] > 0
    assert ledger["invalid_tokens"] == fired["forged"] == fired["forged_refused"]
    impressions, clicks = _ledger_events(report)
    flagged = events["ivt_by_event"]
    assert (impressions + ledger["duplicates_rejected"] + flagged["impression"]
            == fired["impressions"] + fired["duplicates"])
    assert clicks + flagged["click"] == fired["clicks"]
    assert ledger["rows"] == impressions + clicks
    assert fired["bad_redirects"] == 0


def test_injected_invalid_traffic_is_measured_per_independent_source(report: dict) -> None:
    """3 % of served ads' beacons carry a bot's user agent from Device Detector's fixtures
    and 2 % an address from a cloud provider's list the server holds out of its filter:
    per source, the events injected and those flagged (the recall is whatever it is: a
    bot of one list that the other's patterns miss is billed). False positives are the
    events sent as genuine that were flagged, counted event by event; with the injected
    ones flagged they make up the server's own IVT counter exactly."""
    events = report["events"]
    by_source = events["injected_by_source"]
    assert set(by_source) == {CRAWLER_SOURCE} | {f"datacenter_ip:{p}"
                                                 for p in HELD_OUT_PROVIDERS}
    for source, n in by_source.items():
        assert n["injected"] > 0, source
        assert n["flagged"] + n["billed"] <= n["injected"], source
    assert sum(n["injected"] for n in by_source.values()) == events["injected_invalid"]
    assert events["injected_invalid_flagged"] == sum(n["flagged"] for n in by_source.values())
    assert set(events["ivt"]) <= {"crawler_ua", "datacenter_ip", "crawler_ip", "missing_ua",
                                  "bad_ip", "impossible_timing"}
    assert events["genuine_events"] > 10 * events["injected_invalid"]
    assert 0 <= events["ivt_false_positives"] < events["genuine_events"] // 100
    assert (events["ivt_total"]
            == events["injected_invalid_flagged"] + events["ivt_false_positives"])
    # measured by the server's aggregator: beacon appended → ledger committed
    assert 0 < events["lag_ms"]["p50"] <= events["lag_ms"]["p99"]


#: The slice that makes the caps bind: the first banner rows of the log's first day,
#: re-keyed to a few users, each sending many requests in one local day (the whole
#: log's users repeat at most twice: a cap of 3 never binds there).
CAP_SLICE_ROWS = 240
CAP_SLICE_USERS = 6
BANNERS = {(728, 90), (1000, 90), (950, 90), (960, 90), (468, 60)}


@pytest.fixture(scope="module")
def cap_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The slice replayed with every one of the nine campaigns capped at 3 per user per
    day (the campaigns that win these rows, 2259 and 2261, are not capped in the
    replay's plan; 1458 and 3386, which are, win none of them)."""
    rows = load_rows()
    first_day = rows[0].timestamp.date()
    banner = [r for r in rows if (r.width, r.height) in BANNERS
              and r.timestamp.date() == first_day][:CAP_SLICE_ROWS]
    assert len(banner) == CAP_SLICE_ROWS
    repeated = [replace(r, user=f"repeat-{i % CAP_SLICE_USERS}") for i, r in enumerate(banner)]
    work = tmp_path_factory.mktemp("replay-caps")
    nine = replay_plans.plans()
    capped = [replace(p, frequency_caps=replay_plans.CAP_3_PER_DAY) for p in nine]
    # a server of the test's own (given time to start on a loaded machine), with the
    # prior click rate of the server run_replay starts (at the default prior, the CPC
    # campaigns outbid the CPM ones on every row)
    prior = inspect.signature(run_replay).parameters["pctr_prior"].default
    with pytest.MonkeyPatch.context() as mp, ServerProcess(
            f"sqlite:///{work / 'caps.sqlite3'}", log_path=work / "server.log",
            timeout_s=300.0, extra_env={"ADFUNNEL_PCTR_PRIOR": str(prior)}) as server:
        mp.setattr(replayer, "plans", lambda: capped)  # where the replayer reads them
        return run_replay(repeated, server=server.url, api_key=server.admin_key)


def test_the_frequency_caps_bind_on_users_who_repeat(cap_report: dict) -> None:
    """Every campaign capped at 3 per user per day; six users each send 40 banner
    requests in one day: no user got more than 3 from one campaign on one local day
    (counted by the replay from the answers), every user reached a cap, and the server
    refused for caps. Mutation that turns it red: caps disabled (``CapBook.capped`` and
    ``capped_mask`` answering no campaign has caps): 25 serves for one user."""
    caps = cap_report["caps"]
    assert len(caps["campaigns"]) == 9
    assert caps["users_served_capped"] == CAP_SLICE_USERS
    assert caps["max_serves_per_user_window"] == 3
    assert caps["capped_rejections"] > 0  # measured by the server
    assert caps["cap_unavailable"] == 0 and caps["no_user_key"] == 0


def test_the_served_log_holds_every_committed_decision(report: dict) -> None:
    """Read back from the server's Parquet files with DuckDB and joined with the ledger:
    one record per committed decision, one training row per winner, and the ledger's
    impressions and clicks found on them."""
    served = report["served_log"]
    assert served["records"] == served["decisions_committed"] == report["committed_decisions"]
    assert served["winners"] == served["training_rows"] == report["filled_slots"]
    impressions, clicks = _ledger_events(report)
    assert served["impressed"] == impressions
    assert served["clicked"] == clicks
