"""The OpenAPI document covers the whole server with the real error schema, a
schemathesis run over all of it against a real running server finds no 5xx and no
answer outside the document, and /docs and /redoc load only the server's own assets."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.auth.conftest import START
from tests.http_server import serving


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real uvicorn server over an embedded runtime (SQLite file, manual clock), with a
    campaign and an ad, so the generated ids sometimes exist."""
    db = tmp_path_factory.mktemp("openapi") / "db.sqlite3"
    settings_ = load_settings(database_url=f"sqlite:///{db}", clock="manual",
                              token_secret="k" * 32, admin_key=ADMIN_KEY)
    rt = build_runtime(settings_, ManualClock(START), seed=1)
    with serving(build_app(rt)) as url:
        with httpx.Client(base_url=url, headers=ADMIN_HEADERS) as http:
            adv = http.post("/v1/advertisers", json={"name": "a"}).json()
            c = http.post("/v1/campaigns", json={
                "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
                "bid_type": "CPM", "bid_micros": 1_000_000, "daily_budget_micros": 10**9,
                "time_zone": "UTC", "flight_start": "2026-07-01"}).json()
            http.post(f"/v1/campaigns/{c['id']}/ads", json={
                "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
                "width": 300, "height": 250})
            line = http.post("/v1/campaigns", json={  # answers carry a goal object too
                "advertiser_id": adv["id"], "name": "g", "objective": "impressions",
                "bid_type": "CPM", "bid_micros": 5_000_000, "time_zone": "UTC",
                "flight_start": "2026-07-01", "flight_end": "2026-07-28",
                "priority": "guaranteed", "goal": {"metric": "impressions", "total": 10**6}})
            assert line.status_code == 201, line.text
        yield url
    rt.close()


@pytest.fixture(scope="module")
def document(server_url: str) -> dict:
    return httpx.get(server_url + "/openapi.json").json()


@pytest.mark.slow
def test_the_document_covers_every_route(document: dict) -> None:
    paths = document["paths"]
    for path, method in [("/v1/ads:select", "post"), ("/i", "get"), ("/c", "get"),
                         ("/v", "get"), ("/v", "post"), ("/v1/decisions/{request_id}", "get"),
                         ("/v1/ledger/stats", "get"), ("/v1/admin/clock", "put"),
                         ("/metrics", "get"), ("/healthz", "get"), ("/v1/api-keys", "post"),
                         ("/v1/campaigns/{campaign_id}", "delete"),
                         ("/v1/review/ads", "get"), ("/v1/creatives", "post"),
                         ("/v1/creatives/{upload_id}", "get"),
                         ("/creatives/files/{name}", "get"), ("/tag.js", "get"),
                         ("/f", "get")]:
        assert method in paths.get(path, {}), (path, method)


def test_campaigns_document_how_they_are_sold(document: dict) -> None:
    """#25: priority, goal, budget period, flight budget and the frontloaded pacing mode
    in the campaign bodies; the daily budget is optional on create (a flight line)."""
    schemas = document["components"]["schemas"]
    sold = {"priority", "goal", "budget_period", "flight_budget_micros"}
    for name in ("CampaignIn", "CampaignPatch", "CampaignOut"):
        assert sold <= set(schemas[name]["properties"]), name
    assert "daily_budget_micros" not in schemas["CampaignIn"]["required"]
    assert set(schemas["GoalIn"]["properties"]) == {"metric", "share", "total"}
    assert schemas["Priority"]["enum"] == ["sponsorship", "guaranteed", "auction"]
    assert schemas["BudgetPeriod"]["enum"] == ["day", "flight", "average_day"]
    assert "frontloaded" in schemas["PacingMode"]["enum"]
    assert "flight_budget_micros" in schemas["BudgetIn"]["properties"]


def test_bid_strategies_and_auction_types_are_documented(document: dict) -> None:
    """#27: the strategy fields in the campaign bodies (``bid_micros`` optional on create:
    derived for automatic strategies) and the placements' ``auction_type``. Red when
    CampaignIn requires ``bid_micros`` again."""
    schemas = document["components"]["schemas"]
    terms = {"bid_strategy", "bid_cap_micros", "target_cpa_micros"}
    for name in ("CampaignIn", "CampaignPatch", "CampaignOut"):
        assert terms <= set(schemas[name]["properties"]), name
    assert "bid_strategy_since" in schemas["CampaignOut"]["properties"]
    assert "bid_micros" not in schemas["CampaignIn"]["required"]
    assert schemas["BidStrategy"]["enum"] == [
        "manual", "max_clicks", "max_conversions", "target_cpa"]
    for name in ("PlacementIn", "PlacementPatch", "PlacementOut"):
        assert "auction_type" in schemas[name]["properties"], name
    assert schemas["AuctionType"]["enum"] == ["second_price", "first_price"]


