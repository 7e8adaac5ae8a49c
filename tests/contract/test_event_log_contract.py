"""The EventLog contract, run on the in-memory log and on NATS JetStream.

Rules under test: events come back as published, with increasing stream sequences;
a msg id stored within the dedupe window is dropped; a campaign's events live on its
partition, in order; an unacknowledged delivery comes again after ack_wait; a durable
consumer continues where its last reader stopped (a restarted aggregator); a consumer
repositioned to sequence 0 reads the whole log again; a log that cannot answer raises
EventLogUnavailable, quickly.

JetStream: the server at ``ADFUNNEL_TEST_NATS_URL`` (default ``nats://127.0.0.1:4222``,
skipped when unreachable); each test gets its own stream and subjects and deletes them.
Memory: time (ack_wait, dedupe window) moves on a ManualClock; JetStream: real seconds.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from adfunnel.clock import ManualClock
from adfunnel.events.jetstream_log import JetStreamEventLog
from adfunnel.events.log import Consumer, Delivery, EventLog, EventLogUnavailable
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import Event, EventType, partition_of

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)
PARTITIONS = 4
ACK_WAIT_S = 1.0
DEDUPE_WINDOW_S = 1.5
#: a generous wait for events that are there (a shared machine), and a short one for none
WAIT_S = 3.0
NONE_S = 0.3


@dataclass
class LogBackend:
    """A backend under test. ``open()`` gives a log object on the same stored events (as
    another process would have); ``unreachable()`` one that cannot reach its storage;
    ``pass_time(s)`` lets ``s`` seconds of the log's time go by."""

    name: str
    open: Callable[[], EventLog]
    unreachable: Callable[[], EventLog]
    pass_time: Callable[[float], None]
    opened: list[EventLog] = field(default_factory=list)


def _memory_backend() -> Iterator[LogBackend]:
    clock = ManualClock(NOW)
    shared = MemoryEventLog(clock, partitions=PARTITIONS, dedupe_window_s=DEDUPE_WINDOW_S)

    def closed() -> EventLog:  # the memory log is unreachable only once closed
        log = MemoryEventLog(clock, partitions=PARTITIONS)
        log.close()
        return log

    yield LogBackend("memory", lambda: shared, closed, clock.advance)
    shared.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _jetstream_backend(url: str) -> Iterator[LogBackend]:
    suffix = uuid.uuid4().hex[:12]
    opened: list[EventLog] = []

    def open_log(at: str = url) -> JetStreamEventLog:
        log = JetStreamEventLog(
            at,
            stream=f"TEST_{suffix}",
            subject_prefix=f"test.{suffix}",
            partitions=PARTITIONS,
            dedupe_window_s=DEDUPE_WINDOW_S,
            timeout_s=5.0,  # generous: these tests check semantics on a shared machine
            connect_timeout_s=1.0,
        )
        opened.append(log)
        return log

    def pass_time(seconds: float) -> None:
        time.sleep(seconds)

    backend = LogBackend(
        "jetstream",
        open_log,
        lambda: open_log(f"nats://127.0.0.1:{_closed_port()}"),
        pass_time,
        opened,
    )
    try:
        yield backend
    finally:
        admin = open_log()
        admin.delete_stream()
        for log in opened:
            log.close()


@pytest.fixture(params=["memory", pytest.param("jetstream", marks=pytest.mark.nats)])
def backend(request: pytest.FixtureRequest) -> Iterator[LogBackend]:
    """A fresh, empty log on each backend."""
    if request.param == "memory":
        yield from _memory_backend()
    else:
        yield from _jetstream_backend(request.getfixturevalue("nats_url"))


@pytest.fixture
def log(backend: LogBackend) -> EventLog:
    return backend.open()


def event(
    n: int,
    campaign_id: int = 7,
    event_type: EventType = EventType.IMPRESSION,
    occurred_at: float = 1_793_718_000.0,
) -> Event:
    return Event(
        event_type=event_type,
        impression_id=f"imp{n:04d}",
        campaign_id=campaign_id,
        ad_id=100 + campaign_id,
        placement="home_top",
        price_micros=2_500_000,
        billing_type="CPM",
        served_at=1_793_717_990,
        occurred_at=occurred_at,
        client_ip="203.0.113.9",
        user_agent="Mozilla/5.0 (X11; Linux x86_64)",
    )


