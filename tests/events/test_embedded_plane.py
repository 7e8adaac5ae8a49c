"""The embedded default's event plane (SQLite, memory log): a beacon never waits on the
ledger; the aggregator's own thread bills what the log holds (issue 22, §2).

A real embedded app on an SQLite file; another connection holds the database with
``BEGIN EXCLUSIVE`` while beacons arrive.
"""

from __future__ import annotations

import contextlib
import sqlite3
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime import event_plane
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.helpers import ad_request, make_campaign

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
BROWSER = {"user-agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 "
                         "Firefox/128.0"}
#: Beacons fired while the database is locked.
BEACONS = 5
#: What a beacon may take while the ledger cannot be written, ms (median of BEACONS).
ANSWER_MS = 50.0
#: Seconds within which the events are billed once the lock is released.
BILLED_WITHIN_S = 5.0


@pytest.fixture
def runtime(sqlite_file_url: str) -> Iterator[Runtime]:
    settings = load_settings(database_url=sqlite_file_url, clock="manual",
                             token_secret="k" * 32, budget="local", admin_key=ADMIN_KEY)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(runtime), headers=ADMIN_HEADERS) as c:
        yield c


def _wait_for(condition: object, timeout_s: float) -> float | None:
    """Seconds until ``condition()`` held, or None when it did not within ``timeout_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if condition():  # type: ignore[operator]
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


def _impression_urls(client: TestClient) -> list[str]:
    """A campaign made, then BEACONS decisions: their impression beacons' URLs."""
    make_campaign(client)
    urls = []
    for _ in range(BEACONS):
        r = client.post("/v1/ads:select", json=ad_request(deadline_ms=5_000))
        assert r.status_code == 200, r.text
        urls.append(r.json()["ads"][0]["impression_url"])
    return urls


@contextlib.contextmanager
def _database_locked(sqlite_file_url: str) -> Iterator[None]:
    """The SQLite file held by an exclusive transaction of another connection."""
    lock = sqlite3.connect(sqlite_file_url.removeprefix("sqlite:///"), timeout=0,
                           isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        lock.execute("ROLLBACK")
        lock.close()


@pytest.mark.slow
def test_a_locked_database_delays_billing_not_the_beacon(
        client: TestClient, runtime: Runtime, sqlite_file_url: str) -> None:
    urls = _impression_urls(client)
    with _database_locked(sqlite_file_url):
        took_ms = []
        for url in urls:
            t0 = time.perf_counter()
            r = client.get(url, headers=BROWSER)
            took_ms.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 204, r.text
        assert statistics.median(took_ms) < ANSWER_MS, took_ms
        assert max(took_ms) < 1_000, took_ms  # none waited on the ledger (30 s busy wait)
        assert runtime.ledger.stats().rows == 0  # nothing could be written meanwhile
    # no other traffic: the aggregator's thread bills what the log holds
    after = _wait_for(lambda: runtime.ledger.stats().rows == BEACONS, BILLED_WITHIN_S)
    assert after is not None, runtime.ledger.stats()



@pytest.mark.slow
def test_a_memory_log_full_of_unbilled_events_refuses_rather_than_drops(
        sqlite_file_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory log keeps at most MEMORY_LOG_EVENTS events (here 6: three beacons of
    a render and an impression each). With the database locked, none is billed; the
    log used to drop the oldest to take more, so beacons answered 204 were never
    billed. Now a beacon it cannot keep answers 503 (retry later) and every beacon
    answered 204 is billed once the database answers."""
    monkeypatch.setattr(event_plane, "MEMORY_LOG_EVENTS", 6)
    settings = load_settings(database_url=sqlite_file_url, clock="manual",
                             token_secret="k" * 32, budget="local", admin_key=ADMIN_KEY)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
            urls = _impression_urls(client)
            with _database_locked(sqlite_file_url):
                answers = []
                for url in urls:
                    answers.append(client.get(url, headers=BROWSER).status_code)
                    time.sleep(0.6)  # the aggregator fetches what it can meanwhile
            assert set(answers) == {204, 503}, answers
            stored = answers.count(204)
            after = _wait_for(lambda: rt.ledger.stats().rows == stored, BILLED_WITHIN_S)
            assert after is not None, (answers, rt.ledger.stats())
    finally:
        rt.close()