def test_forecasts_are_documented(document: dict) -> None:
    """#26: ``POST /v1/forecasts`` with its body and answer (``from`` by its name), the
    admin's (401/403 declared), and the campaign write's warning fields."""
    op = document["paths"]["/v1/forecasts"]["post"]
    assert {"401", "403", "422"} <= set(op["responses"])
    schemas = document["components"]["schemas"]
    assert set(schemas["ForecastIn"]["properties"]) == {
        "targeting", "placements", "flight_start", "flight_end", "time_zone", "goal"}
    assert {"matching_impressions", "available_impressions", "contending_lines", "basis",
            "goal_fits", "limits"} <= set(schemas["ForecastOut"]["properties"])
    assert {"history_days", "sampled_requests", "sample_rate", "from", "to"} <= set(
        schemas["BasisOut"]["properties"])
    assert {"code", "available_impressions"} <= set(schemas["FieldProblemOut"]["properties"])


def test_the_report_documents_its_period_and_todays_plan(document: dict) -> None:
    """The campaign report's ``period`` is declared, with the budget service's ``today``
    (day, allotment, plan, spend, the recent days' plan) and a guaranteed line's
    ``progress`` against its plan (#26)."""
    schemas = document["components"]["schemas"]
    period = schemas["ReportOut"]["properties"]["period"]
    assert {"$ref": "#/components/schemas/PeriodOut"} in period["anyOf"]
    assert {"budget_period", "from", "to", "goal_shortfall", "today", "progress"} <= set(
        schemas["PeriodOut"]["properties"])
    assert set(schemas["PeriodTodayOut"]["properties"]) == {
        "day", "allotment_micros", "planned_micros", "spent_micros", "planned_days"}
    assert set(schemas["PeriodProgressOut"]["properties"]) == {
        "metric", "delivered", "planned_to_date", "plan_total", "goal", "projected_final",
        "pace", "recent_ratio", "state"}


def test_errors_use_the_real_error_schema(document: dict) -> None:
    text = json.dumps(document)
    assert "HTTPValidationError" not in text and '"ValidationError"' not in text
    error = document["components"]["schemas"]["ErrorOut"]
    assert set(error["required"]) == {"error", "fields"}
    for path, item in document["paths"].items():
        for method, op in item.items():
            for code, answer in op["responses"].items():
                if code.startswith("4"):
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (path, code)
            protected = op["security"] != []
            assert protected == ("401" in op["responses"]), (path, method)


def test_docs_pages_load_only_local_assets(server_url: str) -> None:
    for page in ("/docs", "/redoc"):
        r = httpx.get(server_url + page)
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        refs = re.findall(r"""(?:src|href)\s*[=:]\s*["']([^"']+)["']""", r.text)
        urls = re.findall(r"""["'](https?://[^"']+)["']""", r.text)
        assert urls == [], (page, urls)
        assets = [u for u in refs if u.startswith("/static/")]
        assert assets, page
        for asset in assets:
            got = httpx.get(server_url + asset)
            assert got.status_code == 200 and len(got.content) > 500, asset


@pytest.fixture(scope="module")
def api_schema(server_url: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(server_url + "/openapi.json")


#: Generated cases per operation: the whole run stays under a minute on two cores.
EXAMPLES = 8


@pytest.mark.slow
def test_the_running_server_keeps_to_its_document(api_schema: schemathesis.BaseSchema) -> None:
    """Every operation, as the admin: no 5xx, no undocumented status, content type or
    body. (Driven through hypothesis directly: schemathesis' pytest plugin does not
    collect under this pytest.)"""
    failures: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) > 40
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=ADMIN_HEADERS, timeout=10, checks=[
                not_a_server_error, status_code_conformance, content_type_conformance,
                response_schema_conformance])

        try:
            run()
        except Exception as exc:  # every operation runs; the failures are listed at the end
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert failures == [], "\n\n".join(failures)
