"""§6: a request's deadline runs from its arrival, late work commits nothing, and work
that cannot start in time is shed (fast 204, counted)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from adfunnel.budget.gate import LocalSpendGate
from adfunnel.clock import monotonic_ms
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime
from adfunnel.serving.deadline import SHED_EXPIRED, SHED_QUEUE, DecisionQueue
from adfunnel.serving.request import decode_request
from tests.api_keys import ADMIN_HEADERS
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign
from tests.serving.slow_gate import SlowGate


@pytest.fixture
def budget_mode() -> str:
    return "local"  # committed spend is readable: LocalSpendGate.committed


def _committed(rt: Runtime, campaign_id: int) -> int:
    assert isinstance(rt.gate, LocalSpendGate)
    return rt.gate.committed(campaign_id, START.date())


def _charges(client: TestClient, request_ids: list[str]) -> int:
    """Σ charge of what the given (sent, 200) answers placed, from their explain records."""
    total = 0
    for rid in request_ids:
        record = client.get(f"/v1/decisions/{rid}").json()
        total += sum(p["charge_micros"] for p in record["placed"])
    return total


@pytest.mark.slow
def test_decide_records_nothing_commit_records_expected_spend(
        client: TestClient, runtime: Runtime) -> None:
    cid = make_campaign(client, bid_micros=3_000_000)["campaign"]["id"]
    req = decode_request(json.dumps(ad_request(
        placement={"id": "feed", "reserve_cpm_micros": 2_000_000})).encode())
    d = runtime.decider.decide(req, "r", monotonic_ms() + 1_000)
    assert len(d.placed) == 1 and _committed(runtime, cid) == 0
    runtime.decider.commit(d)
    assert _committed(runtime, cid) == d.placed[0].served.expected_micros > 0


def test_decision_found_late_commits_nothing(client: TestClient, runtime: Runtime) -> None:
    cid = make_campaign(client)["campaign"]["id"]
    body = ad_request(placement={"id": "feed", "reserve_cpm_micros": 1_000_000})
    runtime.decider.gate = SlowGate(runtime.gate, [0.08])  # type: ignore[assignment]
    r = client.post("/v1/ads:select", json={**body, "deadline_ms": 20, "request_id": "late"})
    assert r.status_code == 204
    assert _committed(runtime, cid) == 0  # the winner was priced, nothing was recorded
    assert client.get("/v1/decisions/late").status_code == 404  # not in the decision log
    assert (runtime.decisions.late, runtime.decisions.shed) == (1, 0)
    # the same request in time commits its charge
    r = client.post("/v1/ads:select", json={**body, "request_id": "ok"})
    assert r.status_code == 200
    assert _committed(runtime, cid) == _charges(client, ["ok"]) == 1_000


async def _burst(runtime: Runtime, slow: dict[str, Any], quick: list[dict[str, Any]]
                 ) -> tuple[httpx.Response, list[httpx.Response], str]:
    app = build_app(runtime)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t",
                                 headers=ADMIN_HEADERS) as http:
        first = asyncio.ensure_future(http.post("/v1/ads:select", json=slow))
        rest = [asyncio.ensure_future(http.post("/v1/ads:select", json=b)) for b in quick]
        answers = await asyncio.gather(first, *rest)
        metrics = (await http.get("/metrics")).text
    return answers[0], list(answers[1:]), metrics


@pytest.mark.slow
def test_requests_queued_behind_a_slow_decision_are_shed(
        client: TestClient, runtime: Runtime) -> None:
    """They arrived in time but waited past their deadline: the deadline counts queueing.
    (Measured from the handler's start, each would have been decided in time.)"""
    cid = make_campaign(client)["campaign"]["id"]
    body = ad_request(placement={"id": "feed", "reserve_cpm_micros": 1_000_000})
    runtime.decider.gate = SlowGate(runtime.gate, [0.3])  # type: ignore[assignment]
    slow = {**body, "deadline_ms": 2_000, "request_id": "slow"}
    quick = [{**body, "deadline_ms": 100, "request_id": f"q{i}"} for i in range(20)]
    first, rest, metrics = asyncio.run(_burst(runtime, slow, quick))
    assert first.status_code == 200
    assert [r.status_code for r in rest] == [204] * 20
    log = runtime.decisions
    assert (log.decisions, log.shed, log.late) == (21, 20, 0)
    assert log.miss_rate() == pytest.approx(20 / 21)
    assert _committed(runtime, cid) == _charges(client, ["slow"]) == 1_000
    assert "adfunnel_deadline_miss_rate" in metrics and "deadline_miss_rate" in metrics
    shed = [ln for ln in metrics.splitlines()
            if ln.startswith(f'adfunnel_shed_requests_total{{reason="{SHED_EXPIRED}"}}')]
    assert shed and float(shed[0].split()[-1]) >= 20


def test_queue_that_cannot_drain_in_time_sheds_on_arrival(
        client: TestClient, runtime: Runtime) -> None:
    make_campaign(client)
    queue = DecisionQueue(runtime.decider, service_ms=30.0)  # a 30 ms decision, say

    async def run() -> list[str | None]:
        deadline = monotonic_ms() + 100
        req = decode_request(json.dumps(ad_request()).encode())
        outcomes = await asyncio.gather(*(queue.decide(req, f"r{i}", deadline)
                                          for i in range(5)))
        return [o.shed for o in outcomes]

    # 1-3 fit before the deadline at 30 ms each; 4 and 5 are shed at once
    assert asyncio.run(run()) == [None, None, None, SHED_QUEUE, SHED_QUEUE]


def test_a_failing_decision_fails_alone_and_the_queue_goes_on(
        client: TestClient, runtime: Runtime) -> None:
    make_campaign(client)
    decider = runtime.decider
    calls = {"n": 0}
    real = decider.decide

    def first_one_breaks(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in one decision")
        return real(*args)

    decider.decide = first_one_breaks  # type: ignore[method-assign]
    queue = DecisionQueue(decider)

    async def run() -> list[object]:
        deadline = monotonic_ms() + 5_000
        req = decode_request(json.dumps(ad_request()).encode())
        return await asyncio.gather(*(queue.decide(req, f"r{i}", deadline) for i in range(3)),
                                    return_exceptions=True)

    first, *rest = asyncio.run(run())
    assert isinstance(first, RuntimeError)
    assert [o.shed for o in rest] == [None, None]  # type: ignore[attr-defined]
    assert all(o.decision is not None for o in rest)  # type: ignore[attr-defined]
