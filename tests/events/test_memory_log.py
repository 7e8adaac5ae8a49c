"""What the in-memory log adds to the contract: exact clock-driven windows, the event
limit, fairness between partitions, and waking waiting readers."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from adfunnel.clock import ManualClock
from adfunnel.events.log import EventLogUnavailable
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import Event, EventType

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)


def event(n: int, campaign_id: int = 0) -> Event:
    return Event(
        event_type=EventType.IMPRESSION,
        impression_id=f"imp{n}",
        campaign_id=campaign_id,
        ad_id=1,
        placement="p",
        price_micros=1_000,
        billing_type="CPM",
        served_at=1,
        occurred_at=2.0,
        client_ip="192.0.2.1",
        user_agent="",
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def test_redelivery_is_due_exactly_at_ack_wait_on_the_clock(clock: ManualClock) -> None:
    log = MemoryEventLog(clock, partitions=1)
    log.publish(event(1))
    consumer = log.consumer("agg", ack_wait_s=30)
    assert len(consumer.fetch(10, 0)) == 1
    clock.advance(29.999)
    assert consumer.fetch(10, 0) == []
    clock.advance(0.001)
    (again,) = consumer.fetch(10, 0)
    assert again.attempt == 2
    clock.advance(29.9)  # the deadline moved with the redelivery
    assert consumer.fetch(10, 0) == []


def test_the_dedupe_window_is_measured_on_the_clock(clock: ManualClock) -> None:
    log = MemoryEventLog(clock, partitions=1, dedupe_window_s=7_200)
    log.publish(event(1))
    clock.advance(7_199)
    log.publish(event(1))
    assert log.last_seq == 1
    clock.advance(1)
    log.publish(event(1))
    assert log.last_seq == 2


def test_a_new_ack_wait_applies_to_an_existing_consumer(clock: ManualClock) -> None:
    log = MemoryEventLog(clock, partitions=1)
    log.publish(event(1))
    assert len(log.consumer("agg", ack_wait_s=60).fetch(10, 0)) == 1
    consumer = log.consumer("agg", ack_wait_s=5)
    clock.advance(5)
    assert consumer.fetch(10, 0) == []  # handed out under the old ack_wait
    clock.advance(55)
    (again,) = consumer.fetch(10, 0)
    clock.advance(5)
    (third,) = consumer.fetch(10, 0)
    assert (again.attempt, third.attempt) == (2, 3)


def test_the_event_limit_drops_the_oldest(clock: ManualClock) -> None:
    log = MemoryEventLog(clock, partitions=2, max_events=3)
    reader = log.consumer("agg")
    log.publish_many([event(n, campaign_id=n) for n in range(2)])
    assert [d.seq for d in reader.fetch(10, 0)] == [1, 2]  # pending, unacked
    log.publish_many([event(n, campaign_id=n) for n in range(2, 6)])
    late = log.consumer("late")
    assert [d.seq for d in late.fetch(10, 0)] == [4, 5, 6]
    clock.advance(60)
    assert [d.seq for d in reader.fetch(10, 0)] == [4, 5, 6]  # 1 and 2 are gone
    with pytest.raises(ValueError):
        MemoryEventLog(clock, max_events=0)


def test_a_log_that_keeps_unacknowledged_events_refuses_when_full(clock: ManualClock) -> None:
    """The embedded default's log (the only copy of its events): past its bound it drops
    only what every reader acknowledged, and refuses a publish that would drop more."""
    log = MemoryEventLog(clock, partitions=2, max_events=3, keep_unacknowledged=True)
    reader = log.consumer("agg")
    log.publish_many([event(n, campaign_id=n) for n in range(2)])
    taken = reader.fetch(10, 0)  # pending: the ledger has not taken them yet
    log.publish(event(2, campaign_id=2))
    with pytest.raises(EventLogUnavailable):
        log.publish_many([event(3, campaign_id=3), event(4, campaign_id=4)])
    assert log.last_seq == 3  # nothing of the refused publish stored
    reader.ack(taken)
    log.publish_many([event(3, campaign_id=3), event(4, campaign_id=4)])
    assert [d.seq for d in reader.fetch(10, 0)] == [3, 4, 5]


def test_partitions_take_turns_when_the_batch_is_small(clock: ManualClock) -> None:
    log = MemoryEventLog(clock, partitions=2)
    log.publish_many([event(n, campaign_id=n % 2) for n in range(20)])
    consumer = log.consumer("agg")
    parts = [consumer.fetch(1, 0)[0].partition for _ in range(6)]
    assert sorted(parts) == [0, 0, 0, 1, 1, 1]


def test_close_wakes_a_waiting_fetch(clock: ManualClock) -> None:
    log = MemoryEventLog(clock)
    consumer = log.consumer("agg")
    threading.Timer(0.2, log.close).start()
    started = time.monotonic()
    with pytest.raises(EventLogUnavailable):
        consumer.fetch(10, 30)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("kwargs", [{"partitions": 0}, {"dedupe_window_s": 0}])
def test_arguments_are_checked(clock: ManualClock, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MemoryEventLog(clock, **kwargs)  # type: ignore[arg-type]
