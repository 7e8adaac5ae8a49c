"""The advertiser API sells the way operators sell (#25): create, PATCH and GET carry
``priority``, ``goal``, ``budget_period``, ``flight_budget_micros`` and the
``frontloaded`` pacing mode; a guaranteed line defaults to a flight period without a
daily ceiling; every broken rule is named at once (422); goals and flight budgets are
money within the server's limits."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.campaigns.model import BudgetPeriod, Goal, GoalMetric, Priority
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.settings.model import DEFAULT_MAX_BID_MICROS, DEFAULT_MAX_BUDGET_MICROS

#: A guaranteed line: 2,000,000 impressions over four weeks at a CPM of 5.00.
GUARANTEED: dict[str, Any] = {
    "name": "News section, November", "objective": "impressions", "bid_type": "CPM",
    "bid_micros": 5_000_000, "time_zone": "America/New_York", "flight_start": "2026-11-02",
    "flight_end": "2026-11-29", "priority": "guaranteed",
    "goal": {"metric": "impressions", "total": 2_000_000}}
#: A home-page takeover for one day.
SPONSORSHIP: dict[str, Any] = {
    "name": "Home page Tuesday", "objective": "impressions", "bid_type": "CPM",
    "bid_micros": 12_000_000, "daily_budget_micros": 500_000_000, "time_zone": "UTC",
    "flight_start": "2026-11-03", "flight_end": "2026-11-03", "priority": "sponsorship",
    "goal": {"metric": "share", "share": 1}}
AUCTION: dict[str, Any] = {
    "name": "Always on", "objective": "clicks", "bid_type": "CPC", "bid_micros": 400_000,
    "daily_budget_micros": 10_000_000, "time_zone": "UTC", "flight_start": "2026-11-01"}


@pytest.fixture
def adv(client: TestClient) -> int:
    return int(client.post("/v1/advertisers", json={"name": "Acme"}).json()["id"])


def create(client: TestClient, adv: int, body: dict[str, Any], **over: Any) -> Any:
    return client.post("/v1/campaigns", json={"advertiser_id": adv, **body, **over})


def named(r: Any) -> list[str]:
    assert r.status_code == 422, r.text
    return [f["field"] for f in r.json()["fields"]]


def test_a_guaranteed_line_defaults_to_its_flight_without_a_daily_ceiling(
        client: TestClient, adv: int, store: SqlCampaignStore) -> None:
    r = create(client, adv, GUARANTEED)
    assert r.status_code == 201, r.text
    made = r.json()
    assert "warnings" not in made  # a daily budget of 0 is no ceiling, not "nothing fits"
    assert (made["priority"], made["goal"], made["budget_period"], made["daily_budget_micros"],
            made["flight_budget_micros"]) == (
        "guaranteed", {"metric": "impressions", "total": 2_000_000}, "flight", 0, None)
    assert client.get(f"/v1/campaigns/{made['id']}").json() == made
    kept = store.get_campaign(made["id"])
    assert (kept.priority, kept.goal, kept.budget_period) == (
        Priority.GUARANTEED, Goal(GoalMetric.IMPRESSIONS, total=2_000_000), BudgetPeriod.FLIGHT)
    # a daily ceiling may still be given
    capped = create(client, adv, GUARANTEED, daily_budget_micros=500_000_000).json()
    assert capped["daily_budget_micros"] == 500_000_000


def test_sponsorship_average_day_flight_and_old_bodies(client: TestClient, adv: int) -> None:
    s = create(client, adv, SPONSORSHIP)
    assert s.status_code == 201, s.text
    assert (s.json()["goal"], s.json()["budget_period"]) == ({"metric": "share", "share": 1.0},
                                                             "day")
    avg = create(client, adv, AUCTION, budget_period="average_day", pacing_mode="frontloaded")
    assert (avg.json()["budget_period"], avg.json()["pacing_mode"]) == ("average_day",
                                                                        "frontloaded")
    flight = create(client, adv, AUCTION, budget_period="flight", flight_end="2026-11-30",
                    flight_budget_micros=300_000_000)
    assert flight.status_code == 201, flight.text
    assert flight.json()["flight_budget_micros"] == 300_000_000
    old = create(client, adv, AUCTION).json()  # a body of before #25
    assert (old["priority"], old["goal"], old["budget_period"], old["flight_budget_micros"]
            ) == ("auction", None, "day", None)


@pytest.mark.parametrize(("body", "over", "fields"), [
    (SPONSORSHIP, {"goal": {"metric": "share", "share": 0}}, ["goal.share"]),
    (SPONSORSHIP, {"goal": {"metric": "share", "share": 1.5}}, ["goal.share"]),
    (SPONSORSHIP, {"goal": {"metric": "share", "share": "0.5"}}, ["goal.share"]),
    (SPONSORSHIP, {"goal": {"metric": "share"}}, ["goal.share"]),
    (SPONSORSHIP, {"goal": None}, ["goal"]),
    (SPONSORSHIP, {"bid_type": "CPC"}, ["bid_type"]),
    (SPONSORSHIP, {"goal": {"metric": "reach", "share": 0.5}}, ["goal.metric"]),
    (GUARANTEED, {"goal": {"metric": "impressions", "total": 0}}, ["goal.total"]),
    (GUARANTEED, {"goal": {"metric": "impressions", "total": 2.5}}, ["goal.total"]),
    (GUARANTEED, {"goal": {"metric": "impressions"}}, ["goal.total"]),
    (GUARANTEED, {"goal": {"metric": "clicks", "total": 10}}, ["bid_type"]),
    (GUARANTEED, {"flight_end": None}, ["flight_end"]),
    (GUARANTEED, {"budget_period": "day", "daily_budget_micros": 1}, ["budget_period"]),
    (GUARANTEED, {"goal": {"metric": "impressions", "total": 5, "extra": 1}}, ["goal.extra"]),
    (AUCTION, {"goal": {"metric": "clicks", "total": 5}}, ["goal"]),
    (AUCTION, {"priority": "premium"}, ["priority"]),
    (AUCTION, {"budget_period": "week"}, ["budget_period"]),
    (AUCTION, {"budget_period": "flight"}, ["flight_end", "flight_budget_micros"]),
    (AUCTION, {"budget_period": "average_day", "daily_budget_micros": 0},
     ["daily_budget_micros"]),
    (AUCTION, {"flight_budget_micros": 5_000_000}, ["flight_budget_micros"]),
    (AUCTION, {"flight_budget_micros": 0, "budget_period": "flight",
               "flight_end": "2026-11-30"}, ["flight_budget_micros"]),
    (AUCTION, {"pacing_mode": "backloaded"}, ["pacing_mode"]),
    ({k: v for k, v in AUCTION.items() if k != "daily_budget_micros"}, {},
     ["daily_budget_micros"]),
])
def test_create_refuses_each_broken_rule_naming_its_field(
        client: TestClient, adv: int, body: dict[str, Any], over: dict[str, Any],
        fields: list[str]) -> None:
    assert named(create(client, adv, body, **over)) == fields


def test_every_problem_is_named_at_once(client: TestClient, adv: int) -> None:
    r = create(client, adv, GUARANTEED, bid_type="CPC", flight_end=None,
               goal={"metric": "impressions", "total": 3 * 10**9},
               flight_budget_micros=DEFAULT_MAX_BUDGET_MICROS + 1)
    # the server's money limits and the store's rules, in one answer
    assert named(r) == ["flight_budget_micros", "goal.total", "bid_type", "flight_end"]
    r = create(client, adv, {k: v for k, v in AUCTION.items() if k != "daily_budget_micros"},
               budget_period="average_day", goal={"metric": "share", "share": 0.5})
    assert named(r) == ["daily_budget_micros", "goal"]


def test_goal_and_flight_budget_stay_within_the_servers_budget_limit(
        client: TestClient, adv: int) -> None:
    over = DEFAULT_MAX_BUDGET_MICROS + 1
    assert named(create(client, adv, AUCTION, budget_period="flight", flight_end="2026-11-30",
                        flight_budget_micros=over)) == ["flight_budget_micros"]
    # 2 * 10**12 impressions at 5.00 CPM cost 10**10 units: above the limit of 10**7
    assert named(create(client, adv, GUARANTEED, goal={
        "metric": "impressions", "total": 10**12})) == ["goal.total"]
    ceiling = DEFAULT_MAX_BUDGET_MICROS * 1000 // DEFAULT_MAX_BID_MICROS
    at = create(client, adv, GUARANTEED, bid_micros=DEFAULT_MAX_BID_MICROS,
                goal={"metric": "impressions", "total": ceiling})
    assert at.status_code == 201, at.text  # the limit itself is allowed
    url = f"/v1/campaigns/{at.json()['id']}"
    assert named(client.patch(url, json={"goal": {"metric": "impressions",
                                                  "total": ceiling + 1}})) == ["goal.total"]
    line = create(client, adv, GUARANTEED).json()
    raised = client.patch(f"/v1/campaigns/{line['id']}", json={"bid_micros": 10**9 - 1})
    assert raised.status_code == 200  # 2e6 x 999.999999 / 1000: within the limit
    big = create(client, adv, GUARANTEED, goal={"metric": "impressions", "total": 10**9}
                 ).json()  # 10**9 x 5.00 / 1000 = 5 x 10**6 units; at 15.00: above
    assert named(client.patch(f"/v1/campaigns/{big['id']}",
                              json={"bid_micros": 5_000_000 * 3})) == ["goal.total"]


def test_patch_edits_the_sale_and_keeps_every_rule(client: TestClient, adv: int,
                                                   store: SqlCampaignStore) -> None:
    line = create(client, adv, GUARANTEED).json()
    url = f"/v1/campaigns/{line['id']}"
    raised = client.patch(url, json={"goal": {"metric": "impressions", "total": 2_500_000},
                                     "version": 1})
    assert raised.status_code == 200, raised.text
    assert raised.json()["goal"] == {"metric": "impressions", "total": 2_500_000}
    assert named(client.patch(url, json={"goal": None})) == ["goal"]
    assert named(client.patch(url, json={"budget_period": "average_day"})) == [
        "budget_period", "daily_budget_micros"]
    assert named(client.patch(url, json={"priority": "auction"})) == ["goal"]
    assert named(client.patch(url, json={"priority": "auction", "goal": None})) == [
        "flight_budget_micros"]  # without its goal, the flight needs a budget
    sold = client.patch(url, json={"priority": "auction", "goal": None,
                                   "flight_budget_micros": 10_000_000_000})
    assert sold.status_code == 200, sold.text
    assert (sold.json()["priority"], sold.json()["budget_period"]) == ("auction", "flight")
    assert store.get_campaign(line["id"]).version == 3

    auction = create(client, adv, AUCTION, bid_type="CPM", objective="impressions").json()
    url = f"/v1/campaigns/{auction['id']}"
    # making a line guaranteed sets its period to flight when the PATCH does not say
    made = client.patch(url, json={"priority": "guaranteed", "flight_end": "2026-11-30",
                                   "goal": {"metric": "impressions", "total": 1000}})
    assert made.status_code == 200, made.text
    assert made.json()["budget_period"] == "flight"
    assert named(client.patch(url, json={"flight_budget_micros": 0})) == [
        "flight_budget_micros"]


def test_put_budget_sets_and_keeps_the_flight_budget(client: TestClient, adv: int) -> None:
    c = create(client, adv, AUCTION, budget_period="flight", flight_end="2026-11-30",
               flight_budget_micros=300_000_000).json()
    url = f"/v1/campaigns/{c['id']}/budget"
    r = client.put(url, json={"daily_budget_micros": 0, "flight_budget_micros": 400_000_000})
    assert r.status_code == 200, r.text
    assert (r.json()["daily_budget_micros"], r.json()["flight_budget_micros"]) == (
        0, 400_000_000)
    kept = client.put(url, json={"daily_budget_micros": 20_000_000}).json()
    assert kept["flight_budget_micros"] == 400_000_000
    assert named(client.put(url, json={"daily_budget_micros": 0,
                                       "flight_budget_micros": None})) == [
        "flight_budget_micros"]
    assert named(client.put(url, json={"daily_budget_micros": 0, "flight_budget_micros":
                                       DEFAULT_MAX_BUDGET_MICROS + 1})) == [
        "flight_budget_micros"]


def test_warnings_of_a_goal_line(client: TestClient, adv: int) -> None:
    short = create(client, adv, GUARANTEED, flight_budget_micros=9_000_000_000).json()
    assert [w["field"] for w in short["warnings"]] == ["flight_budget_micros"]  # < 10,000 units
    tiny = create(client, adv, GUARANTEED, goal={"metric": "impressions", "total": 1},
                  bid_micros=500).json()  # one impression may charge 1 micro; the goal 0
    assert [w["field"] for w in tiny["warnings"]] == ["bid_micros"]


def test_the_readmes_worked_example_runs(client: TestClient, adv: int) -> None:
    """Each JSON body of README §"Sell the way operators sell" is answered as it says."""
    import json
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("### Sell the way operators sell"):
                   text.index("#### Allocation among guaranteed lines")]
    bodies = [json.loads(m) for m in re.findall(r"-d '(\{.*?\})'", section, re.S)]
    assert len(bodies) == 4
    made = [create(client, adv, {k: v for k, v in b.items() if k != "advertiser_id"})
            for b in bodies[:3]]
    assert [r.status_code for r in made] == [201, 201, 201], [r.text for r in made]
    line, sponsor, average = (r.json() for r in made)
    assert (line["budget_period"], line["daily_budget_micros"]) == ("flight", 0)
    assert sponsor["goal"] == {"metric": "share", "share": 1.0}
    assert average["budget_period"] == "average_day"
    raised = client.patch(f"/v1/campaigns/{line['id']}", json=bodies[3])
    assert raised.status_code == 200 and raised.json()["goal"]["total"] == 2_500_000


@pytest.mark.postgres
def test_selling_over_the_api_on_postgresql(pg_schema_url: str) -> None:
    """The same API over a PostgreSQL store: what is written reads back, through GET, a
    second connection's store and its change log."""
    from fastapi import FastAPI

    from adfunnel.api.campaigns import make_advertiser_router
    from adfunnel.api.errors import install_error_handlers
    from adfunnel.auth import ApiKeys, MemoryKeyStore, install_auth
    from adfunnel.billing.ledger import MemoryLedger
    from adfunnel.campaigns.migrate import upgrade
    from adfunnel.clock import FixedClock
    from adfunnel.db import make_engine
    from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
    from tests.campaigns.conftest import NOW

    engines = [make_engine(pg_schema_url), make_engine(pg_schema_url)]
    try:
        upgrade(engines[0])
        writer, reader = (SqlCampaignStore(e, FixedClock(NOW)) for e in engines)
        app = FastAPI()
        install_error_handlers(app)
        install_auth(app, ApiKeys(MemoryKeyStore(), FixedClock(NOW), ADMIN_KEY))
        app.include_router(make_advertiser_router(writer, MemoryLedger(), FixedClock(NOW)))
        with TestClient(app, headers=ADMIN_HEADERS) as client:
            adv = int(client.post("/v1/advertisers", json={"name": "a"}).json()["id"])
            made = [create(client, adv, b).json() for b in (GUARANTEED, SPONSORSHIP)]
            assert named(create(client, adv, GUARANTEED, flight_end=None)) == ["flight_end"]
            raised = client.patch(f"/v1/campaigns/{made[0]['id']}", json={
                "goal": {"metric": "impressions", "total": 2_500_000}}).json()
            assert client.get(f"/v1/campaigns/{made[0]['id']}").json() == raised
        line = reader.get_campaign(made[0]["id"])
        assert line.goal == Goal(GoalMetric.IMPRESSIONS, total=2_500_000)
        assert reader.get_campaign(made[1]["id"]).goal == Goal(GoalMetric.SHARE, share=1.0)
        logged = [c.record for c in reader.changes_since(0) if c.entity == "campaign"]
        assert logged[-1] == line
    finally:
        for e in engines:
            e.dispose()


