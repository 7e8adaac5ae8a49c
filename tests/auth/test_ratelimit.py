"""Per-key token buckets: ``burst`` at once, ``rate_per_s`` after; 429 with
Retry-After over HTTP for advertiser and reviewer keys, never on the open routes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from adfunnel.auth.ratelimit import RateLimiter, retry_after
from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.auth.conftest import START


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_bucket_allows_the_burst_then_the_rate() -> None:
    now = FakeMonotonic()
    limiter = RateLimiter(2.0, 3, now)
    assert [limiter.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("k") == pytest.approx(0.5)  # half a second to the next token
    assert limiter.take("other") == 0.0  # each key has its own bucket
    now.t += 0.5
    assert limiter.take("k") == 0.0
    assert limiter.take("k") > 0
    now.t += 60  # a long pause refills to the burst, not beyond
    assert [limiter.take("k") for _ in range(4)][:3] == [0.0, 0.0, 0.0]
    assert limiter.take("k") > 0


def test_refused_requests_spend_nothing() -> None:
    now = FakeMonotonic()
    limiter = RateLimiter(1.0, 1, now)
    assert limiter.take("k") == 0.0
    for _ in range(10):
        assert limiter.take("k") == pytest.approx(1.0)
    now.t += 1.0
    assert limiter.take("k") == 0.0


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    assert [retry_after(w) for w in (0.01, 0.5, 1.0, 1.2, 7.9)] == [1, 1, 1, 2, 8]


@pytest.fixture
def slow_runtime() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY, api_rate_per_s=0.01, api_burst=3)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.mark.slow
def test_an_advertiser_key_over_its_rate_gets_429_with_retry_after(
        slow_runtime: Runtime) -> None:
    with TestClient(build_app(slow_runtime)) as http:
        adv = http.post("/v1/advertisers", json={"name": "a"}, headers=ADMIN_HEADERS).json()
        issue: Callable[..., dict[str, str]] = lambda **body: {  # noqa: E731
            "Authorization": "Bearer " + http.post("/v1/api-keys", json=body,
                                                   headers=ADMIN_HEADERS).json()["key"]}
        mine = issue(role="advertiser", advertiser_id=adv["id"])
        other = issue(role="reviewer")
        codes = [http.get("/v1/campaigns", headers=mine).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = http.get(f"/v1/advertisers/{adv['id']}", headers=mine)
        assert r.status_code == 429
        assert 1 <= int(r.headers["retry-after"]) <= 100  # one token in 1/0.01 s
        assert r.json()["error"] == "rate_limited"
        assert r.json()["fields"][0]["field"] == "authorization"
        assert http.get("/v1/campaigns", headers=other).status_code == 200  # its own bucket
        for _ in range(10):  # admin keys, the ad decision and the beacons are not limited
            assert http.get("/v1/campaigns", headers=ADMIN_HEADERS).status_code == 200
            assert http.post("/v1/ads:select", headers=mine, json={
                "user": {"key": "u"}, "placement": {"id": "p"},
                "slots": [{"id": "s", "position": 1, "width": 1, "height": 1}]}
            ).status_code == 204
            assert http.get("/i", params={"t": "x"}, headers=mine).status_code == 400
