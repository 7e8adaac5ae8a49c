"""The publisher: straight to the log while it answers; while it is down, to a real
on-disk spool (acknowledged), later events queued behind, drained in order when the log
is back; refused when the spool cannot take them either."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adfunnel.clock import ManualClock
from adfunnel.events.log import EventLogUnavailable
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import Event, EventType, encode
from adfunnel.events.publisher import EventPublisher, EventRefused
from adfunnel.events.spool import Spool

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)
MiB = 1 << 20


def event(n: int, campaign_id: int = 3) -> Event:
    return Event(
        event_type=EventType.IMPRESSION,
        impression_id=f"imp{n:04d}",
        campaign_id=campaign_id,
        ad_id=9,
        placement="article_side",
        price_micros=2_000_000,
        billing_type="CPM",
        served_at=1_793_717_000,
        occurred_at=1_793_717_000.0 + n,
        client_ip="198.51.100.4",
        user_agent="Mozilla/5.0",
    )


class FlakyLog(MemoryEventLog):
    """A real in-memory log that refuses publishes while ``down`` is set (only its
    availability is faked; what it stores is stored for real)."""

    def __init__(self) -> None:
        super().__init__(ManualClock(NOW), partitions=4)
        self.down = threading.Event()
        self.refused = 0  # publish attempts refused while down

    def publish_many(self, events: Sequence[Event]) -> None:
        if self.down.is_set():
            self.refused += 1
            raise EventLogUnavailable("the log is down")
        super().publish_many(events)

    def stored(self) -> list[str]:
        """The impression ids stored, in log order (a fresh consumer reads them all)."""
        reader = self.consumer("probe", from_seq=0)
        return [d.event.impression_id for d in reader.fetch(10_000, 0.0)]


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.002)


@pytest.fixture
def log() -> FlakyLog:
    return FlakyLog()


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"


def test_an_available_log_gets_the_event_at_once(log: FlakyLog, spool_dir: Path) -> None:
    pub = EventPublisher(log, Spool(spool_dir, MiB))
    try:
        pub.append(event(1))
        assert log.stored() == ["imp0001"]
        assert pub.spooled() == 0
    finally:
        pub.close()


def test_events_during_an_outage_are_spooled_and_drained_in_order(
    log: FlakyLog, spool_dir: Path
) -> None:
    pub = EventPublisher(log, Spool(spool_dir, MiB), retry_s=0.01)
    try:
        log.down.set()
        for n in range(1, 6):
            pub.append(event(n, campaign_id=n))  # returns: acknowledged (on disk)
        assert pub.spooled() == 5
        assert log.stored() == []
        wait_for(lambda: log.refused >= 2)  # the drain thread keeps trying while down
        assert pub.spooled() == 5
        log.down.clear()
        wait_for(lambda: pub.spooled() == 0)
        assert log.stored() == [f"imp{n:04d}" for n in range(1, 6)]
        pub.append(event(6))  # the spool is empty again: straight to the log
        assert log.stored()[-1] == "imp0006" and pub.spooled() == 0
    finally:
        pub.close()


def test_later_events_queue_behind_the_spool_even_when_the_log_is_back(
    log: FlakyLog, spool_dir: Path
) -> None:
    # a long retry: after its first failed attempt the drain thread sleeps, so the log
    # comes back while events are still spooled
    pub = EventPublisher(log, Spool(spool_dir, MiB), retry_s=60)
    try:
        log.down.set()
        pub.append(event(1))
        wait_for(lambda: log.refused >= 2)  # the append's attempt and the drain thread's
        log.down.clear()
        pub.append(event(2))  # the log answers, but event 1 is spooled: 2 goes behind it
        pub.append(event(3))
        assert log.stored() == []
        assert pub.spooled() == 3
        assert pub.drain() == 3
        assert log.stored() == ["imp0001", "imp0002", "imp0003"]
    finally:
        pub.close()


def test_a_drain_while_the_log_is_down_keeps_everything_spooled(
    log: FlakyLog, spool_dir: Path
) -> None:
    pub = EventPublisher(log, Spool(spool_dir, MiB), retry_s=60)
    try:
        log.down.set()
        pub.append(event(1))
        pub.append(event(2))
        # the append's attempt and the drain thread's: the thread sleeps a minute now
        wait_for(lambda: log.refused >= 2)
        with pytest.raises(EventLogUnavailable):
            pub.drain()
        assert pub.spooled() == 2
        log.down.clear()
        assert pub.drain() == 2
        assert pub.drain() == 0
        assert log.stored() == ["imp0001", "imp0002"]
    finally:
        pub.close()


def test_close_drains_the_spool_when_the_log_answers(log: FlakyLog, spool_dir: Path) -> None:
    pub = EventPublisher(log, Spool(spool_dir, MiB), retry_s=60)
    log.down.set()
    pub.append(event(1))
    pub.append(event(2))
    wait_for(lambda: log.refused >= 2)  # the drain thread now sleeps for a minute
    log.down.clear()
    started = time.monotonic()
    pub.close()
    assert time.monotonic() - started < 5  # close wakes the sleeping thread
    assert log.stored() == ["imp0001", "imp0002"]
    reopened = Spool(spool_dir, MiB)  # closed, released, and durably drained
    try:
        assert len(reopened) == 0
    finally:
        reopened.close()


def test_close_while_the_log_is_down_keeps_the_spool_for_the_next_start(
    log: FlakyLog, spool_dir: Path
) -> None:
    pub = EventPublisher(log, Spool(spool_dir, MiB), retry_s=60)
    log.down.set()
    pub.append(event(1))
    pub.append(event(2))
    pub.close()
    assert log.stored() == []
    # the next process finds them and its drain thread publishes them on start
    log.down.clear()
    again = EventPublisher(log, Spool(spool_dir, MiB), retry_s=0.01)
    try:
        wait_for(lambda: again.spooled() == 0)
        assert log.stored() == ["imp0001", "imp0002"]
    finally:
        again.close()


def test_a_full_spool_with_the_log_down_refuses_the_event(
    log: FlakyLog, spool_dir: Path
) -> None:
    one = len(encode(event(1))) + 8 + 8  # frame header + segment magic
    pub = EventPublisher(log, Spool(spool_dir, one + 4), retry_s=60)
    try:
        log.down.set()
        pub.append(event(1))
        with pytest.raises(EventRefused):
            pub.append(event(2))
        assert pub.spooled() == 1  # the refused one was not half-written
        # the drain thread's attempt on event 1 fails while the log is down; once it
        # has, the thread sleeps retry_s and only the drain below can publish
        wait_for(lambda: log.refused >= 2)
        log.down.clear()
        with pytest.raises(EventRefused):  # still queued behind the full spool
            pub.append(event(3))
        assert pub.drain() == 1
        pub.append(event(4))
        assert log.stored() == ["imp0001", "imp0004"]
    finally:
        pub.close()


def test_without_a_spool_an_unavailable_log_refuses_the_event(log: FlakyLog) -> None:
    pub = EventPublisher(log)
    log.down.set()
    with pytest.raises(EventRefused):
        pub.append(event(1))
    assert pub.spooled() == 0 and pub.drain() == 0
    log.down.clear()
    pub.append(event(2))
    assert log.stored() == ["imp0002"]
    pub.close()


def test_a_closed_spool_refuses(log: FlakyLog, spool_dir: Path) -> None:
    spool = Spool(spool_dir, MiB)
    pub = EventPublisher(log, spool, retry_s=60)
    log.down.set()
    pub.close()
    with pytest.raises(EventRefused):
        pub.append(event(1))


def test_concurrent_appends_during_an_outage_lose_nothing(
    log: FlakyLog, spool_dir: Path
) -> None:
    pub = EventPublisher(log, Spool(spool_dir, MiB), retry_s=0.005)
    log.down.set()
    errors: list[BaseException] = []

    def send(base: int) -> None:
        try:
            for n in range(base, base + 50):
                pub.append(event(n, campaign_id=base))
                if n == base + 25:
                    log.down.clear()  # the log comes back mid-stream
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(base,)) for base in (0, 100, 200, 300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        wait_for(lambda: pub.spooled() == 0)
        stored = log.stored()
        assert sorted(stored) == sorted(f"imp{n:04d}" for b in (0, 100, 200, 300)
                                        for n in range(b, b + 50))
        for base in (0, 100, 200, 300):  # each sender's events keep their order
            mine = [s for s in stored if base <= int(s[3:]) < base + 50]
            assert mine == sorted(mine)
    finally:
        pub.close()


class CountingLog(FlakyLog):
    """Counts ``publish_many`` rounds and can hold one open (to let submissions pile up)."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[int] = []
        self.gate = threading.Event()
        self.gate.set()

    def publish_many(self, events: Sequence[Event]) -> None:
        self.gate.wait(10)
        self.rounds.append(len(events))
        super().publish_many(events)


