"""What the JetStream log adds to the contract: the stream's layout on the server, an
undecodable message, a closed reader handing back what it held, and a NATS server that
stops and comes back (a private server process on its own port and store)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import AckPolicy, StorageType
from prometheus_client import REGISTRY

from adfunnel.billing.aggregator import Aggregator
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.events.jetstream_consumer import consumer_durable
from adfunnel.events.jetstream_log import JetStreamEventLog
from adfunnel.events.log import EventLogError, EventLogUnavailable
from adfunnel.events.model import Event, EventType, encode

pytestmark = pytest.mark.nats


def event(n: int, campaign_id: int = 5) -> Event:
    return Event(
        event_type=EventType.CLICK,
        impression_id=f"imp{n}",
        campaign_id=campaign_id,
        ad_id=50,
        placement="feed",
        price_micros=300_000,
        billing_type="CPC",
        served_at=1_793_718_000,
        occurred_at=1_793_718_010.5,
        client_ip="2001:db8::1",
        user_agent="Mozilla/5.0",
    )


@pytest.fixture
def names() -> dict[str, str]:
    suffix = uuid.uuid4().hex[:12]
    return {"stream": f"TEST_{suffix}", "subject_prefix": f"test.{suffix}"}


@pytest.fixture
def log(nats_url: str, names: dict[str, str]) -> Iterator[JetStreamEventLog]:
    log = JetStreamEventLog(nats_url, partitions=4, timeout_s=5.0, **names)
    try:
        yield log
    finally:
        log.delete_stream()
        log.close()


def on_loop(log: JetStreamEventLog, make: Any) -> Any:
    """Run ``make(nc, js)`` on the log's own connection (server-side inspection)."""

    async def run() -> Any:
        nc, js = await log._connected()
        return await make(nc, js)

    return log._run(run(), 5.0)


def test_the_stream_is_laid_out_as_documented(log: JetStreamEventLog) -> None:
    log.publish(event(1, campaign_id=6))
    log.publish(event(1, campaign_id=6))
    log.consumer("agg", [2], ack_wait_s=7).close()

    async def inspect(nc: Any, js: Any) -> Any:
        info = await js.stream_info(log.stream)
        stored = await js.get_msg(log.stream, 1)
        consumer = await js.consumer_info(log.stream, consumer_durable("agg", 2))
        return info, stored, consumer

    info, stored, consumer = on_loop(log, inspect)
    assert info.config.subjects == [f"{log.subject(0).rsplit('.', 1)[0]}.*"]
    assert StorageType(info.config.storage) is StorageType.FILE
    assert info.config.duplicate_window == 7_200
    assert info.state.messages == 1
    assert stored.subject == log.subject(2)  # campaign 6 mod 4
    assert stored.headers["Nats-Msg-Id"] == "imp1:click"
    assert consumer.config.filter_subject == log.subject(2)
    assert AckPolicy(consumer.config.ack_policy) is AckPolicy.EXPLICIT
    assert consumer.config.ack_wait == 7


@pytest.mark.slow
def test_an_undecodable_message_is_terminated_and_counted(log: JetStreamEventLog) -> None:
    async def put_junk(nc: Any, js: Any) -> None:
        await js.publish(log.subject(1), b"not an event", stream=log.stream)

    on_loop(log, put_junk)
    log.publish(event(2, campaign_id=1))
    consumer = log.consumer("agg", ack_wait_s=1.0)
    before = REGISTRY.get_sample_value("adfunnel_events_malformed_total") or 0.0
    got = consumer.fetch(10, 3.0)
    assert [d.event.msg_id for d in got] == ["imp2:click"]
    assert consumer.malformed == 1
    assert REGISTRY.get_sample_value("adfunnel_events_malformed_total") == before + 1
    consumer.ack(got)
    time.sleep(1.3)
    assert consumer.fetch(10, 0.3) == []  # terminated: never again
    assert consumer.malformed == 1


def test_a_stream_with_other_subjects_is_a_configuration_error(
    nats_url: str, log: JetStreamEventLog
) -> None:
    with pytest.raises(EventLogError) as caught:
        JetStreamEventLog(nats_url, stream=log.stream, subject_prefix="other.prefix")
    assert not isinstance(caught.value, EventLogUnavailable)


def test_a_closed_reader_hands_back_what_it_held(log: JetStreamEventLog) -> None:
    """A fetch that returned at its first event leaves short lingering pulls on the other
    partitions, which can still catch events; closing the reader hands those back, so
    the next reader gets them at once rather than after ack_wait (60 s here)."""
    first = log.consumer("agg", ack_wait_s=60)
    threading.Timer(0.1, lambda: log.publish(event(0, campaign_id=0))).start()
    (woke,) = first.fetch(1, 5.0)
    assert woke.event.msg_id == "imp0:click"
    first.ack([woke])
    log.publish_many([event(n, campaign_id=n) for n in range(1, 4)])  # partitions 1-3
    time.sleep(0.1)
    held = len(first._buffer)  # caught by the lingering pulls, if still open
    first.close()
    successor = log.consumer("agg", ack_wait_s=60)
    got: list[Any] = []
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        got += successor.fetch(3, 0.5)
    assert sorted(d.event.msg_id for d in got) == ["imp1:click", "imp2:click", "imp3:click"]
    assert sum(d.attempt == 2 for d in got) == held  # handed back, delivered again


