"""Frequency caps on one of several serving processes without a shared cap store
(adfunnel.frequency.scope): capped campaigns are not served (``cap_unavailable``) unless
the operator chose ``caps = "per-process"``; a sole process counts in memory exactly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.frequency.scope import NO_SHARED_STORE
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign

CAP_1_PER_DAY = [{"level": "campaign", "count": 1, "window": "day"}]


def _client(**settings: Any) -> Iterator[TestClient]:
    rt = build_runtime(load_settings(database_url="sqlite://", clock="manual",
                                     token_secret="k" * 32, budget="local",
                                     admin_key=ADMIN_KEY, **settings),
                       ManualClock(START), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as c:
            yield c
    finally:
        rt.close()


@pytest.fixture
def two_workers() -> Iterator[TestClient]:
    """A worker of ``serve --workers 2`` without Redis, default cap policy."""
    yield from _client(workers=2)


def _explain(client: TestClient, rid: str) -> dict[str, Any]:
    client.post("/v1/ads:select", json={**ad_request(), "explain": True, "request_id": rid})
    return client.get(f"/v1/decisions/{rid}").json()


def _served(client: TestClient) -> int:
    """Ads one select serves (200 with ads, or 204)."""
    r = client.post("/v1/ads:select", json=ad_request())
    assert r.status_code in (200, 204), r.text
    return len(r.json()["ads"]) if r.status_code == 200 else 0


def test_a_worker_of_several_without_redis_does_not_serve_capped_campaigns(
        two_workers: TestClient) -> None:
    capped = make_campaign(two_workers, bid_micros=3_000_000,
                           frequency_caps=CAP_1_PER_DAY)["campaign"]["id"]
    free = make_campaign(two_workers, bid_micros=1_000_000)["campaign"]["id"]
    r = _explain(two_workers, "a")
    assert [p["campaign_id"] for p in r["placed"]] == [free]
    [rej] = [x for x in r["rejections"] if x["campaign_id"] == capped]
    assert (rej["reason"], rej["detail"]) == ("cap_unavailable", NO_SHARED_STORE)
    stats = two_workers.get("/v1/serving/stats").json()
    assert stats["rejections"]["cap_unavailable"] >= 1
    metrics = two_workers.get("/metrics").text
    assert 'adfunnel_cap_unavailable_total{step="no_shared_store"}' in metrics


@pytest.mark.slow
def test_per_process_caps_are_the_operators_explicit_choice() -> None:
    """``--caps per-process``: each process counts on its own (bound N x cap)."""
    for client in _client(workers=2, caps="per-process"):
        make_campaign(client, frequency_caps=CAP_1_PER_DAY)
        got = [_served(client) for _ in range(2)]
        assert got == [1, 0]  # this process's count holds its own cap


@pytest.mark.slow
def test_the_sole_process_counts_caps_in_memory_exactly() -> None:
    for client in _client():
        make_campaign(client, frequency_caps=CAP_1_PER_DAY)
        got = [_served(client) for _ in range(2)]
        assert got == [1, 0]
