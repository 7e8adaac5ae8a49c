"""Frequency caps end to end: real ``adfunnel serve`` processes on a real Redis.

- several worker processes never pass a cap together (one atomic count per winner);
- counters and cooldowns hold together (AND), on the server's manual clock;
- a day window is the campaign's local calendar day (a 25-hour DST-end day included);
- a Redis that stops answering excludes the capped campaigns only (``cap_unavailable``),
  and they serve again once it answers.

Budgets are ``local`` (``ADFUNNEL_BUDGET=local``) so pacing never hides what the caps
do. Each test uses a user key of its own and erases it afterwards.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
import redis

from adfunnel.bench.http_server import wait_workers
from adfunnel.sim.server_proc import ManagedProcess, free_port
from tests.api_keys import ADMIN_HEADERS

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

ENV = {"ADFUNNEL_BUDGET": "local"}
NEW_YORK = ZoneInfo("America/New_York")
#: ``adfunnel serve`` start-up limit, seconds (a 2-core machine shared with other runs).
START_S = 120.0


# ---- helpers -----------------------------------------------------------------------------
def _user() -> str:
    return f"e2e-caps-{uuid.uuid4().hex[:12]}"


@contextmanager
def _server(db: Path, redis_url: str, *extra: str) -> Iterator[ManagedProcess]:
    """``adfunnel serve`` on an SQLite file and ``redis_url``, ready (``/readyz``)."""
    args = ["serve", "--database-url", f"sqlite:///{db}", "--redis-url", redis_url, *extra]
    with ManagedProcess(args, health_path="/readyz", extra_env=ENV, timeout_s=START_S) as s:
        yield s


@contextmanager
def _erased(redis_url: str, *users: str) -> Iterator[None]:
    """Delete the users' cap records (``fc:{user}``) on the way out."""
    try:
        yield
    finally:
        client = redis.Redis.from_url(redis_url, socket_timeout=2)
        with suppress(redis.RedisError, OSError):
            client.delete(*[f"fc:{{{u}}}" for u in users])
        client.close()


def _advertiser(c: httpx.Client) -> int:
    r = c.post("/v1/advertisers", json={"name": "acme"})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _campaign(c: httpx.Client, advertiser_id: int, caps: list[dict[str, Any]], *,
              bid_micros: int = 2_000_000, time_zone: str = "UTC") -> int:
    """An active CPM campaign with one 300x250 ad; its id."""
    r = c.post("/v1/campaigns", json={
        "advertiser_id": advertiser_id, "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": bid_micros, "daily_budget_micros": 100_000_000,
        "time_zone": time_zone, "flight_start": "2026-07-01", "frequency_caps": caps})
    assert r.status_code == 201, r.text
    cid = int(r.json()["id"])
    ad = c.post(f"/v1/campaigns/{cid}/ads", json={
        "landing_url": "https://x.test/p", "creative_ref": "cr/1.png", "format": "banner",
        "width": 300, "height": 250})
    assert ad.status_code == 201, ad.text
    return cid


def _request(user: str, **extra: Any) -> dict[str, Any]:
    return {"user": {"key": user, "attributes": {"geo.country": "US"}},
            "placement": {"id": "feed"},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}], **extra}


def _served(c: httpx.Client, user: str) -> list[int]:
    """Campaign ids served to ``user`` by one select."""
    r = c.post("/v1/ads:select", json=_request(user))
    assert r.status_code in (200, 204), r.text
    return [a["campaign_id"] for a in r.json()["ads"]] if r.status_code == 200 else []


def _explain(c: httpx.Client, user: str) -> dict[str, Any]:
    """The decision record of one select with ``explain`` (placed and rejections)."""
    rid = uuid.uuid4().hex
    r = c.post("/v1/ads:select", json=_request(user, explain=True, request_id=rid))
    assert r.status_code in (200, 204), r.text
    got = c.get(f"/v1/decisions/{rid}")
    assert got.status_code == 200, got.text
    return got.json()


def _rejected(record: dict[str, Any], campaign_id: int) -> list[dict[str, Any]]:
    return [x for x in record["rejections"] if x["campaign_id"] == campaign_id]


def _set_clock(c: httpx.Client, at: datetime) -> None:
    r = c.put("/v1/admin/clock", json={"now": at.astimezone(UTC).isoformat()})
    assert r.status_code == 200, r.text


