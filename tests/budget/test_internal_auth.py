"""Who may call the budget service: only holders of the deployment's internal token
(``ADFUNNEL_INTERNAL_TOKEN``, adfunnel.internal_auth), with bodies limited before they
are parsed; the ad server's client and the dashboard's reads send the token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, date, datetime

import httpx
import pytest
from fastapi.testclient import TestClient

from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.budget.client import BudgetClient
from adfunnel.budget.http import HttpReportTransport
from adfunnel.budget.metrics import CAMPAIGNS
from adfunnel.budget.process import BudgetServiceProcess
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.model import BidType, Objective
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock
from adfunnel.db import make_engine
from adfunnel.internal_auth import InternalAuth
from adfunnel.settings import SettingsError, load_settings
from adfunnel.ui.budget_reads import RemoteBudgetReads
from tests.http_server import serving
from tests.internal_token import INTERNAL_HEADERS, INTERNAL_TOKEN

NOW = datetime(2026, 7, 15, 9, 30, tzinfo=UTC)
LIMIT = 4_096  # the test app's body limit, bytes
#: Every route of a shard that needs the token: (method, path, body).
ROUTES = [("POST", "/v1/report", b'{"server_id":"s","shard":0,"sent_at":0}'),
          ("POST", "/v1/billed", b"[]"), ("POST", "/v1/step", b""),
          ("GET", "/v1/status", None), ("GET", "/v1/days?campaign_ids=1", None),
          ("GET", "/v1/days/1", None), ("GET", "/metrics", None)]


@pytest.fixture
def proc(tmp_path) -> Iterator[BudgetServiceProcess]:
    engine = make_engine(f"sqlite:///{tmp_path / 'a.sqlite3'}")
    upgrade(engine)
    clock = ManualClock(NOW)
    store = SqlCampaignStore(engine, clock)
    adv = store.create_advertiser("a")
    store.create_campaign(advertiser_id=adv.id, name="c", objective=Objective.CLICKS,
                          bid_type=BidType.CPC, bid_micros=500_000,
                          daily_budget_micros=10_000_000, time_zone="UTC",
                          flight_start=date(2026, 7, 1))
    p = BudgetServiceProcess(store, SqlLedger(engine), clock, engine=engine,
                             expected_servers={"s"})
    p.load()
    yield p
    CAMPAIGNS.follow(None)
    engine.dispose()


@pytest.fixture
def http(proc: BudgetServiceProcess) -> Iterator[TestClient]:
    with TestClient(proc.app(INTERNAL_TOKEN, max_body_bytes=LIMIT)) as c:
        yield c


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_no_token_is_401_and_another_is_403(http: TestClient, method: str, path: str,
                                            body: bytes | None) -> None:
    none = http.request(method, path, content=body)
    assert none.status_code == 401, none.text
    assert none.headers["www-authenticate"] == "Bearer"
    assert none.json()["fields"][0]["field"] == "authorization"
    for wrong in (INTERNAL_TOKEN[:-1] + "x", INTERNAL_TOKEN + "x", "short"):
        r = http.request(method, path, content=body,
                         headers={"authorization": f"Bearer {wrong}"})
        assert r.status_code == 403, (wrong, r.text)
        assert r.json() == {"error": "forbidden", "fields": [
            {"field": "authorization", "problem": "not this deployment's internal token"}]}
    basic = http.request(method, path, content=body,
                         headers={"authorization": f"Basic {INTERNAL_TOKEN}"})
    assert basic.status_code == 401
    ok = http.request(method, path, content=body, headers=INTERNAL_HEADERS)
    assert ok.status_code not in (401, 403), ok.text


def test_the_probe_stays_open(http: TestClient) -> None:
    assert http.get("/healthz").json()["ok"] is True


@pytest.mark.parametrize("path", ["/v1/report", "/v1/billed"])
def test_an_oversized_body_is_413_json(http: TestClient, path: str) -> None:
    big = b"[" + b"0," * LIMIT + b"0]"
    r = http.post(path, content=big, headers=INTERNAL_HEADERS)
    assert r.status_code == 413
    assert r.json()["error"] == "too_large" and r.json()["fields"][0]["field"] == "body"

    def chunks() -> Iterator[bytes]:  # no content-length: counted as it arrives
        for i in range(0, len(big), 1_000):
            yield big[i:i + 1_000]

    r = http.post(path, content=chunks(), headers=INTERNAL_HEADERS)
    assert r.status_code == 413 and r.json()["error"] == "too_large"
    # a stranger's body is refused for the token, before it is read
    assert http.post(path, content=big).status_code == 401


def test_the_middleware_refuses_a_short_token() -> None:
    with pytest.raises(ValueError, match="32"):
        InternalAuth(lambda *a: None, "short")


def test_the_ad_servers_transport_sends_the_token(proc: BudgetServiceProcess) -> None:
    with serving(proc.app(INTERNAL_TOKEN)) as base:
        for token, failures in ((INTERNAL_TOKEN, 0), ("y" * 32, 1)):
            transport = HttpReportTransport([base], token=token, timeout_s=2.0)
            BudgetClient("s", proc.clock, transport).report()
            assert transport.failures == failures, token
            transport.close()


def test_the_dashboards_reads_send_the_token(proc: BudgetServiceProcess) -> None:
    async def read(token: str) -> dict:
        app = proc.app(INTERNAL_TOKEN)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                   base_url="http://shard0")
        remote = RemoteBudgetReads([], token=token, clients=[client])
        try:
            return await remote.days([1])
        finally:
            await remote.aclose()

    assert sorted(asyncio.run(read(INTERNAL_TOKEN))) == [1]
    assert asyncio.run(read("z" * 32)) == {}  # refused: no budget facts


def test_a_budget_service_url_needs_the_token_with_every_other_problem() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(budget_service_url="http://127.0.0.1:8090", port=-1)
    assert [p.split(":")[0] for p in err.value.problems] == ["internal_token", "port"]
    with pytest.raises(SettingsError, match="internal_token"):
        load_settings(required=("internal_token",))
    with pytest.raises(SettingsError, match="at least 32"):
        load_settings(budget_service_url="http://b:8090", internal_token="s" * 31)
    given = load_settings(budget_service_url="http://b:8090", internal_token=INTERNAL_TOKEN)
    assert INTERNAL_TOKEN not in repr(given)
    assert load_settings().internal_token is None  # the embedded default needs none