def test_put_budget_of_a_flight_takes_the_flight_budget_alone(
        client: TestClient, adv: int) -> None:
    """A flight's daily budget is optional on create (no daily ceiling); its budget edit
    need not name one either: the ceiling it has is kept. A day campaign's edit still
    needs its daily budget."""
    flight = create(client, adv, AUCTION, budget_period="flight", flight_end="2026-11-30",
                    flight_budget_micros=300_000_000, daily_budget_micros=None).json()
    r = client.put(f"/v1/campaigns/{flight['id']}/budget",
                   json={"flight_budget_micros": 400_000_000})
    assert r.status_code == 200, r.text
    assert (r.json()["flight_budget_micros"], r.json()["daily_budget_micros"]) == (
        400_000_000, 0)
    capped = create(client, adv, GUARANTEED, daily_budget_micros=500_000_000).json()
    r = client.put(f"/v1/campaigns/{capped['id']}/budget", json={"flight_budget_micros": None})
    assert r.status_code == 200, r.text
    assert (r.json()["flight_budget_micros"], r.json()["daily_budget_micros"]) == (
        None, 500_000_000)
    day = create(client, adv, AUCTION).json()
    r = client.put(f"/v1/campaigns/{day['id']}/budget", json={"lifetime_budget_micros": 5})
    assert named(r) == ["daily_budget_micros"]
    assert r.json()["fields"][0]["problem"] == "is required"