def fetch_all(consumer: Consumer, expected: int, wait_s: float = WAIT_S) -> list[Delivery]:
    """Fetch until ``expected`` deliveries came or ``wait_s`` passed; then one short
    fetch more, so that extra deliveries would be seen."""
    got: list[Delivery] = []
    deadline = time.monotonic() + wait_s
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.fetch(expected - len(got) + 10, min(0.5, wait_s))
    got += consumer.fetch(100, 0.05)
    return got


def fetch_exactly(consumer: Consumer, n: int) -> list[Delivery]:
    """Exactly ``n`` deliveries (never more), fetched within :data:`WAIT_S`."""
    got: list[Delivery] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        got += consumer.fetch(n - len(got), 0.5)
    assert len(got) == n, f"fetched {len(got)} of {n}"
    return got


def msg_ids(deliveries: list[Delivery]) -> list[str]:
    return [d.event.msg_id for d in deliveries]


# --- publish, fetch, ack ----------------------------------------------------------------------


def test_events_come_back_as_published_with_increasing_sequences(log: EventLog) -> None:
    sent = [event(n, campaign_id=n % 6) for n in range(12)]
    log.publish(sent[0])
    log.publish_many(sent[1:])
    consumer = log.consumer("agg")
    got = fetch_all(consumer, 12)
    assert sorted(d.event.msg_id for d in got) == sorted(e.msg_id for e in sent)
    assert {d.event.msg_id: d.event for d in got} == {e.msg_id: e for e in sent}
    assert [d.seq for d in got] == sorted(d.seq for d in got)
    assert sorted(d.seq for d in got) == list(range(1, 13))
    assert all(d.attempt == 1 for d in got)
    consumer.ack(got)
    assert consumer.fetch(100, NONE_S) == []


def test_fetch_hands_out_at_most_max_messages_and_the_rest_later(log: EventLog) -> None:
    log.publish_many([event(n, campaign_id=n % 3) for n in range(10)])
    consumer = log.consumer("agg")
    first = consumer.fetch(4, WAIT_S)
    assert 1 <= len(first) <= 4
    rest = fetch_all(consumer, 10 - len(first))
    assert len(first) + len(rest) == 10
    assert not set(msg_ids(first)) & set(msg_ids(rest))


def test_an_empty_log_answers_an_empty_list_after_the_timeout(log: EventLog) -> None:
    consumer = log.consumer("agg")
    started = time.monotonic()
    assert consumer.fetch(10, 0.2) == []
    assert consumer.fetch(10, 0) == []
    assert time.monotonic() - started < 0.2 + WAIT_S


def test_a_waiting_fetch_returns_when_an_event_arrives(log: EventLog) -> None:
    consumer = log.consumer("agg")
    publisher = threading.Timer(0.3, lambda: log.publish(event(1)))
    started = time.monotonic()
    publisher.start()
    try:
        got = consumer.fetch(10, 10.0)
    finally:
        publisher.join()
    assert msg_ids(got) == ["imp0001:impression"]
    assert time.monotonic() - started < 5.0


@pytest.mark.slow
def test_delivery_ack_acknowledges_one(backend: LogBackend, log: EventLog) -> None:
    log.publish_many([event(1), event(2)])
    consumer = log.consumer("agg", ack_wait_s=ACK_WAIT_S)
    got = fetch_all(consumer, 2)
    got[0].ack()
    backend.pass_time(ACK_WAIT_S + 0.3)
    again = fetch_all(consumer, 1)
    assert msg_ids(again) == [got[1].event.msg_id]
    assert again[0].attempt == 2


