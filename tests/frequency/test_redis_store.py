"""The Redis frequency store beyond the contract: the key layout, caps held across OS
processes, and the deadlines of the default timeouts (against a server that never
answers)."""

from __future__ import annotations

import multiprocessing
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from adfunnel.campaigns.model import CapLevel, CapWindow
from adfunnel.frequency.redis_store import READ_TIMEOUT_S, WRITE_TIMEOUT_S, RedisFrequencyStore
from adfunnel.frequency.store import CapStoreUnavailable
from adfunnel.frequency.windows import CapCheck, CapRule, Cooldown

NOW_S = 1_793_800_000
CAP_2: list[CapRule] = [CapCheck("c:12:d:2026-11-03", 2, CapLevel.CAMPAIGN, 12, CapWindow.DAY)]


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    prefix = f"fctest:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.mark.redis
def test_one_hash_per_user_under_a_cluster_hash_tag(redis_url: str) -> None:
    user = f"test-{uuid.uuid4().hex}"
    store = RedisFrequencyStore(redis_url, read_timeout_s=2, write_timeout_s=2)
    client = redis.Redis.from_url(redis_url, socket_timeout=2, decode_responses=True)
    try:
        assert store.key(user) == f"fc:{{{user}}}"
        rules: list[CapRule] = [*CAP_2, Cooldown("a:5:last", 60, CapLevel.AD, 5)]
        assert store.check_and_increment(user, [rules], NOW_S, 90_000) == [True]
        assert client.hgetall(f"fc:{{{user}}}") == {
            "c:12:d:2026-11-03": "1", "a:5:last": str(NOW_S)
        }
        assert 89_990 <= client.ttl(f"fc:{{{user}}}") <= 90_000
    finally:
        client.delete(f"fc:{{{user}}}")
        client.close()
        store.close()


def _hammer(url: str, prefix: str, calls: int, start: Any, out: Any) -> None:
    """One OS process: ``calls`` check-and-increments of a cap of 2 on user ``u``."""
    store = RedisFrequencyStore(url, read_timeout_s=5, write_timeout_s=5, key_prefix=prefix)
    start.wait()
    answers = [store.check_and_increment("u", [CAP_2], NOW_S, 90_000)[0] for _ in range(calls)]
    store.close()
    out.put(answers)


@pytest.mark.slow
@pytest.mark.redis
def test_a_cap_holds_across_processes(redis_url: str, prefix: str) -> None:
    """6 processes × 50 calls on one user with a cap of 2: exactly two serves in all."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(6)
    out = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(redis_url, prefix, 50, start, out))
             for _ in range(6)]
    for p in procs:
        p.start()
    answers = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    flat = [a for batch in answers for a in batch]
    assert len(flat) == 300 and flat.count(True) == 2
    store = RedisFrequencyStore(redis_url, read_timeout_s=2, key_prefix=prefix)
    assert store.read("u", ["c:12:d:2026-11-03"]) == {"c:12:d:2026-11-03": 2}
    store.close()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A URL whose server accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"redis://127.0.0.1:{s.getsockname()[1]}/0"


def test_a_late_read_raises_after_the_read_timeout(silent_server: str) -> None:
    store = RedisFrequencyStore(silent_server)
    for _ in range(3):  # a fresh connection each time: a timed-out one is dropped
        started = time.monotonic()
        with pytest.raises(CapStoreUnavailable):
            store.read("u", ["c:12:d:2026-11-03"])
        elapsed = time.monotonic() - started
        assert 0.9 * READ_TIMEOUT_S <= elapsed < 0.5, elapsed
    store.close()


def test_a_late_write_raises_after_the_write_timeout(silent_server: str) -> None:
    store = RedisFrequencyStore(silent_server)
    started = time.monotonic()
    with pytest.raises(CapStoreUnavailable):
        store.check_and_increment("u", [CAP_2], NOW_S, 90_000)
    elapsed = time.monotonic() - started
    assert 0.9 * WRITE_TIMEOUT_S <= elapsed < 1.0, elapsed
    store.close()


def test_default_deadlines() -> None:
    assert (READ_TIMEOUT_S, WRITE_TIMEOUT_S) == (0.005, 0.05)