def _wait_catalogue(url: str, workers: int, ads: int, timeout_s: float = 30.0) -> None:
    """Poll ``/readyz`` on fresh connections until ``workers`` worker pids each report
    ``ads`` ads (the others learn the writes from the change feed)."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    # one TLS context for every poll; no kept connection (each poll may reach any worker)
    with httpx.Client(timeout=5.0, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while time.monotonic() < deadline:
            r = client.get(url + "/readyz")
            if r.status_code == 200:
                body = r.json()
                seen[int(body["pid"])] = int(body["ads"])
            if len(seen) >= workers and all(n == ads for n in seen.values()):
                return
            time.sleep(0.05)
    raise AssertionError(f"workers' catalogues never reached {ads} ads: {seen}")


def _cap_unavailable(metrics: str, step: str) -> float:
    m = re.search(rf'^adfunnel_cap_unavailable_total\{{step="{step}"\}} (\S+)$', metrics, re.M)
    return float(m.group(1)) if m else 0.0


# ---- several processes, one user ----------------------------------------------------------
def test_parallel_requests_on_three_workers_never_pass_an_advertiser_cap(
        tmp_path: Path, redis_url: str) -> None:
    """30 requests at once for one user, spread over 3 worker processes: the
    advertiser's 2 per hour is served exactly twice in all (budgets never bind)."""
    user, warm = _user(), _user()
    with _erased(redis_url, user, warm), \
            _server(tmp_path / "workers.db", redis_url, "--workers", "3") as server:
        workers = wait_workers(server.url, 3, timeout_s=START_S)
        cap = [{"level": "advertiser", "count": 2, "window": "hour"}]
        with httpx.Client(base_url=server.url, timeout=10.0, headers=ADMIN_HEADERS) as c:
            adv = _advertiser(c)
            ids = {_campaign(c, adv, cap, bid_micros=3_000_000), _campaign(c, adv, cap)}
        _wait_catalogue(server.url, 3, ads=2)
        to_hour = 3600 - time.time() % 3600
        if to_hour < 10:  # the burst must fall in one calendar hour
            time.sleep(to_hour + 1)

        n = 30
        barrier = threading.Barrier(n)
        results: list[tuple[int | None, list[int]]] = [(None, [])] * n
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                with httpx.Client(base_url=server.url, timeout=10.0,
                                  headers=ADMIN_HEADERS) as own:  # own connection
                    pid = own.get("/readyz").json()["pid"]
                    own.post("/v1/ads:select", json=_request(warm))  # opens its Redis pools
                    barrier.wait(timeout=30)
                    got = _served(own, user)
                    same = own.get("/readyz").json()["pid"] == pid  # one kept-alive socket
                    results[i] = (pid if same else None, got)
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        served = [cid for _, got in results for cid in got]
        assert len(served) == 2, results
        assert set(served) <= ids
        assert {pid for pid, _ in results} == workers  # every worker answered some
        held = redis.Redis.from_url(redis_url).hgetall(f"fc:{{{user}}}")
        counters = {k.decode(): int(v) for k, v in held.items()
                    if k.startswith(f"v:{adv}:h:".encode())}
        assert list(counters.values()) == [2], held  # one hour bucket, counted twice


# ---- counters and cooldowns together, manual clock -------------------------------------
def test_a_cooldown_binds_while_the_day_count_still_allows(tmp_path: Path,
                                                            redis_url: str) -> None:
    """5 per day AND one per 1,800 s: after 3 serves, the last 20 min ago, the cooldown
    refuses (and explain names it); 30 min after the last, it serves."""
    user = _user()
    start = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)
    with _erased(redis_url, user), \
            _server(tmp_path / "and.db", redis_url, "--clock", "manual") as server, \
            httpx.Client(base_url=server.url, timeout=10.0, headers=ADMIN_HEADERS) as c:
        _set_clock(c, start)
        cid = _campaign(c, _advertiser(c), [
            {"level": "campaign", "count": 5, "window": "day"},
            {"level": "campaign", "cooldown_s": 1800}])
        for k in range(3):  # serves at 09:00, 09:40, 10:20
            _set_clock(c, start + timedelta(minutes=40 * k))
            assert _served(c, user) == [cid], k
        last = start + timedelta(minutes=80)
        _set_clock(c, last + timedelta(minutes=20))
        record = _explain(c, user)
        assert record["placed"] == []
        assert [(x["reason"], x["detail"]) for x in _rejected(record, cid)] == [
            ("capped", f"campaign {cid}: 1 per 1800 s")]
        _set_clock(c, last + timedelta(minutes=30))
        assert _served(c, user) == [cid]


