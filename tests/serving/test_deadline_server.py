"""A real HTTP server (uvicorn, httptools, uvloop) under a burst of 300 concurrent ad
requests with a 100 ms deadline, each decision made 3 ms slow (900 ms of work for the
burst, so some requests must wait past their deadline whatever the machine): every
answer is 200 or 204, never 5xx, requests are shed, and the spend committed equals what
the 200 answers placed — nothing for shed or late requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from adfunnel.budget.gate import LocalSpendGate
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime
from tests.api_keys import ADMIN_HEADERS
from tests.http_server import serving
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign
from tests.serving.slow_gate import SlowGate

BURST = 300


@pytest.fixture
def budget_mode() -> str:
    return "local"


@pytest.fixture
def server_url(runtime: Runtime) -> Iterator[str]:
    with serving(build_app(runtime), backlog=2048) as url:
        yield url


async def _burst(url: str) -> list[tuple[str, int]]:
    limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0) as http:
        async def one(i: int) -> tuple[str, int]:
            body = ad_request(request_id=f"b{i}", deadline_ms=100,
                              placement={"id": "feed", "reserve_cpm_micros": 1_000_000})
            return f"b{i}", (await http.post("/v1/ads:select", json=body)).status_code

        return list(await asyncio.gather(*(one(i) for i in range(BURST))))


@pytest.mark.slow
def test_burst_commits_exactly_what_was_answered(
        client: TestClient, runtime: Runtime, server_url: str) -> None:
    campaigns = [make_campaign(client, bid_micros=2_000_000 + k)["campaign"]["id"]
                 for k in range(3)]
    gate = runtime.gate
    assert isinstance(gate, LocalSpendGate)
    runtime.decider.gate = SlowGate(gate, every_s=0.003)  # type: ignore[assignment]
    answers = asyncio.run(_burst(server_url))
    statuses = [s for _, s in answers]
    assert set(statuses) <= {200, 204}, statuses
    sent = [rid for rid, s in answers if s == 200]
    placed = 0
    with httpx.Client(base_url=server_url, headers=ADMIN_HEADERS) as http:
        for rid in sent:
            placed += sum(p["charge_micros"] for p in http.get(f"/v1/decisions/{rid}").json()
                          ["placed"])
        stats = http.get("/v1/serving/stats").json()
    committed = sum(gate.committed(cid, START.date()) for cid in campaigns)
    assert committed == placed
    # every request is accounted for exactly once: committed, late or shed
    assert stats["decisions"] == BURST
    assert stats["shed"] > 0  # queued past the deadline (counted from arrival): not decided
    assert stats["decisions"] - stats["late"] - stats["shed"] >= len(sent)
    assert statuses.count(204) == BURST - len(sent)
