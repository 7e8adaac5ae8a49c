"""Direct lines are the operator's to sell: an advertiser key may not create a
sponsorship or guaranteed line, move a campaign into those tiers, or change a direct
line's terms (they are served ahead of the auction and below the reserve at their
contract rate: an advertiser that set its own took every slot at 1 micro CPM). It may
still run its auction campaigns and pause or resume a direct line, but not archive one.

Mutation seen red: ``access.direct_line_terms`` returning at once (every refusal below
answers 200/201)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.campaigns.delivered import deliver


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    runtime = build_runtime(settings, ManualClock(datetime(2026, 11, 2, tzinfo=UTC)), seed=1)
    yield runtime
    runtime.close()


def _body(advertiser: int, **more: Any) -> dict[str, Any]:
    return {"advertiser_id": advertiser, "name": "c", "objective": "impressions",
            "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 10_000_000,
            "time_zone": "UTC", "flight_start": "2026-11-02", **more}


GUARANTEED = {"priority": "guaranteed", "flight_end": "2026-11-08",
              "goal": {"metric": "impressions", "total": 500}}


def _refused(r: Any, field: str) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["fields"][0]["field"] == field



def _guaranteed_body(advertiser_id: int) -> dict[str, Any]:
    """A guaranteed line's create body (a flight budget period: no daily budget)."""
    return {k: v for k, v in _body(advertiser_id, **GUARANTEED).items()
            if k != "daily_budget_micros"}


def _deliver(rt: Runtime, line_id: int, impressions: int) -> None:
    """``impressions`` billed impressions of ``line_id`` in its ledger (2 Nov 2026)."""
    deliver(rt.ledger, line_id, impressions)


def test_an_advertiser_key_cannot_set_a_direct_lines_terms(rt: Runtime) -> None:
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        key = rt.keys.issue("advertiser", adv).key
        own = {"Authorization": f"Bearer {key}"}
        r = admin.post("/v1/campaigns", json=_body(adv, bid_micros=1, priority="sponsorship",
                                                   goal={"metric": "share", "share": 1}),
                       headers=own)
        _refused(r, "priority")
        body = _guaranteed_body(adv)
        _refused(admin.post("/v1/campaigns", json=body, headers=own), "priority")
        auction = admin.post("/v1/campaigns", json=_body(adv), headers=own)
        assert auction.status_code == 201, auction.text
        aid = auction.json()["id"]
        _refused(admin.patch(f"/v1/campaigns/{aid}", headers=own, json={
            "priority": "sponsorship", "goal": {"metric": "share", "share": 1},
            "version": 1}), "priority")
        r = admin.patch(f"/v1/campaigns/{aid}", json={"bid_micros": 1_500_000, "version": 1},
                        headers=own)
        assert r.status_code == 200, r.text  # its auction campaign stays its own
        line = admin.post("/v1/campaigns", json=body)  # the operator sells the line
        assert line.status_code == 201, line.text
        lid = line.json()["id"]
        _refused(admin.patch(f"/v1/campaigns/{lid}", json={"bid_micros": 1, "version": 1},
                             headers=own), "bid_micros")
        _refused(admin.patch(f"/v1/campaigns/{lid}", headers=own, json={
            "goal": {"metric": "impressions", "total": 10**9}, "version": 1}), "goal")
        _refused(admin.put(f"/v1/campaigns/{lid}/budget", headers=own, json={
            "daily_budget_micros": 1, "flight_budget_micros": 1, "version": 1}),
            "daily_budget_micros")
        # archiving cannot be undone (a 409 to :resume): the operator's, not the buyer's
        _refused(admin.delete(f"/v1/campaigns/{lid}", headers=own), "status")
        assert rt.store.get_campaign(lid).status.value == "active"
        r = admin.post(f"/v1/campaigns/{lid}:pause", headers=own, json={"version": 1})
        assert r.status_code == 200 and r.json()["status"] == "paused", r.text
        r = admin.patch(f"/v1/campaigns/{lid}", json={"bid_micros": 3_000_000, "version": 2})
        assert r.status_code == 200, r.text  # the admin still may