def test_concurrent_events_share_a_round_trip_to_the_log() -> None:
    """Group commit: what is submitted while a round is in flight goes in the next one,
    in submission order, and each future completes only once its event is stored."""
    log = CountingLog()
    pub = EventPublisher(log)
    try:
        log.gate.clear()
        first = pub.submit(event(0))
        wait_for(lambda: pub._pending == [])  # the flusher holds it, blocked in the log
        later = [pub.submit(event(n)) for n in range(1, 101)]
        assert not any(f.done() for f in [first, *later])
        log.gate.set()
        for f in [first, *later]:
            f.result(10)
        assert log.rounds == [1, 100]
        assert log.stored() == [f"imp{n:04d}" for n in range(101)]
    finally:
        pub.close()


def test_a_coroutine_waits_for_its_event_without_a_thread(spool_dir: Path) -> None:
    log = FlakyLog()
    pub = EventPublisher(log, Spool(spool_dir, MiB), retry_s=60)

    async def beacons() -> None:
        await asyncio.gather(*(pub.submit_async(event(n)) for n in range(20)))
        log.down.set()  # now only the spool can take it: still acknowledged
        await pub.submit_async(event(20))

    try:
        asyncio.run(beacons())
        assert len(log.stored()) == 20 and pub.spooled() == 1
    finally:
        pub.close()


def test_a_refused_round_fails_every_waiter_and_a_closed_publisher_refuses() -> None:
    log = FlakyLog()
    pub = EventPublisher(log)  # no spool: a down log refuses
    log.down.set()
    futures = [pub.submit(event(n)) for n in range(5)]
    for f in futures:
        with pytest.raises(EventRefused):
            f.result(10)
    log.down.clear()
    pub.append(event(9))
    pub.close()
    with pytest.raises(EventRefused):
        pub.append(event(10))
    assert log.stored() == ["imp0009"]
