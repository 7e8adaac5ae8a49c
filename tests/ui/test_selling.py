"""The dashboard sells the way operators sell (#25): the new-campaign form and the
campaign page's "Selling" form set priority, goal, budget period, flight budget and
pacing mode through the API (its refusals shown next to the field); a guaranteed line's
page shows its goal and what it delivered to date (the campaign report) as progress."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.campaigns.model import BudgetPeriod, Goal, GoalMetric, PacingMode, Priority
from adfunnel.runtime.embedded import Runtime
from adfunnel.ui.forms import FieldProblem
from adfunnel.ui.selling import goal_from_form, plan_view, sale_fields
from tests.ui.test_pages import ADMIN_KEY, client, log_in, rt, world  # noqa: F401  (fixtures)

#: The new-campaign form of a guaranteed line: 2,000,000 impressions at a CPM of 5.00.
GUARANTEED = {"name": "News, four weeks", "objective": "impressions", "bid_type": "CPM",
              "bid": "5", "daily_budget": "", "time_zone": "UTC",
              "flight_start": "2026-07-13", "flight_end": "2026-08-09", "priority": "guaranteed",
              "goal_metric": "", "goal_total": "2,000,000", "goal_share": "",
              "budget_period": "", "flight_budget": "", "pacing_mode": "frontloaded",
              "targeting": ""}


def test_goal_and_sale_fields_from_the_form() -> None:
    assert goal_from_form({"priority": "auction"}) is None
    assert goal_from_form({"priority": "sponsorship", "goal_share": "50%"}) == {
        "metric": "share", "share": 0.5}
    assert goal_from_form({"priority": "guaranteed", "goal_total": "2,000,000"}) == {
        "metric": "impressions", "total": 2_000_000}
    assert goal_from_form({"priority": "guaranteed", "goal_metric": "clicks",
                           "goal_total": "40"}) == {"metric": "clicks", "total": 40}
    for form, field in (({"priority": "sponsorship", "goal_share": "half"}, "goal.share"),
                        ({"priority": "sponsorship", "goal_share": "NaN"}, "goal.share"),
                        ({"priority": "guaranteed", "goal_total": "2e6"}, "goal.total")):
        with pytest.raises(FieldProblem) as bad:
            goal_from_form(form)
        assert bad.value.field == field
    assert sale_fields({"priority": "auction", "budget_period": ""}, edit=False) == {
        "priority": "auction", "pacing_mode": "even"}
    assert sale_fields({"priority": "auction", "budget_period": "flight",
                        "flight_budget": "12.5"}, edit=True) == {
        "priority": "auction", "pacing_mode": "even", "goal": None, "budget_period": "flight",
        "flight_budget_micros": 12_500_000}
    with pytest.raises(FieldProblem) as bad:
        sale_fields({"flight_budget": "lots"}, edit=True)
    assert bad.value.field == "flight_budget_micros"



def test_an_absurd_share_is_a_field_problem_not_a_500() -> None:
    """Breaks if the share is divided or turned into a float unguarded (tried: the
    ``ArithmeticError`` catch removed: ``1e999999999%`` raises ``decimal.Overflow``, a 500
    on the sale form; the finiteness check removed: ``1e999999999`` is sent as ``inf``)."""
    for share in ("1e999999999%", "1e999999999", "sNaN%", "-1e999999999"):
        with pytest.raises(FieldProblem) as bad:
            goal_from_form({"priority": "sponsorship", "goal_share": share})
        assert bad.value.field == "goal.share", share

def test_new_guaranteed_line_from_the_form_and_its_progress(
        rt: Runtime, client: TestClient, world: dict[str, Any]) -> None:  # noqa: F811
    log_in(client, world["key_a"])  # an advertiser may not sell itself a direct line
    r = client.post("/ui/campaigns", data=GUARANTEED)
    assert r.status_code == 422 and 'data-field="priority"' in r.text, r.text
    log_in(client, ADMIN_KEY)  # the operator sells it
    r = client.post("/ui/campaigns", data={**GUARANTEED, "bid_type": "CPC",
                                           "advertiser_id": str(world["a"])})
    assert r.status_code == 422 and 'data-field="bid_type"' in r.text
    r = client.post("/ui/campaigns", data={**GUARANTEED, "goal_total": "0",
                                           "advertiser_id": str(world["a"])})
    assert r.status_code == 422 and 'data-field="goal.total"' in r.text
    r = client.post("/ui/campaigns", data={**GUARANTEED, "advertiser_id": str(world["a"])})
    assert r.status_code == 303, r.text
    cid = int(r.headers["location"].rsplit("/", 1)[1])
    made = rt.store.get_campaign(cid)
    assert (made.priority, made.goal, made.budget_period, made.daily_budget_micros,
            made.pacing_mode) == (Priority.GUARANTEED, Goal(GoalMetric.IMPRESSIONS,
                                                            total=2_000_000),
                                  BudgetPeriod.FLIGHT, 0, PacingMode.FRONTLOADED)
    # 3 impressions on the flight's first day, 2 today (START is 15 July)
    for i, day in enumerate([13, 13, 13, 15, 15]):
        at = datetime(2026, 7, day, 8, 0, tzinfo=UTC)
        rt.ledger.record(LedgerEvent(f"g{i}", EventType.IMPRESSION, cid, 1, "feed", "CPM",
                                     5_000_000, at, date(2026, 7, day)), 10**12)
    page = client.get(f"/ui/campaigns/{cid}").text
    assert 'id="priority">guaranteed<' in page and 'id="goal">2,000,000 impressions<' in page
    assert 'id="budget-period">flight<' in page and 'id="pacing-mode">frontloaded<' in page
    assert '<progress id="goal-progress" max="2000000" value="5">' in page
    assert 'id="goal-delivered">5<' in page and 'id="goal-pct">0.0%<' in page
    rows = client.get("/ui/campaigns").text
    assert f"#{cid} · guaranteed" in rows


def test_the_selling_form_edits_the_line_and_shows_refusals_by_field(
        rt: Runtime, client: TestClient, world: dict[str, Any]) -> None:  # noqa: F811
    log_in(client, world["key_a"])
    cid = world["ca"]  # an auction line, CPM, 10.00 a day
    url = f"/ui/campaigns/{cid}/sale"
    page = client.get(f"/ui/campaigns/{cid}").text
    assert 'id="sale-form"' in page and "<option selected>auction</option>" in page
    assert 'id="sale-progress"' not in page  # sold by the day, no goal: nothing to show
    sponsor = {"version": "1", "priority": "sponsorship", "goal_metric": "",
               "goal_share": "1.5", "goal_total": "", "budget_period": "day",
               "flight_budget": "", "pacing_mode": "even"}
    r = client.post(url, data={**sponsor, "goal_share": "0.5"})  # the advertiser: refused
    assert r.status_code == 422 and 'data-field="priority"' in r.text
    assert rt.store.get_campaign(cid).priority is Priority.AUCTION
    log_in(client, ADMIN_KEY)  # the operator sells the sponsorship
    r = client.post(url, data=sponsor, headers={"HX-Request": "true"})
    assert 'data-field="goal.share"' in r.text and 'value="1.5"' in r.text
    r = client.post(url, data={**sponsor, "goal_share": "0.5"})
    assert r.status_code == 303, r.text
    made = rt.store.get_campaign(cid)
    assert (made.priority, made.goal) == (Priority.SPONSORSHIP, Goal(GoalMetric.SHARE, 0.5))
    page = client.get(f"/ui/campaigns/{cid}").text
    assert 'id="goal">share 0.5 of matching requests<' in page
    flight = {"version": "2", "priority": "auction", "goal_metric": "", "goal_share": "",
              "goal_total": "", "budget_period": "flight", "flight_budget": "",
              "pacing_mode": "even"}
    r = client.post(url, data=flight)  # a flight needs its end and its budget
    assert r.status_code == 422
    assert 'data-field="flight_end"' in r.text and 'data-field="flight_budget_micros"' in r.text
    assert rt.store.get_campaign(cid).version == 2
    r = client.post(url, data={**flight, "budget_period": "average_day"})
    assert r.status_code == 303
    assert rt.store.get_campaign(cid).budget_period is BudgetPeriod.AVERAGE_DAY
    assert 'id="budget-period">average day<' in client.get(f"/ui/campaigns/{cid}").text


def test_plan_view_places_the_bar_and_names_the_state() -> None:
    """A line's ``period.progress`` on its page: percentages of the goal (capped at
    100), the state's label and tone, the band it is named by. Mutation that turns it
    red: the bar's ticks placed as shares of planned to date instead of the goal."""
    assert plan_view(None) is None
    view = plan_view({"metric": "impressions", "delivered": 60, "planned_to_date": 242,
                      "plan_total": 700, "goal": 700, "projected_final": 253,
                      "pace": 60 / 242, "recent_ratio": 0.42, "state": "behind"})
    assert view is not None
    assert (view["delivered_pct"], view["planned_pct"], view["projected_pct"]) == (
        8.6, 34.6, 36.1)
    assert (view["label"], view["tone"], view["band_pct"]) == ("behind plan", "warn", 5)