def test_publish_many_of_nothing_does_nothing(log: JetStreamEventLog) -> None:
    log.publish_many([])
    assert log.last_seq() == 0


def test_arguments_are_checked(nats_url: str) -> None:
    for kwargs in ({"stream": "has.dot"}, {"subject_prefix": "a.*"}, {"partitions": 0},
                   {"timeout_s": 0}, {"max_age_s": -1}):
        with pytest.raises(ValueError):
            JetStreamEventLog(nats_url, **kwargs)  # type: ignore[arg-type]


# --- a server that stops and comes back --------------------------------------------------------


def _nats_server() -> str | None:
    return shutil.which("nats-server") or next(
        (p for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server") if os.path.exists(p)),
        None,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """A nats-server with JetStream on its own port and store directory."""

    def __init__(self, binary: str, store: Path) -> None:
        self.binary, self.store, self.port = binary, store, _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port),
             "--store_dir", str(self.store)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as c:
                    if c.recv(4) == b"INFO":
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nats-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self.proc = None


@pytest.fixture
def private_server(tmp_path: Path, nats_url: str) -> Iterator[PrivateServer]:
    binary = _nats_server()
    if binary is None:
        if os.environ.get("ADFUNNEL_REQUIRE_SERVICES"):
            pytest.fail("nats-server is not installed")
        pytest.skip("nats-server is not installed")
    server = PrivateServer(binary, tmp_path / "jetstream")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def until(call: Any, seconds: float) -> Any:
    """``call()``'s result once it stops raising EventLogUnavailable."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except EventLogUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.slow
def test_a_stopped_server_fails_calls_at_once_and_a_restarted_one_serves_again(
    private_server: PrivateServer,
) -> None:
    log = JetStreamEventLog(private_server.url, partitions=2, timeout_s=3.0,
                            reconnect_wait_s=0.2)
    try:
        log.publish(event(1, campaign_id=0))
        reader = log.consumer("agg", ack_wait_s=2.0)
        got = reader.fetch(10, 3.0)
        assert [d.event.msg_id for d in got] == ["imp1:click"]
        reader.ack(got)

        private_server.stop()
        time.sleep(0.3)
        for call in (lambda: log.publish(event(2, campaign_id=1)),
                     lambda: reader.fetch(10, 1.0)):
            started = time.monotonic()
            with pytest.raises(EventLogUnavailable):
                call()
            assert time.monotonic() - started < 1.5

        private_server.start()  # same store: the stream and the consumer are still there
        until(lambda: log.publish(event(2, campaign_id=1)), 15)
        log.publish(event(1, campaign_id=0))  # a retry of an old one: dropped
        got = until(lambda: reader.fetch(10, 3.0), 15)
        assert [d.event.msg_id for d in got] == ["imp2:click"]
        reader.ack(got)
        assert log.last_seq() == 2
    finally:
        log.close()


def test_a_log_started_while_the_server_is_down_connects_later(
    private_server: PrivateServer,
) -> None:
    private_server.stop()
    started = time.monotonic()
    log = JetStreamEventLog(private_server.url, timeout_s=3.0, reconnect_wait_s=0.2)
    assert time.monotonic() - started < 2.0
    try:
        with pytest.raises(EventLogUnavailable):
            log.publish(event(1))
        private_server.start()
        until(lambda: log.publish(event(1)), 15)
        assert log.last_seq() == 1
    finally:
        log.close()


def test_event_loop_is_private(log: JetStreamEventLog) -> None:
    """The log's loop runs in its own daemon thread; the caller's thread has none."""
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    assert log._thread.daemon and log._thread.is_alive()


@pytest.mark.parametrize("field,value", [("occurred_at", 1e20),
                                          ("served_at", 2**63 - 1)])
def test_an_event_with_a_time_no_date_holds_is_terminated_not_billed_forever(
    log: JetStreamEventLog, field: str, value: float
) -> None:
    """A time inside the wire's number range but past any calendar date (year > 9999)
    used to decode, then raise in the aggregator on every retry of its batch: the
    partition's later events never billed. It is malformed: terminated and counted."""
    wire = bytearray(encode(event(0, campaign_id=1)))
    wire = wire.replace(f'"{field}":'.encode(), f'"{field}":{value!r},"_old":'.encode())
    assert b"_old" in wire

    async def put_poison(nc: Any, js: Any) -> None:
        await js.publish(log.subject(1), bytes(wire), stream=log.stream)

    on_loop(log, put_poison)
    log.publish(event(1, campaign_id=1))
    cpc = Campaign(id=1, advertiser_id=1, name="c1", objective=Objective.CLICKS,
                   bid_type=BidType.CPC, bid_micros=5_000_000, daily_budget_micros=10**12,
                   time_zone="UTC", flight_start=date(2026, 1, 1))
    ledger = MemoryLedger()
    consumer = log.consumer("agg", ack_wait_s=1.0)
    agg = Aggregator(consumer, ledger, {1: cpc}.get, LocalSpendGate())
    for _ in range(3):
        with contextlib.suppress(Exception):  # the old code raised on every try
            agg.run_once(10, 1.0)
    assert consumer.malformed == 1
    assert agg.outcomes["held"] == 1  # the valid click behind it: recorded (no impression)