# ---- calendar day in the campaign's zone ----------------------------------------------
def test_a_day_cap_follows_the_local_calendar_day_across_dst_end(tmp_path: Path,
                                                                  redis_url: str) -> None:
    """1 per day in America/New_York on 2026-11-01 (25 hours: DST ends): served at
    00:30, refused at 23:30 the same local day (a UTC day would have turned), served at
    00:00:30 the next."""
    user = _user()
    with _erased(redis_url, user), \
            _server(tmp_path / "day.db", redis_url, "--clock", "manual") as server, \
            httpx.Client(base_url=server.url, timeout=10.0, headers=ADMIN_HEADERS) as c:
        first = datetime(2026, 11, 1, 0, 30, tzinfo=NEW_YORK)
        late = datetime(2026, 11, 1, 23, 30, tzinfo=NEW_YORK)
        # 23 wall-clock hours apart, 24 real ones: the 01:00 hour comes twice that night
        assert late.astimezone(UTC) - first.astimezone(UTC) == timedelta(hours=24)
        _set_clock(c, first)
        cid = _campaign(c, _advertiser(c), [{"level": "campaign", "count": 1,
                                             "window": "day"}],
                        time_zone="America/New_York")
        assert _served(c, user) == [cid]
        held = redis.Redis.from_url(redis_url).hgetall(f"fc:{{{user}}}")
        assert held == {f"c:{cid}:d:2026-11-01".encode(): b"1"}
        _set_clock(c, late)  # 2026-11-02T04:30Z: the next UTC day, the same local one
        record = _explain(c, user)
        assert record["placed"] == []
        assert [(x["reason"], x["detail"]) for x in _rejected(record, cid)] == [
            ("capped", f"campaign {cid}: 1 per day")]
        _set_clock(c, datetime(2026, 11, 2, 0, 0, 30, tzinfo=NEW_YORK))
        assert _served(c, user) == [cid]


# ---- Redis stops answering ---------------------------------------------------------------
@contextmanager
def _private_redis() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A throw-away ``redis-server`` on a free port (no persistence)."""
    binary = "/usr/bin/redis-server"
    if not os.path.exists(binary):
        pytest.skip(f"{binary} is not installed")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    try:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        for _ in range(100):
            with suppress(redis.RedisError, OSError):
                if client.ping():
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("the private redis-server did not answer")
        client.close()
        yield proc, url
    finally:
        with suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_a_stopped_redis_excludes_capped_campaigns_only(tmp_path: Path) -> None:
    """Redis stopped (SIGSTOP) for 5 s: the capped campaign drops out with
    ``cap_unavailable`` (explain and metrics) and the uncapped one serves; once Redis
    answers again the capped one serves again."""
    user = _user()
    with _private_redis() as (redis_proc, url), _server(tmp_path / "down.db", url) as server, \
            httpx.Client(base_url=server.url, timeout=10.0, headers=ADMIN_HEADERS) as c:
        capped = _campaign(c, _advertiser(c), [{"level": "campaign", "count": 100,
                                                "window": "day"}], bid_micros=3_000_000)
        free = _campaign(c, _advertiser(c), [], bid_micros=1_000_000)
        assert _served(c, user) == [capped]
        before = _cap_unavailable(c.get("/metrics").text, "screen")

        redis_proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            record = _explain(c, user)  # the per-candidate path
            assert [p["campaign_id"] for p in record["placed"]] == [free]
            assert [x["reason"] for x in _rejected(record, capped)] == ["cap_unavailable"]
            assert _served(c, user) == [free]  # the columnar path
            assert _cap_unavailable(c.get("/metrics").text, "screen") >= before + 2
            assert time.monotonic() - stopped_at < 5.0  # all of it while Redis was stopped
            time.sleep(max(0.0, 5.0 - (time.monotonic() - stopped_at)))
        finally:
            redis_proc.send_signal(signal.SIGCONT)

        assert _served(c, user) == [capped]
        record = _explain(c, user)
        assert [p["campaign_id"] for p in record["placed"]] == [capped]
