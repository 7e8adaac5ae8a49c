"""The tracker's fast path: events published from the caller's own loop on a second
JetStream connection, and the publisher falling back to its thread (publish again or
spool) whenever that path cannot promise an event is stored. Real NATS."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adfunnel.events.jetstream_async import LoopPublisher
from adfunnel.events.jetstream_log import JetStreamEventLog
from adfunnel.events.log import EventLogUnavailable
from adfunnel.events.publisher import FAST_PATH_FALLBACKS, EventPublisher
from adfunnel.events.spool import Spool
from tests.events.test_publisher import event

pytestmark = pytest.mark.nats


@pytest.fixture
def log(nats_url: str) -> Iterator[JetStreamEventLog]:
    name = f"TEST_FAST_{uuid.uuid4().hex[:8].upper()}"
    made = JetStreamEventLog(nats_url, stream=name, subject_prefix=f"fast.{name.lower()}",
                             partitions=4, timeout_s=1.0)
    made.last_seq()  # the stream exists before the fast path publishes
    try:
        yield made
    finally:
        made.delete_stream()
        made.close()


def stored(log: JetStreamEventLog) -> list[str]:
    """The impression ids in the stream, in log order (a fresh consumer)."""
    reader = log.consumer(f"probe_{uuid.uuid4().hex[:6]}", from_seq=0)
    try:
        out = []
        while batch := reader.fetch(1_000, 0.5):
            out += [d.event.impression_id for d in batch]
        return sorted(out)
    finally:
        reader.close()


async def ready(fast: LoopPublisher) -> LoopPublisher:
    fast.start()
    for _ in range(200):
        if fast.ready:
            return fast
        await asyncio.sleep(0.01)
    raise AssertionError("the loop publisher did not connect")


@pytest.mark.slow
def test_events_published_on_the_loop_are_in_the_stream_once(log: JetStreamEventLog) -> None:
    async def run() -> int:
        fast = await ready(log.loop_publisher())
        try:
            await asyncio.gather(*(fast.publish(event(n, campaign_id=n)) for n in range(50)))
            await fast.publish(event(7, campaign_id=7))  # a retried publish: deduplicated
            return fast.duplicates
        finally:
            await fast.aclose()

    assert asyncio.run(run()) == 1
    assert stored(log) == sorted(f"imp{n:04d}" for n in range(50))


@pytest.mark.slow
def test_before_connecting_and_after_closing_it_promises_nothing(
        log: JetStreamEventLog) -> None:
    async def run() -> None:
        fast = log.loop_publisher()
        with pytest.raises(EventLogUnavailable):
            await fast.publish(event(0))  # not started
        await ready(fast)
        await fast.aclose()
        with pytest.raises(EventLogUnavailable):
            await fast.publish(event(1))

    asyncio.run(run())
    assert stored(log) == []


@pytest.mark.slow
def test_a_refused_fast_publish_is_stored_by_the_thread_path(log: JetStreamEventLog) -> None:
    """A fast path whose subjects no stream listens on (the answer is a 503 status):
    every event falls back and is stored all the same, on the right subject."""
    real = log.loop_publisher
    log.loop_publisher = lambda: LoopPublisher(  # type: ignore[method-assign]
        log._urls, lambda e: "nowhere.at.all", timeout_s=1.0)
    pub = EventPublisher(log)
    before = FAST_PATH_FALLBACKS._value.get()

    async def run() -> None:
        await ready(pub._fast_path())  # type: ignore[arg-type]
        await asyncio.gather(*(pub.append_async(event(n, campaign_id=n)) for n in range(10)))
        await pub.aclose_fast_path()

    try:
        asyncio.run(run())
    finally:
        pub.close()
        log.loop_publisher = real  # type: ignore[method-assign]
    assert FAST_PATH_FALLBACKS._value.get() - before == 10
    assert stored(log) == sorted(f"imp{n:04d}" for n in range(10))


@pytest.mark.slow
def test_the_publisher_takes_the_fast_path_while_nothing_is_spooled(
        log: JetStreamEventLog, tmp_path: Path) -> None:
    pub = EventPublisher(log, Spool(tmp_path / "spool", 1 << 20))
    rounds: list[int] = []
    slow = pub._store
    pub._store = lambda events: (rounds.append(len(events)), slow(events))[1]  # type: ignore[method-assign]

    async def run() -> None:
        await ready(pub._fast_path())  # type: ignore[arg-type]
        await asyncio.gather(*(pub.append_async(event(n, campaign_id=n)) for n in range(20)))
        await pub.append_async(event(3, campaign_id=3))  # a resent beacon: the log drops it
        await pub.aclose_fast_path()

    try:
        asyncio.run(run())
    finally:
        pub.close()
    assert rounds == []  # no event needed the flusher thread
    assert pub.duplicates() == 1  # counted on the fast path, seen by the stats route
    assert stored(log) == sorted(f"imp{n:04d}" for n in range(20))


@pytest.mark.slow
def test_an_unanswered_publish_gives_up_after_its_timeout(log: JetStreamEventLog) -> None:
    """A subject whose only listener never replies (no stream, and no "no responders"
    status either, since someone listens): the publish times out."""
    import nats
    from nats.aio.msg import Msg

    async def ignore(_: Msg) -> None:
        return None

    async def run() -> None:
        silent = await nats.connect(log._urls)
        await silent.subscribe("silent.sink", cb=ignore)
        fast = await ready(LoopPublisher(log._urls, lambda e: "silent.sink", timeout_s=0.3))
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(EventLogUnavailable, match="no answer"):
                await fast.publish(event(0))
            assert 0.25 <= loop.time() - t0 < 2.0
        finally:
            await fast.aclose()
            await silent.close()

    asyncio.run(run())
