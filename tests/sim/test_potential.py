"""The replay's own model of what a campaign could spend at p = 1 (``potential_micros``)
and the delivery judged by it, on hand-made log rows whose figures are worked out here."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from adfunnel.sim.ipinyou import CHINA, LogRow
from adfunnel.sim.potential import Bidder, judge_delivery, matches, potential_micros

ROW = LogRow(timestamp=datetime(2013, 10, 19, 10, 0, tzinfo=CHINA), user="u",
             useragent="windows_chrome", ip="1.2.3.*", region="216", city="217",
             exchange="1", domain="d", slot_id="s", width=300, height=250, visibility="0",
             slot_format="0", slot_price_fen=50, pay_price_fen=60, usertags=("10006",),
             click=False)
SIZES = frozenset({"300x250"})


def bidder(cid: int, bid_micros: int, *, bid_type: str = "CPM", budget: int = 1_000,
           targeting: dict | None = None) -> Bidder:
    return Bidder(cid, bid_type, bid_micros, budget, targeting, SIZES, "Asia/Shanghai",
                  click_rate=0.01, prior_ctr=0.001)


def test_targeting_is_matched_as_the_server_defines_it() -> None:
    attrs = {"geo.city": frozenset({"217"}), "interests": frozenset({"1", "2"})}
    assert matches(None, attrs)
    assert matches({"attr": "interests", "in": ["2", "9"]}, attrs)
    assert not matches({"attr": "interests", "not_in": ["2"]}, attrs)
    assert matches({"attr": "os", "not_in": ["linux"]}, attrs)  # absent: avoids every set
    assert not matches({"attr": "os", "in": ["linux"]}, attrs)
    assert matches({"not": {"attr": "geo.city", "in": ["1"]}}, attrs)
    assert matches({"all": [{"attr": "geo.city", "in": ["217"]},
                            {"any": [{"attr": "os", "in": ["x"]},
                                     {"attr": "interests", "in": ["1"]}]}]}, attrs)


def test_a_lone_winner_pays_the_floor_and_a_runner_up_sets_the_price() -> None:
    # floor 50 fen CPM = 500,000 micros per mille; render rate 1/2
    alone = potential_micros([ROW], [bidder(1, 900_000)], 0.5)
    assert alone == {1: {"2013-10-19": 250}}  # 0.5 × 500,000 / 1000
    two = potential_micros([ROW], [bidder(1, 900_000), bidder(2, 700_000)], 0.5)
    # 1 pays 2's eCPM; 2 could win when 1 is out of the auction, and pays the floor
    assert two == {1: {"2013-10-19": 350}, 2: {"2013-10-19": 250}}


def test_rows_a_campaign_cannot_win_add_nothing() -> None:
    rows = [ROW, replace(ROW, width=728, height=90),  # no ad of that size
            replace(ROW, slot_price_fen=100),  # floor above the bid
            replace(ROW, city="1")]  # targeting does not match
    b = bidder(1, 900_000, targeting={"attr": "geo.city", "in": ["217"]})
    assert potential_micros(rows, [b], 1.0) == {1: {"2013-10-19": 500}}


def test_a_cpc_bid_ranks_at_the_prior_and_bills_expected_clicks() -> None:
    # eCPM = 1,000,000 × 0.001 × 1000 = 1,000,000 ≥ floor 500,000; alone it pays the floor
    # in its unit, 500,000 ÷ (0.001 × 1000) = 500,000 per click, × 1 % clicks × render 1
    cpc = bidder(1, 1_000_000, bid_type="CPC")
    assert potential_micros([ROW], [cpc], 1.0) == {1: {"2013-10-19": 5_000}}


def test_days_are_the_campaigns_local_days() -> None:
    late = replace(ROW, timestamp=datetime(2013, 10, 19, 23, 30, tzinfo=CHINA))
    utc = replace(bidder(1, 900_000), time_zone="UTC")
    assert potential_micros([late], [utc], 1.0) == {1: {"2013-10-19": 500}}
    assert potential_micros([late], [bidder(1, 900_000)], 1.0) == {1: {"2013-10-19": 500}}
    early = replace(ROW, timestamp=datetime(2013, 10, 20, 7, 0, tzinfo=CHINA))
    assert potential_micros([early], [utc], 1.0) == {1: {"2013-10-19": 500}}


def _campaign(days: list[dict]) -> dict:
    return {"campaign_id": 1, "name": "c", "pacing_mode": "even",
            "daily_budget_micros": 1_000, "days": days}


def _day(date: str, billed: int) -> dict:
    return {"date": date, "budget_micros": 1_000, "billed_micros": billed,
            "absorbed_overspend_micros": 0, "impressions": 1, "clicks": 0,
            "budget_bound": None}


def test_every_day_whose_potential_reaches_the_budget_is_judged() -> None:
    c = _campaign([_day("2013-10-19", 985), _day("2013-10-20", 970), _day("2013-10-21", 10)])
    potential = {1: {"2013-10-19": 5_000, "2013-10-20": 1_000, "2013-10-21": 999,
                     "2013-10-22": 2_000}}  # a judged day the server billed nothing on
    summary = judge_delivery([c], potential)
    assert summary["judged_days"] == 3 and summary["met_days"] == 1
    assert [(m["date"], m["delivery"]) for m in summary["missed"]] == [
        ("2013-10-20", 0.97), ("2013-10-22", 0.0)]
    days = {d["date"]: d for d in c["days"]}
    assert not days["2013-10-21"]["judged"] and days["2013-10-21"]["potential_micros"] == 999
    assert days["2013-10-22"]["billed_micros"] == 0 and days["2013-10-22"]["judged"]