def test_a_goal_is_never_lowered_below_what_it_delivered(rt: Runtime) -> None:
    """A guaranteed line that delivered (and billed) 144 impressions may not get a goal
    of 100: nothing beyond a goal is billed, and the dashboard read "44 beyond the goal
    (not billed)" for impressions that were. 144 or more is fine. Mutation seen red: the
    check removed (200 for 100)."""


    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        body = _guaranteed_body(adv)
        lid = admin.post("/v1/campaigns", json=body).json()["id"]
        _deliver(rt, lid, 144)
        r = admin.patch(f"/v1/campaigns/{lid}", json={
            "goal": {"metric": "impressions", "total": 100}, "version": 1})
        assert r.status_code == 422 and r.json()["fields"][0]["field"] == "goal.total", r.text
        assert "144" in r.json()["fields"][0]["problem"]
        r = admin.patch(f"/v1/campaigns/{lid}", json={
            "goal": {"metric": "impressions", "total": 144}, "version": 1})
        assert r.status_code == 200, r.text


def test_a_flight_start_never_moves_past_what_the_line_delivered(rt: Runtime) -> None:
    """A guaranteed line that delivered on its first day may not start a day later: the
    goal counts its flight's days, so it would count from zero again and bill past the
    goal (a tester billed 17 on a goal of 10). An earlier start, or a later one before
    any delivery, is fine. Mutation seen red: the check removed (200)."""
    from datetime import date


    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        body = _guaranteed_body(adv)
        lid = admin.post("/v1/campaigns", json=body).json()["id"]
        other = admin.post("/v1/campaigns", json=body).json()["id"]
        deliver(rt.ledger, lid, day=date(2026, 11, 2))
        r = admin.patch(f"/v1/campaigns/{lid}", json={"flight_start": "2026-11-03",
                                                      "version": 1})
        assert r.status_code == 422, r.text
        assert r.json()["fields"][0]["field"] == "flight_start"
        assert "2026-11-02" in r.json()["fields"][0]["problem"]
        r = admin.patch(f"/v1/campaigns/{lid}", json={"flight_start": "2026-11-01",
                                                      "version": 1})
        assert r.status_code == 200, r.text
        r = admin.patch(f"/v1/campaigns/{other}", json={"flight_start": "2026-11-03",
                                                        "version": 1})
        assert r.status_code == 200, r.text


def test_a_flight_end_never_moves_before_what_the_line_delivered(rt: Runtime) -> None:
    """A guaranteed line (goal 500, flight 2-8 Nov) that delivered on 4 Nov may not end
    on 3 Nov: the days after the end fall out of the flight its goal counts, so a tester
    then lowered the goal below what was billed and, the end moved back, the line had
    billed past its goal. Ending on the 4th (the last day delivered), or later, is fine.
    Mutation seen red: the check removed (200 for 3 Nov)."""
    from datetime import date


    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        lid = admin.post("/v1/campaigns", json=_guaranteed_body(adv)).json()["id"]
        deliver(rt.ledger, lid, day=date(2026, 11, 4))
        r = admin.patch(f"/v1/campaigns/{lid}", json={"flight_end": "2026-11-03",
                                                      "version": 1})
        assert r.status_code == 422, r.text
        (problem,) = r.json()["fields"]
        assert problem["field"] == "flight_end" and "2026-11-04" in problem["problem"]
        r = admin.patch(f"/v1/campaigns/{lid}", json={"flight_end": "2026-11-04",
                                                      "version": 1})
        assert r.status_code == 200, r.text