def test_concurrent_publishers_store_every_event_once(log: EventLog) -> None:
    def publish(worker: int) -> None:
        for n in range(25):
            log.publish(event(worker * 100 + n, campaign_id=worker))

    threads = [threading.Thread(target=publish, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = fetch_all(log.consumer("agg"), 100)
    assert len(got) == 100 and len(set(msg_ids(got))) == 100
    assert sorted(d.seq for d in got) == list(range(1, 101))


# --- dedupe by msg id ---------------------------------------------------------------------------


def test_a_msg_id_published_again_is_dropped(log: EventLog) -> None:
    first = event(1, occurred_at=1_793_718_000.0)
    log.publish(first)
    log.publish(event(1, occurred_at=1_793_718_005.0))  # a retried beacon: same msg id
    log.publish_many([event(2), event(2), event(1)])
    log.publish(event(1, event_type=EventType.CLICK))  # another event of the impression
    got = fetch_all(log.consumer("agg"), 3)
    assert sorted(msg_ids(got)) == ["imp0001:click", "imp0001:impression", "imp0002:impression"]
    stored = next(d.event for d in got if d.event.msg_id == "imp0001:impression")
    assert stored == first
    assert sorted(d.seq for d in got) == [1, 2, 3]


@pytest.mark.slow
def test_a_msg_id_is_stored_again_after_the_dedupe_window(
    backend: LogBackend, log: EventLog
) -> None:
    log.publish(event(1))
    backend.pass_time(DEDUPE_WINDOW_S + 1.0)
    log.publish(event(1))
    got = fetch_all(log.consumer("agg"), 2)
    assert msg_ids(got) == ["imp0001:impression", "imp0001:impression"]


# --- partitions ---------------------------------------------------------------------------------


def test_events_live_on_their_campaigns_partition_in_publish_order(log: EventLog) -> None:
    assert log.partitions == PARTITIONS
    sent = [event(n, campaign_id=n % 8) for n in range(32)]
    log.publish_many(sent)
    one = fetch_all(log.consumer("only_one", [1]), 8)
    assert {d.event.campaign_id for d in one} == {1, 5}
    assert all(d.partition == 1 for d in one)
    assert msg_ids(one) == [e.msg_id for e in sent if partition_of(e.campaign_id, 4) == 1]
    others = fetch_all(log.consumer("the_rest", [3, 0, 2]), 24)
    assert len(others) == 24
    assert all(d.partition == partition_of(d.event.campaign_id, PARTITIONS) != 1
               for d in others)
    for p in (0, 2, 3):  # publish order within each partition
        assert [d.event.msg_id for d in others if d.partition == p] == [
            e.msg_id for e in sent if partition_of(e.campaign_id, PARTITIONS) == p
        ]


def test_each_consumer_name_reads_every_event(log: EventLog) -> None:
    log.publish_many([event(n, campaign_id=n) for n in range(6)])
    a, b = log.consumer("aggregator"), log.consumer("archiver")
    got_a = fetch_all(a, 6)
    a.ack(got_a)
    assert sorted(msg_ids(fetch_all(b, 6))) == sorted(msg_ids(got_a))


# --- at least once: redelivery, restarts, replay -------------------------------------------------


@pytest.mark.slow
def test_unacknowledged_deliveries_come_again_after_ack_wait(
    backend: LogBackend, log: EventLog
) -> None:
    log.publish_many([event(n, campaign_id=n) for n in range(3)])
    consumer = log.consumer("agg", ack_wait_s=ACK_WAIT_S)
    got = fetch_all(consumer, 3)
    consumer.ack(got[:1])
    assert consumer.fetch(10, NONE_S) == []  # not due yet
    backend.pass_time(ACK_WAIT_S + 0.3)
    again = fetch_all(consumer, 2)
    assert sorted(msg_ids(again)) == sorted(msg_ids(got[1:]))
    assert [d.seq for d in again] == [d.seq for d in got[1:]]
    assert {d.attempt for d in again} == {2}
    consumer.ack(again)
    backend.pass_time(ACK_WAIT_S + 0.3)
    assert consumer.fetch(10, NONE_S) == []


@pytest.mark.slow
def test_acknowledging_twice_or_a_stale_delivery_is_harmless(
    backend: LogBackend, log: EventLog
) -> None:
    log.publish(event(1))
    consumer = log.consumer("agg", ack_wait_s=ACK_WAIT_S)
    (first,) = fetch_all(consumer, 1)
    backend.pass_time(ACK_WAIT_S + 0.3)
    (second,) = fetch_all(consumer, 1)
    assert second.seq == first.seq and second.attempt == 2
    consumer.ack([first])  # the stale delivery acknowledges the message
    consumer.ack([first, second])
    backend.pass_time(ACK_WAIT_S + 0.3)
    assert consumer.fetch(10, NONE_S) == []


@pytest.mark.slow
def test_a_restarted_reader_continues_where_the_last_one_stopped(
    backend: LogBackend, log: EventLog
) -> None:
    """An aggregator acks 2 of 4 fetched events and dies; its successor (another
    process, same durable name) gets the 2 never fetched at once, the 2 unacked after
    ack_wait, and never the acked ones."""
    sent = [event(n) for n in range(6)]  # one campaign: one partition, publish order
    log.publish_many(sent)
    first = log.consumer("agg", ack_wait_s=ACK_WAIT_S)
    fetched = fetch_exactly(first, 4)
    assert msg_ids(fetched) == [e.msg_id for e in sent[:4]]
    first.ack(fetched[:2])
    first.close()

    successor = backend.open().consumer("agg", ack_wait_s=ACK_WAIT_S)
    fresh = fetch_exactly(successor, 2)
    assert msg_ids(fresh) == [e.msg_id for e in sent[4:]]
    assert {d.attempt for d in fresh} == {1}
    assert successor.fetch(10, NONE_S) == []  # the unacked 2 are not due yet
    successor.ack(fresh)
    backend.pass_time(ACK_WAIT_S + 0.3)
    late = fetch_all(successor, 2)
    assert msg_ids(late) == [e.msg_id for e in sent[2:4]]
    assert {d.attempt for d in late} == {2}
    successor.ack(late)
    backend.pass_time(ACK_WAIT_S + 0.3)
    assert successor.fetch(10, NONE_S) == []


@pytest.mark.slow
def test_repositioning_to_sequence_zero_reads_the_whole_log_again(log: EventLog) -> None:
    sent = [event(n, campaign_id=n % 5) for n in range(10)]
    log.publish_many(sent)
    consumer = log.consumer("agg")
    done = fetch_all(consumer, 10)
    consumer.ack(done)
    consumer.close()
    assert log.consumer("agg").fetch(10, NONE_S) == []  # continuing: nothing left

    replay = log.consumer("agg", from_seq=0)
    again = fetch_all(replay, 10)
    assert sorted(d.seq for d in again) == list(range(1, 11))
    assert {d.event.msg_id: d.event for d in again} == {e.msg_id: e for e in sent}
    assert all(d.attempt == 1 for d in again)
    replay.ack(again)
    replay.close()

    tail = fetch_all(log.consumer("agg", from_seq=7), 4)
    assert sorted(d.seq for d in tail) == [7, 8, 9, 10]


# --- failures -------------------------------------------------------------------------------------


def test_an_unreachable_log_raises_event_log_unavailable_quickly(backend: LogBackend) -> None:
    dead = backend.unreachable()
    for call in (
        lambda: dead.publish(event(1)),
        lambda: dead.publish_many([event(2), event(3)]),
        lambda: dead.consumer("agg"),
    ):
        started = time.monotonic()
        with pytest.raises(EventLogUnavailable):
            call()
        assert time.monotonic() - started < 2.0


def test_a_closed_log_refuses_everything(backend: LogBackend) -> None:
    log = backend.open()
    consumer = log.consumer("agg")
    log.close()
    log.close()  # idempotent
    with pytest.raises(EventLogUnavailable):
        log.publish(event(1))
    with pytest.raises(EventLogUnavailable):
        log.consumer("agg")
    with pytest.raises(EventLogUnavailable):
        consumer.fetch(1, 0)


def test_a_closed_consumer_refuses_to_fetch(log: EventLog) -> None:
    consumer = log.consumer("agg")
    consumer.close()
    with pytest.raises(EventLogUnavailable):
        consumer.fetch(1, 0)


# --- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "partitions", "kwargs"),
    [
        ("", None, {}),
        ("has space", None, {}),
        ("dots.not.allowed", None, {}),
        ("agg", [], {}),
        ("agg", [0, 0], {}),
        ("agg", [PARTITIONS], {}),
        ("agg", [-1], {}),
        ("agg", None, {"ack_wait_s": 0}),
        ("agg", None, {"from_seq": -1}),
    ],
)
def test_consumer_arguments_are_checked(
    log: EventLog, name: str, partitions: list[int] | None, kwargs: dict[str, float]
) -> None:
    with pytest.raises(ValueError):
        log.consumer(name, partitions, **kwargs)  # type: ignore[arg-type]


def test_fetch_arguments_are_checked(log: EventLog) -> None:
    consumer = log.consumer("agg")
    with pytest.raises(ValueError):
        consumer.fetch(0, 1.0)
    with pytest.raises(ValueError):
        consumer.fetch(1, -1.0)
