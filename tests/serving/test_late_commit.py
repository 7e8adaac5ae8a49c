"""§6 of issue #22: a decision that finished with winners, in time for the decider, but
is found late only by the HTTP layer (the check just before commit) commits nothing:
no spend, no decision-log record, no served-log record.

The lateness is injected deterministically after the decider returns: the queue hands
the decider a far deadline (so its own checks between stages never fire and it always
returns winners), then waits until the request's real deadline has passed before
handing the decision back. Only the HTTP layer's guard can then stop the commit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from adfunnel.budget.gate import LocalSpendGate
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.events.compactor import compact
from adfunnel.learn.query import query
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.serving.deadline import DecisionQueue, Outcome
from adfunnel.serving.request import SelectRequest
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign

#: What the decider is told: far enough that no check inside it can find the work late.
DECIDER_SLACK_MS = 60_000
#: Bound on waiting for the request's own deadline to pass (a short one, in the test).
WAIT_BOUND_MS = 5_000


class LateHandBack:
    """The real :class:`DecisionQueue`, whose decisions reach the HTTP layer only after
    the request's deadline (a slow step after the decider returns, e.g. a stalled
    event loop) while ``late`` is set; the real queue's behaviour otherwise. Records
    every decision it handed back late."""

    def __init__(self, queue: DecisionQueue) -> None:
        self.queue = queue
        self.decider = queue.decider
        self.late = True
        self.handed: list[Outcome] = []

    async def decide(self, req: SelectRequest, request_id: str, deadline_ms: float,
                     dry_run: bool = False) -> Outcome:
        if not self.late:
            return await self.queue.decide(req, request_id, deadline_ms, dry_run)
        outcome = await self.queue.decide(req, request_id, deadline_ms + DECIDER_SLACK_MS,
                                          dry_run)
        give_up = monotonic_ms() + WAIT_BOUND_MS
        while monotonic_ms() < deadline_ms:  # wait on the condition: the deadline passed
            assert monotonic_ms() < give_up, "the request's deadline never passed"
            await asyncio.sleep(0.001)
        self.handed.append(outcome)
        return outcome


@pytest.fixture
def served_dir(tmp_path: Path) -> Path:
    return tmp_path / "served"


@pytest.fixture
def runtime(served_dir: Path) -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(served_dir))
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


def _committed(rt: Runtime, campaign_id: int) -> int:
    assert isinstance(rt.gate, LocalSpendGate)
    return rt.gate.committed(campaign_id, START.date())


@pytest.mark.slow
def test_winners_found_late_at_the_http_layer_commit_nothing(
        runtime: Runtime, served_dir: Path) -> None:
    body = ad_request(placement={"id": "feed", "reserve_cpm_micros": 1_000_000})
    late_queue = LateHandBack(runtime.queue)
    runtime.queue = late_queue  # type: ignore[assignment]
    with TestClient(build_app(runtime), headers=ADMIN_HEADERS) as client:
        cid = make_campaign(client)["campaign"]["id"]
        r = client.post("/v1/ads:select", json={**body, "deadline_ms": 30, "request_id": "late"})
        [outcome] = late_queue.handed
        assert outcome.decision is not None and not outcome.decision.late
        assert len(outcome.decision.placed) == 1  # the decider found a winner ...
        assert _committed(runtime, cid) == 0  # ... and the HTTP layer committed no spend,
        assert client.get("/v1/decisions/late").status_code == 404  # no decision log,
        assert r.status_code == 204  # and answered late
        assert r.headers["x-adfunnel-outcome"] == "late"
        assert (runtime.decisions.late, runtime.decisions.shed) == (1, 0)
        # the same request in time commits its charge and its records
        late_queue.late = False
        r = client.post("/v1/ads:select", json={**body, "request_id": "ok"})
        assert r.status_code == 200
        assert _committed(runtime, cid) == 1_000
        assert client.get("/v1/decisions/ok").status_code == 200
    # leaving the client shut the server down: the served log's queue is written out
    compact(served_dir, START + timedelta(hours=2))
    rows = query(served_dir, "select request_id from served order by request_id")
    assert rows == [("ok",)]  # no served-log record of the late one


@pytest.mark.slow
def test_winners_found_late_at_the_http_layer_count_no_cap(runtime: Runtime) -> None:
    late_queue = LateHandBack(runtime.queue)
    runtime.queue = late_queue  # type: ignore[assignment]
    with TestClient(build_app(runtime), headers=ADMIN_HEADERS) as client:
        make_campaign(client, frequency_caps=[{"level": "campaign", "count": 1,
                                               "window": "day"}])
        body = ad_request(deadline_ms=30)
        assert client.post("/v1/ads:select", json=body).status_code == 204  # late
        assert len(late_queue.handed[0].decision.placed) == 1  # type: ignore[union-attr]
        late_queue.late = False
        # the user saw nothing: the day's one impression is still theirs
        assert client.post("/v1/ads:select", json=body).status_code == 200