def test_a_line_that_billed_keeps_its_goal_metric_and_its_end(rt: Runtime) -> None:
    """Two bypasses a tester found: switching the goal to clicks and back dodged the
    contract-rate rule (the line then stopped short of its goal), and switching the
    budget period to ``day`` dodged the ``flight_end`` rule (then back to ``flight``).
    A billed line's goal metric is fixed (422 naming ``goal.metric``), and the end rule
    holds whatever the period. Mutations seen red: ``metric_after_billing`` returning
    None (200); ``end_before_delivery`` for flight-period lines only (200)."""
    from datetime import date


    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        lid = admin.post("/v1/campaigns", json=_guaranteed_body(adv)).json()["id"]
        _deliver(rt, lid, 3)
        r = admin.patch(f"/v1/campaigns/{lid}", json={
            "goal": {"metric": "clicks", "total": 5}, "bid_type": "CPC",
            "bid_micros": 1_000, "objective": "clicks", "version": 1})
        assert r.status_code == 422, r.text
        assert "goal.metric" in {f["field"] for f in r.json()["fields"]}
        auction = admin.post("/v1/campaigns", json=_body(adv)).json()["id"]  # a day budget
        deliver(rt.ledger, auction, day=date(2026, 11, 4))
        r = admin.patch(f"/v1/campaigns/{auction}", json={"flight_end": "2026-11-03",
                                                          "version": 1})
        assert r.status_code == 422 and r.json()["fields"][0]["field"] == "flight_end", r.text


def test_a_goal_lowered_to_what_the_line_delivered_completes_it(rt: Runtime) -> None:
    """A goal may be lowered to what the line delivered (144 here), not below; left
    active, the line kept its slots ahead of the auction, each one over-delivery billed
    nothing, until billing completed it (a tester got 2 free impressions at once). The
    PATCH completes it. A paused line whose goal is met is not resumed either (409).
    Mutations seen red: ``completes_a_met_goal`` doing nothing (``active``); the resume
    rule for completed lines only (200 for the paused one)."""
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        lid = admin.post("/v1/campaigns", json=_guaranteed_body(adv)).json()["id"]
        _deliver(rt, lid, 144)
        r = admin.patch(f"/v1/campaigns/{lid}", json={
            "goal": {"metric": "impressions", "total": 144}, "version": 1})
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
        paused = admin.post("/v1/campaigns", json=_guaranteed_body(adv)).json()["id"]
        _deliver(rt, paused, 10)
        r = admin.post(f"/v1/campaigns/{paused}:pause", json={"version": 1})
        assert r.status_code == 200, r.text
        r = admin.patch(f"/v1/campaigns/{paused}", json={
            "goal": {"metric": "impressions", "total": 10}, "version": 2})
        assert r.status_code == 200 and r.json()["status"] == "paused", r.text
        r = admin.post(f"/v1/campaigns/{paused}:resume", json={"version": 3})
        assert r.status_code == 409, r.text
        assert r.json()["fields"][0]["field"] == "status"


def test_a_completed_line_whose_goal_is_met_is_not_resumed(rt: Runtime) -> None:
    """Billing marks a guaranteed line ``completed`` when its goal is met, even with money
    left (its contract rate was raised mid-flight). A resume made it active again, and
    every impression it then took ahead of the auction was over-delivery, billed
    nothing: an advertiser resuming it over and over got free impressions (3 resumes, 3
    free impressions, in the embedded app). Such a resume is 409 naming ``status``, for
    the advertiser and the admin alike; once the goal is raised it resumes. Mutation
    seen red: the check in ``set_status`` removed (200, ``active``), and the same check
    left out of PATCH."""

    from adfunnel.campaigns.model import CampaignStatus

    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        own = {"Authorization": f"Bearer {rt.keys.issue('advertiser', adv).key}"}
        body = _guaranteed_body(adv)
        lid = admin.post("/v1/campaigns", json=body).json()["id"]
        _deliver(rt, lid, 500)
        rt.store.update_campaign(lid, {"status": CampaignStatus.COMPLETED})  # as billing does
        for who in (own, ADMIN_HEADERS):
            r = admin.post(f"/v1/campaigns/{lid}:resume", headers=who)
            assert r.status_code == 409 and r.json()["fields"][0]["field"] == "status", r.text
        r = admin.patch(f"/v1/campaigns/{lid}", json={"status": "active"})  # the admin's other way
        assert r.status_code == 409 and r.json()["fields"][0]["field"] == "status", r.text
        assert rt.store.get_campaign(lid).status is CampaignStatus.COMPLETED
        r = admin.patch(f"/v1/campaigns/{lid}", json={
            "goal": {"metric": "impressions", "total": 600}})
        assert r.status_code == 200, r.text
        r = admin.post(f"/v1/campaigns/{lid}:resume", headers=own)
        assert r.status_code == 200 and r.json()["status"] == "active", r.text


