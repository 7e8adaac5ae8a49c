"""End to end: the replay's direct lines (a guaranteed line and a sponsorship) on every 4th
row of the real iPinYou trace — the report's ``direct_lines`` figures are the ledger's,
the guaranteed line's goal is a third of the supply the replay counted and is not
exceeded, and the sponsorship is served on its share of the requests it matches."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from adfunnel.sim.ipinyou import LogRow, load_rows
from adfunnel.sim.replay import run_replay
from adfunnel.sim.replay_direct import GOAL_OF_SUPPLY, local_day
from adfunnel.sim.replay_plans import SIZES

pytestmark = pytest.mark.e2e

EVERY = 4
#: Matching requests from which a correct 0.5 draw is held to the ±3 points target (σ
#: 1.6 points at 1,000); below it, to three binomial σ (still red for a broken draw).
ENOUGH_SUPPLY = 1_000


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, list[LogRow]]:
    work = tmp_path_factory.mktemp("replay-direct")
    rows = load_rows()[::EVERY]
    return run_replay(rows, workdir=work), work, rows


def _lines(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {ln["kind"]: ln for ln in report["direct_lines"]["lines"]}


def _ledger_days(work: Path, campaign_id: int) -> dict[str, tuple[int, int]]:
    """Local day -> (impression rows, billed micros) of the campaign, read from the
    ledger table of the replay's database."""
    from sqlalchemy import func, select

    from adfunnel.billing.tables import ledger
    from adfunnel.db import make_engine

    engine = make_engine(f"sqlite:///{work / 'replay.sqlite3'}")
    try:
        with engine.connect() as conn:
            q = (select(ledger.c.day, ledger.c.event_type, func.count(),
                        func.sum(ledger.c.billed_micros))
                 .where(ledger.c.campaign_id == campaign_id)
                 .group_by(ledger.c.day, ledger.c.event_type))
            out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for day, event, n, billed in conn.execute(q):
                if event == "impression":
                    out[day.isoformat()][0] += n
                out[day.isoformat()][1] += int(billed)
    finally:
        engine.dispose()
    return {d: (v[0], v[1]) for d, v in out.items()}


def test_direct_lines_figures_are_the_ledgers(run: tuple[dict[str, Any], Path, list[LogRow]]
                                              ) -> None:
    """Per line and local day, delivered and billed are the ledger's impression rows and
    billed micros; the totals are the days'. Mutation that turns it red: the report's
    days read from another campaign's report."""
    report, work, _ = run
    lines = report["direct_lines"]["lines"]
    assert {ln["kind"] for ln in lines} == {"guaranteed", "sponsorship"}
    for ln in lines:
        ledger = _ledger_days(work, ln["campaign_id"])
        assert ledger, ln["key"]  # each line billed
        for d in ln["days"]:
            assert (d["delivered"], d["billed_micros"]) == ledger.get(d["day"], (0, 0)), (
                ln["key"], d["day"])
        assert ln["delivered"] == sum(v[0] for v in ledger.values())
        assert ln["billed_micros"] == sum(v[1] for v in ledger.values())
    totals = report["direct_lines"]["totals"]
    assert totals["billed_micros"] == sum(ln["billed_micros"] for ln in lines)


def _matching(rows: list[LogRow], exchange: str, days: set[str]) -> dict[str, int]:
    """Rows of ``exchange`` with a slot of the lines' sizes, per local day in ``days``:
    the test's own count."""
    out: dict[str, int] = defaultdict(int)
    for r in rows:
        day = local_day(r).isoformat()
        if r.exchange == exchange and f"{r.width}x{r.height}" in SIZES and day in days:
            out[day] += 1
    return dict(out)


def test_guaranteed_goal_is_a_third_of_the_counted_supply_and_not_exceeded(
        run: tuple[dict[str, Any], Path, list[LogRow]]) -> None:
    """The goal is a third of the matching rows counted before the run (exchange 2, a
    slot of the lines' sizes, its flight: the second day to the last); the line is
    served on matching rows only, delivers at most its goal and bills at most the
    goal's cost at its rate. Mutations that turn it red: the reader counting the rows of
    other sizes; the report's goal halved."""
    report, _, rows = run
    g = _lines(report)["guaranteed"]
    flight = {d["day"] for d in g["days"] if d["in_flight"]}
    assert len(flight) == 6 and min(flight) > min(d["day"] for d in g["days"])
    counted = _matching(rows, "2", flight)
    assert {d["day"]: d["matching_requests"] for d in g["days"] if d["matching_requests"]} \
        == counted
    sizing = report["direct_lines"]["goal_sizing"][str(g["campaign_id"])]
    assert sizing["matching_requests"] == g["matching_requests"] == sum(counted.values())
    assert g["goal"] == sizing["goal"] == round(GOAL_OF_SUPPLY * g["matching_requests"])
    for d in g["days"]:
        assert d["served"] <= d["matching_requests"], d
    assert 0 < g["delivered"] <= g["goal"]
    assert g["billed_micros"] <= math.ceil(g["goal"] * g["rate_micros"] / 1000)
    assert g["period"]["goal_total"] == g["goal"]


def test_guaranteed_days_are_planned_by_the_server(
        run: tuple[dict[str, Any], Path, list[LogRow]]) -> None:
    """Each in-flight day of the guaranteed line has the server's plan: the campaign
    report's ``period.today.allotment_micros`` read at 01:00 local, in micros and in
    impressions at the line's rate. Mutation that turns it red: the replay never reading
    the plans as its clock moves (``on_clock`` never set)."""
    report, _, _ = run
    g = _lines(report)["guaranteed"]
    assert report["direct_lines"]["plan_exposed"] is True
    for d in g["days"]:
        if d["in_flight"]:
            assert isinstance(d["planned_micros"], int) and d["planned_micros"] > 0, d
            assert d["planned_impressions"] == d["planned_micros"] * 1000 // g["rate_micros"]


def test_sponsorship_served_on_its_share_of_matching_requests(
        run: tuple[dict[str, Any], Path, list[LogRow]]) -> None:
    """The sponsorship (exchange 1, share 0.5, the third and fourth days) is served on
    nothing outside its flight nor beyond its matching rows, and on 0.5 of them: within
    ±3 points with enough supply, else within three binomial σ. Mutation that turns it
    red: the server's share draw at share + 0.1."""
    report, _, rows = run
    s = _lines(report)["sponsorship"]
    flight = {d["day"] for d in s["days"] if d["in_flight"]}
    assert len(flight) == 2
    assert {d["day"]: d["matching_requests"] for d in s["days"] if d["matching_requests"]} \
        == _matching(rows, "1", flight)
    for d in s["days"]:
        assert d["served"] <= d["matching_requests"], d
        if not d["in_flight"]:
            assert d["served"] == 0, d
    n = s["matching_requests"]
    assert s["share"] == round(s["served"] / n, 4)
    limit = 0.03 if n >= ENOUGH_SUPPLY else 3 * math.sqrt(0.25 / n)
    assert abs(s["served"] / n - 0.5) <= limit, (s["served"], n)
    verdicts = {t["target"]: t["met"] for t in report["direct_lines"]["targets"]
                if t["line"] == s["key"]}
    assert verdicts["share of matching requests"] is (abs(s["share"] - 0.5) <= 0.03 + 1e-12)
