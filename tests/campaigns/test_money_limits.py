"""A bid or budget above the server's limits (settings ``max_bid_micros``,
``max_budget_micros``) is refused with 422 naming the field, on create and on every
edit: a bid of 2**63 - 1 micros would bill without bound. The dashboard's forms go
through the same API and show the refusal next to the field."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import SettingsError, load_settings
from adfunnel.settings.model import DEFAULT_MAX_BID_MICROS, DEFAULT_MAX_BUDGET_MICROS
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
INT64_MAX = 2**63 - 1


def _runtime(**settings: Any) -> Runtime:
    s = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                      admin_key=ADMIN_KEY, **settings)
    return build_runtime(s, ManualClock(START), seed=1)


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = _runtime()
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(rt), headers=ADMIN_HEADERS, follow_redirects=False) as c:
        yield c


def _body(client: TestClient, **overrides: Any) -> dict[str, Any]:
    adv = client.post("/v1/advertisers", json={"name": "acme"}).json()
    return {"advertiser_id": adv["id"], "name": "c", "objective": "clicks", "bid_type": "CPC",
            "bid_micros": 400_000, "daily_budget_micros": 10_000_000, "time_zone": "UTC",
            "flight_start": "2026-07-01", **overrides}


def _fields(r: Any) -> set[str]:
    assert r.status_code == 422, r.text
    return {f["field"] for f in r.json()["fields"]}


@pytest.mark.slow
@pytest.mark.parametrize(("field", "limit"), [
    ("bid_micros", DEFAULT_MAX_BID_MICROS), ("daily_budget_micros", DEFAULT_MAX_BUDGET_MICROS),
    ("lifetime_budget_micros", DEFAULT_MAX_BUDGET_MICROS)])
def test_create_refuses_values_above_the_limit(client: TestClient, field: str,
                                               limit: int) -> None:
    for value in (limit + 1, INT64_MAX):
        assert _fields(client.post("/v1/campaigns", json=_body(client, **{field: value}))) == {
            field}
    r = client.post("/v1/campaigns", json=_body(client, **{field: limit}))
    assert r.status_code == 201, r.text  # the limit itself is allowed


def test_every_edit_refuses_values_above_the_limit(rt: Runtime, client: TestClient) -> None:
    made = client.post("/v1/campaigns", json=_body(client)).json()
    url = f"/v1/campaigns/{made['id']}"
    for change in ({"bid_micros": INT64_MAX}, {"daily_budget_micros": INT64_MAX},
                   {"lifetime_budget_micros": DEFAULT_MAX_BUDGET_MICROS + 1}):
        assert _fields(client.patch(url, json=change)) == set(change)
    r = client.put(url + "/budget", json={"daily_budget_micros": INT64_MAX,
                                          "lifetime_budget_micros": INT64_MAX})
    assert _fields(r) == {"daily_budget_micros", "lifetime_budget_micros"}
    kept = rt.store.get_campaign(made["id"])
    assert (kept.bid_micros, kept.daily_budget_micros, kept.version) == (400_000, 10_000_000, 1)


@pytest.mark.slow
def test_the_limits_are_settings() -> None:
    runtime = _runtime(max_bid_micros=1_000_000, max_budget_micros=50_000_000)
    try:
        with TestClient(build_app(runtime), headers=ADMIN_HEADERS) as c:
            assert _fields(c.post("/v1/campaigns", json=_body(c, bid_micros=1_000_001))) == {
                "bid_micros"}
            assert c.post("/v1/campaigns", json=_body(c, bid_micros=1_000_000)).status_code == 201
            r = c.post("/v1/campaigns", json=_body(c, daily_budget_micros=50_000_001))
            assert _fields(r) == {"daily_budget_micros"}
    finally:
        runtime.close()
    with pytest.raises(SettingsError) as refused:
        load_settings(max_bid_micros=0, max_budget_micros=-1)
    assert {p.split(":")[0] for p in refused.value.problems} == {"max_bid_micros",
                                                               "max_budget_micros"}


def test_dashboard_forms_show_the_limit_next_to_the_field(rt: Runtime,
                                                          client: TestClient) -> None:
    adv = rt.store.create_advertiser("Alpha")
    key = rt.keys.issue("advertiser", adv.id).key
    client.headers.pop("authorization")
    assert client.post("/ui/login", data={"api_key": key}).status_code == 303
    form = {"name": "big", "objective": "clicks", "bid_type": "CPC", "bid": "1000.01",
            "daily_budget": "5", "time_zone": "UTC", "flight_start": "2026-07-15",
            "pacing_mode": "even", "targeting": ""}
    r = client.post("/ui/campaigns", data=form)
    assert r.status_code == 422 and 'data-field="bid_micros"' in r.text, r.text
    r = client.post("/ui/campaigns", data={**form, "bid": "1"})
    assert r.status_code == 303, r.text
    cid = int(r.headers["location"].rsplit("/", 1)[1])
    r = client.post(f"/ui/campaigns/{cid}/budget",
                    data={"daily_budget": "10000000.000001", "lifetime_budget": "",
                          "version": "1"}, headers={"HX-Request": "true"})
    assert 'data-field="daily_budget_micros"' in r.text and "max_budget_micros" in r.text
    assert rt.store.get_campaign(cid).daily_budget_micros == 5_000_000