def test_a_met_goal_re_sent_with_status_active_does_not_resume_the_line(rt: Runtime) -> None:
    """The admin's PATCH ``{status: active}`` on a completed line whose goal is met is
    refused; the same PATCH carrying the goal unchanged (500 of 500 delivered, which the
    goal check allows: it is not below what was delivered) skipped the check and made
    the line active again, every impression then over-delivery billed nothing. A goal
    raised in the same PATCH still resumes it."""

    from adfunnel.campaigns.model import CampaignStatus

    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        body = _guaranteed_body(adv)
        lid = admin.post("/v1/campaigns", json=body).json()["id"]
        _deliver(rt, lid, 500)
        rt.store.update_campaign(lid, {"status": CampaignStatus.COMPLETED})  # as billing does
        r = admin.patch(f"/v1/campaigns/{lid}", json={
            "status": "active", "goal": {"metric": "impressions", "total": 500}})
        assert r.status_code == 409 and r.json()["fields"][0]["field"] == "status", r.text
        assert rt.store.get_campaign(lid).status is CampaignStatus.COMPLETED
        r = admin.patch(f"/v1/campaigns/{lid}", json={
            "status": "active", "goal": {"metric": "impressions", "total": 600}})
        assert r.status_code == 200 and r.json()["status"] == "active", r.text


def test_a_contract_rate_is_not_lowered_below_what_the_goal_still_pays_for(
        rt: Runtime) -> None:
    """A guaranteed line (500 impressions at a 2 CPM: its goal's money is ¥1) billed 144
    at 2 CPM (288,000 micros). At 1 CPM its money would be 500,000: 212,000 left for
    the 356 impressions still owed, which cost 356,000, so it would stop short of the
    goal it was sold; a larger goal does not help (its money grows with it at the new
    rate). A raise, or a lowered rate on a line that billed nothing, is fine. Mutation
    seen red: the rule removed (200 for 1 CPM)."""
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as admin:
        adv = admin.post("/v1/advertisers", json={"name": "A"}).json()["id"]
        fresh = admin.post("/v1/campaigns", json=_guaranteed_body(adv)).json()["id"]
        r = admin.patch(f"/v1/campaigns/{fresh}", json={"bid_micros": 1_000_000,
                                                         "version": 1})
        assert r.status_code == 200, r.text  # nothing billed yet: any rate
        lid = admin.post("/v1/campaigns", json=_guaranteed_body(adv)).json()["id"]
        _deliver(rt, lid, 144)
        for change in ({"bid_micros": 1_000_000},
                       {"bid_micros": 1_000_000,
                        "goal": {"metric": "impressions", "total": 5_000}}):
            r = admin.patch(f"/v1/campaigns/{lid}", json={**change, "version": 1})
            assert r.status_code == 422, r.text
            (problem,) = r.json()["fields"]
            assert problem["field"] == "bid_micros" and "288000" in problem["problem"]
        r = admin.patch(f"/v1/campaigns/{lid}", json={"bid_micros": 2_500_000, "version": 1})
        assert r.status_code == 200, r.text
        left = rt.store.get_campaign(lid)
        assert left.bid_micros == 2_500_000
