"""JSON nested too deep for a recursive decoder: refused as a field problem (4xx naming
the member), never a 500, by every decoder of outside input — the select route, the
API's bodies (FastAPI's and the routes that decode their own), list cursors, the
dashboard's JSON editors and the budget service's routes."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import TestClient as StarletteClient

from adfunnel.budget.http import create_app
from adfunnel.budget.service import BudgetService
from adfunnel.clock import ManualClock
from adfunnel.json_depth import MAX_JSON_DEPTH, nesting_problem
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.internal_token import INTERNAL_HEADERS, INTERNAL_TOKEN

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
#: arrays nested 1,000 deep: past Python's recursion limit, and msgspec's
DEEP = "[" * 1000 + "]" * 1000
JSON = {"content-type": "application/json"}


def deep_at(document: Any) -> str:
    """``document`` as JSON text with :data:`DEEP` in place of each string ``"DEEP"``."""
    return json.dumps(document).replace('"DEEP"', DEEP)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _nested(rng: random.Random, levels: int) -> Any:
    """A random document up to ``levels`` deep whose strings hold brackets, quotes and
    backslashes (which must not count)."""
    if levels == 0 or rng.random() < 0.15:
        return rng.choice([1, None, "a[{", 'x"]}\\', "\\", "}}]]"])
    if rng.random() < 0.5:
        return [_nested(rng, levels - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "[", '"{', "\\"]): _nested(rng, levels - 1)
            for _ in range(rng.randint(0, 3))}


def test_depth_agrees_with_the_decoded_document() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        doc = _nested(rng, 10)
        text = json.dumps(doc)
        for bound in (2, 4, 6):
            assert (nesting_problem(text, bound) is not None) == (_depth(doc) > bound), text


def test_the_field_is_the_member_holding_the_excess() -> None:
    body = deep_at({"user": {"key": "u", "attributes": {"interests": "DEEP"}}})
    assert nesting_problem(body) == ("user.attributes.interests",
                                     f"nested deeper than {MAX_JSON_DEPTH} levels")
    assert nesting_problem(DEEP) == ("body", f"nested deeper than {MAX_JSON_DEPTH} levels")
    # brackets inside strings (escaped quotes too) are text, not nesting
    assert nesting_problem(json.dumps({"a": "[" * 500, 'b"': ["]" * 9, "\\"]})) is None
    escaped = deep_at({"a": 1, 'x"y': {"z": "DEEP"}})
    assert nesting_problem(escaped, prefix="form")[0] == "form.xy.z"
    exactly = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert nesting_problem(exactly) is None
    assert nesting_problem("[" + exactly + "]") is not None


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    runtime = build_runtime(settings, ManualClock(START), seed=1)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    # a 500 comes back as a response (not raised) so the assertion names the route
    with TestClient(build_app(rt), headers=ADMIN_HEADERS, follow_redirects=False,
                    raise_server_exceptions=False) as c:
        yield c


def _field(r: Any) -> str:
    assert r.status_code == 422, (r.status_code, r.text)
    fields = r.json()["fields"]
    assert "nested deeper than" in fields[0]["problem"], fields
    return str(fields[0]["field"])


SELECT = deep_at({"user": {"key": "u", "attributes": {"interests": "DEEP"}},
                  "placement": {"id": "p"},
                  "slots": [{"id": "s", "position": 1, "width": 300, "height": 250}]})


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/v1/ads:select", SELECT, "user.attributes.interests"),
        ("POST", "/v1/advertisers", deep_at({"name": "DEEP"}), "name"),
        ("POST", "/v1/campaigns", deep_at({"targeting": "DEEP"}), "targeting"),
        ("POST", "/v1/campaigns", '{{"targeting": {}1{}}}'.format('{"not": ' * 600, "}" * 600),
         "targeting.not.not.not.not.not.not.not"),
        ("PUT", "/v1/admin/clock", deep_at({"now": "DEEP"}), "now"),
        ("POST", "/v1/placements", deep_at({"id": "DEEP"}), "id"),
        ("POST", "/v1/api-keys", deep_at({"role": "DEEP"}), "role"),
    ],
)
def test_api_bodies_name_the_member(client: TestClient, method: str, path: str, body: str,
                                    field: str) -> None:
    r = client.request(method, path, content=body, headers=JSON)
    assert _field(r) == field
    # without a content type the same (FastAPI and the clock route decode it as JSON)
    r = client.request(method, path, content=body, headers={"content-type": "text/plain"})
    assert _field(r) == field


@pytest.mark.parametrize("path", ["/v1/placements", "/v1/campaigns", "/v1/advertisers"])
def test_a_deep_cursor_is_not_a_cursor(client: TestClient, path: str) -> None:
    cursor = base64.urlsafe_b64encode(DEEP.encode()).decode().rstrip("=")
    r = client.get(path, params={"cursor": cursor})
    assert r.status_code == 422, r.text
    assert r.json()["fields"][0]["field"] == "cursor"


def test_dashboard_json_editor_names_the_field(rt: Runtime, client: TestClient) -> None:
    a = rt.store.create_advertiser("Alpha")
    c = rt.store.create_campaign(advertiser_id=a.id, name="c", objective="clicks",
                                 bid_type="CPM", bid_micros=2_000_000,
                                 daily_budget_micros=10_000_000, time_zone="UTC",
                                 flight_start=START.date())
    key = rt.keys.issue("advertiser", a.id).key
    assert client.post("/ui/login", data={"api_key": key}).status_code == 303
    r = client.post(f"/ui/campaigns/{c.id}/targeting", data={"targeting": DEEP, "version": "1"},
                    headers={"HX-Request": "true"})
    assert r.status_code == 200, r.text
    assert 'data-field="targeting"' in r.text and "nested deeper than" in r.text


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/report", deep_at({"shard": 0, "unknown": "DEEP"})),
    ("/v1/billed", deep_at([{"unknown": "DEEP"}])),
])
def test_budget_service_routes_refuse_deep_bodies(path: str, body: str) -> None:
    app = create_app(BudgetService(ManualClock(START), warmup_s=0.0), token=INTERNAL_TOKEN)
    with StarletteClient(app, raise_server_exceptions=False) as c:
        r = c.post(path, content=body, headers={**JSON, **INTERNAL_HEADERS})
    assert r.status_code == 422, r.text
    # the shard's body limit refuses it first, in the ad server's shape
    assert r.json()["error"] == "validation"
    [problem] = r.json()["fields"]
    assert "unknown" in problem["field"] and "nested deeper than" in problem["problem"]
