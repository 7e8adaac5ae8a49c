"""``POST /v1/forecasts`` over the embedded app: who may ask, the 422s naming the field,
and the warning on a guaranteed campaign booked above what the forecast leaves.

Mutations seen red: the route open to every role — no ``require_role`` on its router
and ``/v1/forecasts`` among ``SHARED_AREAS`` of :mod:`adfunnel.auth.http` (either alone
stays green: the middleware and the route each refuse): ``test_only_the_admin_may_forecast``;
the warning's comparison turned (``total < available``):
``test_a_goal_above_availability_is_booked_with_a_warning``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

T0 = datetime(2026, 11, 2, tzinfo=UTC)
PER_HOUR = 50  # US requests sent in the one hour of history


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    runtime = build_runtime(settings, ManualClock(T0), seed=1)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as c:
        assert c.post("/v1/placements", json={"id": "feed", "name": "Feed"}).status_code == 201
        for i in range(PER_HOUR):
            r = c.post("/v1/ads:select", json={
                "user": {"key": f"u{i}", "attributes": {"geo.country": "US"}},
                "placement": {"id": "feed"},
                "slots": [{"id": "s", "position": 1, "width": 300, "height": 250}]})
            assert r.status_code in (200, 204)
        r = c.put("/v1/admin/clock", json={"now": (T0 + timedelta(hours=1)).isoformat()})
        assert r.status_code == 200
        yield c


BODY: dict[str, Any] = {"targeting": {"attr": "geo.country", "in": ["US"]},
                        "placements": ["feed"], "flight_start": "2026-11-03",
                        "flight_end": "2026-11-03", "time_zone": "UTC"}


def _fields(r: Any) -> list[str]:
    assert r.status_code == 422, r.text
    return [f["field"] for f in r.json()["fields"]]


def test_only_the_admin_may_forecast(rt: Runtime, client: TestClient) -> None:
    adv = rt.store.create_advertiser("A")
    key = rt.keys.issue("advertiser", adv.id).key
    r = client.post("/v1/forecasts", json=BODY, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 403 and r.json()["fields"][0]["field"] == "authorization"
    assert client.post("/v1/forecasts", json=BODY, headers={"Authorization": ""}
                       ).status_code == 401


def test_a_forecast_answers_its_basis(client: TestClient) -> None:
    r = client.post("/v1/forecasts", json={**BODY, "goal": 2_000})
    assert r.status_code == 200, r.text
    f = r.json()
    assert f["matching_impressions"] == 24 * PER_HOUR == f["available_impressions"]
    assert f["contending_lines"] == [] and f["goal_fits"] is False
    assert f["basis"] == {"history_days": 0.042, "sampled_requests": PER_HOUR,
                          "sample_rate": 1.0, "from": "2026-11-02T00:00:00Z",
                          "to": "2026-11-02T01:00:00Z", "slots": "hour_of_day"}
    assert "hour of week" in f["limits"]
    other = client.post("/v1/forecasts", json={**BODY, "targeting": None,
                                               "placements": []}).json()
    assert other["matching_impressions"] == 24 * PER_HOUR


@pytest.mark.parametrize(("change", "field"), [
    ({"flight_end": "2026-11-01"}, "flight_end"),
    ({"flight_end": "2028-11-03"}, "flight_end"),
    ({"time_zone": "Mars/Olympus"}, "time_zone"),
    ({"flight_start": "3 Nov"}, "flight_start"),
    ({"placements": ["nowhere"]}, "placements[0]"),
    ({"targeting": {"attr": "shoe_size", "in": ["44"]}}, "targeting.attr"),
    ({"goal": 0}, "goal"),
    ({"budget": 5}, "budget"),
])
def test_problems_are_422_naming_the_field(client: TestClient, change: dict[str, Any],
                                           field: str) -> None:
    assert field in _fields(client.post("/v1/forecasts", json={**BODY, **change}))


def test_a_requested_placement_never_created_is_forecast(client: TestClient) -> None:
    """An id that only ever came in ad requests (the replay's slot ids) is forecast, as
    its placement report answers; one never seen is still 422. Mutation seen red: only
    created placements known."""
    for i in range(10):
        r = client.post("/v1/ads:select", json={
            "user": {"key": f"s{i}", "attributes": {"geo.country": "US"}},
            "placement": {"id": "slot-77"},
            "slots": [{"id": "s", "position": 1, "width": 300, "height": 250}]})
        assert r.status_code in (200, 204)
    client.put("/v1/admin/clock", json={"now": "2026-11-02T02:00:00+00:00"})
    r = client.post("/v1/forecasts", json={**BODY, "placements": ["slot-77"]})
    assert r.status_code == 200, r.text
    # two hours of history, 0 and 10 requests of it: the 22 hours not seen take their
    # mean (README, Limits), 0 + 10 + 22 × 5
    assert r.json()["matching_impressions"] == 120
    assert _fields(client.post("/v1/forecasts", json={**BODY, "placements": ["slot-78"]})
                   ) == ["placements[0]"]


def _guaranteed(client: TestClient, total: int) -> dict[str, Any]:
    adv = client.post("/v1/advertisers", json={"name": f"adv {total}"}).json()
    r = client.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": f"deal {total}", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 3_000_000, "time_zone": "UTC",
        "flight_start": "2026-11-03", "flight_end": "2026-11-03",
        "priority": "guaranteed", "goal": {"metric": "impressions", "total": total},
        "targeting": {"attr": "geo.country", "in": ["US"]}})
    assert r.status_code == 201, r.text
    return r.json()


def test_a_goal_above_availability_is_booked_with_a_warning(client: TestClient) -> None:
    """1,200 US requests forecast on 3 November: a line of 1,000 fits (no warning); a
    second of 1,000 finds 200 left and is booked all the same, with the warning."""
    assert "warnings" not in _guaranteed(client, 1_000)
    over = _guaranteed(client, 1_000)
    assert over["warnings"] == [{"field": "goal.total", "code": "goal_exceeds_availability",
                                 "available_impressions": 200,
                                 "problem": "the forecast leaves 200 impressions over the "
                                            "flight"}]
    f = client.post("/v1/forecasts", json=BODY).json()
    assert f["available_impressions"] == 0
    assert sorted(ln["takes_impressions"] for ln in f["contending_lines"]) == [200, 1_000]


def test_a_goal_raised_above_availability_warns_too(client: TestClient) -> None:
    """A line booked within availability (1,000 of 1,200) and raised to 1,500 by a
    patch is changed all the same, with the warning; a patch of its name alone re-checks
    nothing. Mutation seen red: the patch never re-checking."""
    line = _guaranteed(client, 1_000)
    r = client.patch(f"/v1/campaigns/{line['id']}", json={
        "goal": {"metric": "impressions", "total": 1_500}, "version": line["version"]})
    assert r.status_code == 200, r.text
    assert [w["code"] for w in r.json()["warnings"]] == ["goal_exceeds_availability"]
    assert r.json()["warnings"][0]["available_impressions"] == 1_200
    r = client.patch(f"/v1/campaigns/{line['id']}", json={
        "name": "renamed", "version": r.json()["version"]})
    assert r.status_code == 200 and "goal_exceeds_availability" not in r.text


def test_no_history_no_warning(rt: Runtime) -> None:
    """A new server has no request history: a guaranteed line is booked without a
    warning (nothing is known, rather than "0 available")."""
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as c:
        assert "warnings" not in _guaranteed(c, 1_000)
        f = c.post("/v1/forecasts", json={**BODY, "placements": []}).json()
        assert f["matching_impressions"] == 0 and f["basis"]["sampled_requests"] == 0


def test_a_sponsorship_that_leaves_a_booked_line_short_warns(client: TestClient) -> None:
    """A guaranteed line of 1,000 booked on 1,200 forecast US requests fits; a takeover
    (share 1) of the same requests booked after it is served first and leaves it nothing.
    It was booked without a word while the forecast then gave the line 0: the deal the
    operator had sold silently became undeliverable. It is still booked (the operator
    may mean it), with a warning naming the line. A share that leaves the line enough
    warns nothing. Mutation seen red: ``Forecaster.lines_left_short`` answering []."""
    line = _guaranteed(client, 1_000)
    adv = client.post("/v1/advertisers", json={"name": "takeover"}).json()
    body = {"advertiser_id": adv["id"], "name": "takeover", "objective": "impressions",
            "bid_type": "CPM", "bid_micros": 9_000_000, "daily_budget_micros": 10**9,
            "time_zone": "UTC", "flight_start": "2026-11-03", "flight_end": "2026-11-03",
            "priority": "sponsorship", "goal": {"metric": "share", "share": 0.1},
            "targeting": {"attr": "geo.country", "in": ["US"]}}
    r = client.post("/v1/campaigns", json=body)
    assert r.status_code == 201 and "warnings" not in r.json(), r.text  # 1,080 left
    r = client.patch(f"/v1/campaigns/{r.json()['id']}", json={
        "goal": {"metric": "share", "share": 1}, "version": r.json()["version"]})
    assert r.status_code == 200, r.text
    assert r.json()["warnings"] == [{
        "field": "goal.share", "code": "leaves_booked_line_short", "available_impressions": 0,
        "problem": f"guaranteed line {line['id']} still needs 1000 impressions; the "
                   "forecast leaves it 0 once this line is served first"}]
