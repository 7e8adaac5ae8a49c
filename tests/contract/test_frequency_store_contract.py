"""The FrequencyStore contract, run on the in-memory store and on Redis.

Rules under test: a winner serves only while every counter is below its limit and
every cooldown has passed (all caps hold together); a refused winner changes nothing;
winners of one call see each other's increments; a new bucket drops the cap's older
buckets; the user's expiry is raised, never shortened; erase removes everything; a
store that cannot answer raises CapStoreUnavailable, quickly.

Redis: the server at ``ADFUNNEL_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379``,
skipped when unreachable); each test uses its own key prefix and deletes its keys.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
import redis

from adfunnel.campaigns.model import CapLevel, CapWindow, FrequencyCap
from adfunnel.clock import ManualClock
from adfunnel.frequency.redis_store import RedisFrequencyStore
from adfunnel.frequency.store import CapStoreUnavailable, FrequencyStore, MemoryFrequencyStore
from adfunnel.frequency.windows import (
    DAY_S,
    LIFETIME_TTL_S,
    CapCheck,
    CapRule,
    CapStatus,
    Cooldown,
    evaluate,
    plan_caps,
    unix_s,
)

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)  # Tuesday 10:00 in New York
NOW_S = unix_s(NOW)
NY = "America/New_York"


@dataclass
class FrequencyBackend:
    """A backend under test: ``open()`` gives a store on the same records (as another
    server would have); ``unreachable()`` one that cannot reach its storage."""

    name: str
    clock: ManualClock
    open: Callable[[], FrequencyStore]
    unreachable: Callable[[], FrequencyStore]
    opened: list[FrequencyStore] = field(default_factory=list)


def _memory_backend() -> Iterator[FrequencyBackend]:
    clock = ManualClock(NOW)
    shared = MemoryFrequencyStore(clock)

    def closed() -> FrequencyStore:  # a memory store is unreachable only once closed
        store = MemoryFrequencyStore(clock)
        store.close()
        return store

    yield FrequencyBackend("memory", clock, lambda: shared, closed)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_backend(url: str) -> Iterator[FrequencyBackend]:
    prefix = f"fctest:{uuid.uuid4().hex}:"
    backend = FrequencyBackend("redis", ManualClock(NOW), lambda: _open(), lambda: _dead())

    def _open() -> FrequencyStore:
        # generous timeouts: these tests check semantics on a shared machine
        store = RedisFrequencyStore(url, read_timeout_s=2, write_timeout_s=2, key_prefix=prefix)
        backend.opened.append(store)
        return store

    def _dead() -> FrequencyStore:
        store = RedisFrequencyStore(f"redis://127.0.0.1:{_closed_port()}/0", key_prefix=prefix)
        backend.opened.append(store)
        return store

    try:
        yield backend
    finally:
        for store in backend.opened:
            store.close()
        client = redis.Redis.from_url(url, socket_timeout=2)
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest) -> Iterator[FrequencyBackend]:
    """Fresh, empty records on each backend."""
    if request.param == "memory":
        yield from _memory_backend()
    else:
        yield from _redis_backend(request.getfixturevalue("redis_url"))


@pytest.fixture
def store(backend: FrequencyBackend) -> FrequencyStore:
    return backend.open()


def counter(limit: int, field: str = "c:12:d:2026-11-03", level: CapLevel = CapLevel.CAMPAIGN,
            owner: int = 12) -> CapCheck:
    return CapCheck(field, limit, level, owner, CapWindow.DAY)


def cooldown(seconds: int, field: str = "c:12:last") -> Cooldown:
    return Cooldown(field, seconds, CapLevel.CAMPAIGN, 12)


def serve(store: FrequencyStore, rules: list[CapRule], now_s: int = NOW_S,
          ttl_s: int = 2 * DAY_S, user: str = "u") -> bool:
    (ok,) = store.check_and_increment(user, [rules], now_s, ttl_s)
    return ok


# --- counters and cooldowns ----------------------------------------------------------------


def test_counter_serves_below_its_limit_and_stops_at_it(store: FrequencyStore) -> None:
    rules: list[CapRule] = [counter(3)]
    assert [serve(store, rules) for _ in range(5)] == [True, True, True, False, False]
    assert store.read("u", ["c:12:d:2026-11-03"]) == {"c:12:d:2026-11-03": 3}
    assert store.read("other", ["c:12:d:2026-11-03"]) == {}


def test_read_answers_only_present_fields(store: FrequencyStore) -> None:
    assert store.read("u", []) == {}
    assert store.read("u", ["c:12:d:2026-11-03", "c:12:last"]) == {}
    serve(store, [counter(3), cooldown(60)])
    assert store.read("u", ["c:12:last", "a:9:last"]) == {"c:12:last": NOW_S}


def test_cooldown_allows_a_serve_once_its_seconds_passed(store: FrequencyStore) -> None:
    rules: list[CapRule] = [cooldown(1800)]
    assert serve(store, rules, NOW_S)
    assert not serve(store, rules, NOW_S + 1799)
    assert store.read("u", ["c:12:last"]) == {"c:12:last": NOW_S}  # a refusal writes nothing
    assert serve(store, rules, NOW_S + 1800)
    assert store.read("u", ["c:12:last"]) == {"c:12:last": NOW_S + 1800}


def test_all_caps_hold_together(store: FrequencyStore) -> None:
    """5 per day and 1800 s between serves: 3 serves, the last 20 minutes ago → refused,
    nothing counted; 30 minutes after the last → served."""
    caps = [FrequencyCap.counter(5, CapWindow.DAY, CapLevel.CAMPAIGN),
            FrequencyCap.cooldown(1800, CapLevel.CAMPAIGN)]
    plan = plan_caps(caps, ad_id=5, campaign_id=12, advertiser_id=7, time_zone=NY, at=NOW)
    for minutes_ago in (120, 60, 20):
        assert serve(store, list(plan.rules), NOW_S - minutes_ago * 60, plan.ttl_s)
    values = store.read("u", plan.fields)
    assert values == {"c:12:d:2026-11-03": 3, "c:12:last": NOW_S - 1200}
    verdict = evaluate(plan, values, NOW_S)
    assert verdict.status is CapStatus.CAPPED and verdict.rule == plan.rules[1]
    assert not serve(store, list(plan.rules), NOW_S, plan.ttl_s)
    assert store.read("u", plan.fields) == values
    assert serve(store, list(plan.rules), NOW_S + 600, plan.ttl_s)
    assert store.read("u", plan.fields) == {"c:12:d:2026-11-03": 4, "c:12:last": NOW_S + 600}


def test_a_refused_winner_changes_none_of_its_fields(store: FrequencyStore) -> None:
    ad_cooldown = Cooldown("a:5:last", 60, CapLevel.AD, 5)
    assert serve(store, [counter(1)])
    assert not serve(store, [ad_cooldown, counter(1), counter(9, "v:7:d:2026-11-03")])
    assert store.read("u", ["a:5:last", "c:12:d:2026-11-03", "v:7:d:2026-11-03"]) == {
        "c:12:d:2026-11-03": 1
    }


def test_winners_of_one_call_see_each_others_increments(store: FrequencyStore) -> None:
    """Two campaigns of advertiser 7 share its 1-per-day cap: the second winner of the
    same call is refused, and its own campaign counter is left alone."""
    adv = counter(1, "v:7:d:2026-11-03", CapLevel.ADVERTISER, 7)
    first: list[CapRule] = [counter(3, "c:12:d:2026-11-03"), adv]
    second: list[CapRule] = [counter(3, "c:13:d:2026-11-03", owner=13), adv]
    third: list[CapRule] = [counter(3, "c:14:d:2026-11-03", owner=14)]
    answers = store.check_and_increment("u", [first, second, third, []], NOW_S, 2 * DAY_S)
    assert answers == [True, False, True, True]
    fields = ["v:7:d:2026-11-03", "c:12:d:2026-11-03", "c:13:d:2026-11-03", "c:14:d:2026-11-03"]
    assert store.read("u", fields) == {
        "v:7:d:2026-11-03": 1, "c:12:d:2026-11-03": 1, "c:14:d:2026-11-03": 1
    }
    # one winner twice in a call counts twice
    assert store.check_and_increment("u", [third, third, third], NOW_S, 2 * DAY_S) == [
        True, True, False
    ]


def test_a_new_bucket_drops_the_older_buckets_of_its_cap(store: FrequencyStore) -> None:
    for day in ("2026-11-01", "2026-11-02"):
        assert serve(store, [counter(2, f"c:12:d:{day}"), counter(5, "c:12:w:2026-W45")])
    assert serve(store, [counter(2, "c:13:d:2026-11-01", owner=13)])
    assert serve(store, [counter(2, "c:12:d:2026-11-03"), cooldown(1)])
    fields = ["c:12:d:2026-11-01", "c:12:d:2026-11-02", "c:12:d:2026-11-03",
              "c:12:w:2026-W45", "c:13:d:2026-11-01", "c:12:last"]
    assert store.read("u", fields) == {
        "c:12:d:2026-11-03": 1, "c:12:w:2026-W45": 2, "c:13:d:2026-11-01": 1,
        "c:12:last": NOW_S,
    }


def test_an_advertisers_cap_in_two_zones_keeps_both_buckets(store: FrequencyStore) -> None:
    """Advertiser 7's 2-a-day cap carried by a New York and a Berlin campaign at 02:00
    UTC (23 Mar in New York, 24 Mar in Berlin): each serve counts both local days, and
    neither bucket is the other's older one. A tester saw 9 serves under the cap of 2:
    each bucket dropped the other, so after every serve only one held 1. Mutation seen
    red: the planned fields dropped too (serves 3 and 4 allowed)."""
    both: list[CapRule] = [counter(2, "v:7:d:2026-03-23", CapLevel.ADVERTISER, 7),
                           counter(2, "v:7:d:2026-03-24", CapLevel.ADVERTISER, 7)]
    assert [serve(store, both) for _ in range(4)] == [True, True, False, False]
    assert store.read("u", [r.field for r in both]) == {"v:7:d:2026-03-23": 2,
                                                         "v:7:d:2026-03-24": 2}


def test_no_rules_means_no_io(backend: FrequencyBackend) -> None:
    dead = backend.unreachable()
    assert dead.check_and_increment("u", [[], []], NOW_S, 0) == [True, True]
    assert dead.check_and_increment("u", [], NOW_S, 0) == []
    assert dead.read("u", []) == {}


def test_ttl_must_be_positive_when_there_is_something_to_write(store: FrequencyStore) -> None:
    with pytest.raises(ValueError):
        store.check_and_increment("u", [[counter(1)]], NOW_S, 0)
    assert store.read("u", ["c:12:d:2026-11-03"]) == {}


def test_parallel_callers_never_pass_a_cap(backend: FrequencyBackend) -> None:
    """8 threads (each with its own store on the same records) × 25 calls on one user
    with a cap of 2: exactly two serves."""
    stores = [backend.open() for _ in range(8)]
    start = threading.Barrier(len(stores))
    answers: list[bool] = []
    lock = threading.Lock()

    def hammer(s: FrequencyStore) -> None:
        start.wait()
        for _ in range(25):
            ok = serve(s, [counter(2), counter(1000, "v:7:d:2026-11-03")])
            with lock:
                answers.append(ok)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 200 and answers.count(True) == 2
    assert stores[0].read("u", ["c:12:d:2026-11-03", "v:7:d:2026-11-03"]) == {
        "c:12:d:2026-11-03": 2, "v:7:d:2026-11-03": 2
    }


# --- release: a counted serve whose answer was never sent -------------------------------


def test_release_undoes_a_counted_serve(store: FrequencyStore) -> None:
    rules: list[CapRule] = [counter(2)]
    assert serve(store, rules) and serve(store, rules)
    assert not serve(store, rules)
    store.release("u", [rules], NOW_S)
    assert store.read("u", ["c:12:d:2026-11-03"]) == {"c:12:d:2026-11-03": 1}
    assert serve(store, rules)  # the unsent serve's place is free again
    store.release("u", [rules], NOW_S)
    store.release("u", [rules], NOW_S)
    assert store.read("u", ["c:12:d:2026-11-03"]) == {}  # dropped at 0, never negative
    store.release("u", [rules], NOW_S)
    assert store.read("u", ["c:12:d:2026-11-03"]) == {}


def test_release_moves_a_cooldown_back_to_what_the_earlier_stamp_allowed(
        store: FrequencyStore) -> None:
    rules: list[CapRule] = [cooldown(1800)]
    assert serve(store, rules, NOW_S - 3600)  # a serve an hour ago, sent
    assert serve(store, rules, NOW_S)  # this one is never sent
    store.release("u", [rules], NOW_S)
    assert store.read("u", ["c:12:last"]) == {"c:12:last": NOW_S - 1800}
    assert serve(store, rules, NOW_S)  # allowed, as the earlier stamp allowed it
    # a stamp a later serve moved is left alone
    store.release("u", [rules], NOW_S - 5)
    assert store.read("u", ["c:12:last"]) == {"c:12:last": NOW_S}


def test_release_of_an_old_window_or_unknown_user_changes_nothing(store: FrequencyStore) -> None:
    assert serve(store, [counter(3, "c:12:d:2026-11-04")], NOW_S + DAY_S)
    store.release("u", [[counter(3, "c:12:d:2026-11-03")]], NOW_S)
    assert store.read("u", ["c:12:d:2026-11-04", "c:12:d:2026-11-03"]) == {
        "c:12:d:2026-11-04": 1}
    store.release("nobody", [[counter(3)], [cooldown(60)]], NOW_S)
    assert store.read("nobody", ["c:12:d:2026-11-03", "c:12:last"]) == {}
    store.release("u", [[], []], NOW_S)


# --- expiry and erase ------------------------------------------------------------------------


def assert_ttl(store: FrequencyStore, expected: int) -> None:
    ttl = store.ttl_s("u")
    assert ttl is not None and expected - 3 <= ttl <= expected, (ttl, expected)


def test_ttl_is_set_raised_and_never_shortened(store: FrequencyStore) -> None:
    assert store.ttl_s("u") is None
    assert serve(store, [counter(5)], ttl_s=2 * DAY_S)
    assert_ttl(store, 2 * DAY_S)
    assert serve(store, [counter(5, "a:5:h:2026-11-03T10-0500")], ttl_s=DAY_S + 3600)
    assert_ttl(store, 2 * DAY_S)
    assert serve(store, [counter(5)], ttl_s=8 * DAY_S)
    assert_ttl(store, 8 * DAY_S)
    # a refused call still raises the expiry of existing records
    assert not serve(store, [counter(1)], ttl_s=9 * DAY_S)
    assert_ttl(store, 9 * DAY_S)
    # ... and creates none for a user without records
    assert not serve(store, [cooldown(60), counter(0)], user="fresh", ttl_s=9 * DAY_S)
    assert store.ttl_s("fresh") is None


def test_a_lifetime_cap_keeps_records_400_days(store: FrequencyStore) -> None:
    caps = [FrequencyCap.counter(3, CapWindow.LIFETIME, CapLevel.AD),
            FrequencyCap.counter(1, CapWindow.HOUR, CapLevel.AD)]
    plan = plan_caps(caps, ad_id=5, campaign_id=12, advertiser_id=7, time_zone=NY, at=NOW)
    assert plan.ttl_s == LIFETIME_TTL_S == 34_560_000
    assert serve(store, list(plan.rules), ttl_s=plan.ttl_s)
    assert_ttl(store, LIFETIME_TTL_S)
    assert store.read("u", ["a:5:l:all"]) == {"a:5:l:all": 1}


def test_erase_removes_every_record_of_the_user(store: FrequencyStore) -> None:
    serve(store, [counter(1), cooldown(60)])
    serve(store, [counter(1)], user="other")
    store.erase("u")
    store.erase("never-seen")
    assert store.read("u", ["c:12:d:2026-11-03", "c:12:last"]) == {}
    assert store.ttl_s("u") is None
    assert serve(store, [counter(1), cooldown(60)])  # counts again from zero
    assert store.read("other", ["c:12:d:2026-11-03"]) == {"c:12:d:2026-11-03": 1}


def test_memory_expiry_follows_the_injected_clock() -> None:
    clock = ManualClock(NOW)
    store = MemoryFrequencyStore(clock)
    assert serve(store, [counter(1)], ttl_s=3600)
    clock.advance(1800)
    assert store.ttl_s("u") == 1800
    assert not serve(store, [counter(1)], ttl_s=60)  # refreshed to max(1800, 60)
    clock.advance(1799)
    assert store.read("u", ["c:12:d:2026-11-03"]) == {"c:12:d:2026-11-03": 1}
    clock.advance(1)
    assert store.read("u", ["c:12:d:2026-11-03"]) == {}
    assert store.ttl_s("u") is None
    assert serve(store, [counter(1)], ttl_s=3600)


def test_memory_sweeps_expired_users() -> None:
    clock = ManualClock(NOW)
    store = MemoryFrequencyStore(clock)
    for i in range(1000):
        serve(store, [counter(1)], ttl_s=60, user=f"old{i}")
    clock.advance(61)
    for i in range(3000):
        serve(store, [counter(1)], ttl_s=3600, user=f"new{i}")
    assert len(store._users) < 3100  # the expired 1000 went in a sweep
    assert store.read("old1", ["c:12:d:2026-11-03"]) == {}
    assert store.read("new1", ["c:12:d:2026-11-03"]) == {"c:12:d:2026-11-03": 1}


# --- unavailable -----------------------------------------------------------------------------


def test_an_unreachable_store_raises_quickly(backend: FrequencyBackend) -> None:
    dead = backend.unreachable()
    calls: list[Callable[[], object]] = [
        lambda: dead.read("u", ["c:12:d:2026-11-03"]),
        lambda: dead.check_and_increment("u", [[counter(1)]], NOW_S, DAY_S),
        lambda: dead.release("u", [[counter(1)]], NOW_S),
        lambda: dead.erase("u"),
        lambda: dead.ttl_s("u"),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(CapStoreUnavailable):
            call()
        assert time.monotonic() - started < 1.0


def test_a_closed_store_raises(backend: FrequencyBackend) -> None:
    store = backend.open()
    serve(store, [counter(2)])
    store.close()
    with pytest.raises(CapStoreUnavailable):
        store.read("u", ["c:12:d:2026-11-03"])
    with pytest.raises(CapStoreUnavailable):
        serve(store, [counter(2)])
    with pytest.raises(CapStoreUnavailable):
        store.erase("u")


def test_now_comes_from_the_caller(store: FrequencyStore) -> None:
    """Cooldowns compare the ``now_s`` passed in, never a clock of their own: a replay
    in the past works."""
    past = unix_s(NOW - timedelta(days=300))
    assert serve(store, [cooldown(3600)], past)
    assert not serve(store, [cooldown(3600)], past + 3599)
    assert serve(store, [cooldown(3600)], past + 3600)
