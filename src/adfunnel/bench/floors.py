"""What the NATS client alone costs, per event: the floors under the event plane's figures.

``adfunnel bench events`` reports these beside its targets, measured in the same run on
the same server: the CPU a Python process spends in nats-py (2.x, asyncio, uvloop where
the tracker uses it) to do only the messaging part of its job, nothing of ours.

- :func:`publish_floor`: publish ``n`` events of the real wire form (with their
  ``Nats-Msg-Id`` header) through a :class:`~adfunnel.events.jetstream_async.LoopPublisher`
  from ``concurrency`` coroutines, each awaiting the stream's answer: what the tracker's
  fast path costs a beacon before any HTTP, token or rule.
- :func:`receive_floor`: pull ``n`` stored messages of a stream through one plain
  nats-py subscription (pull requests to every partition's durable at once, no decode,
  no acknowledgement): what an aggregator pays per event before decoding it.

Both return CPU microseconds per event of this process (``time.process_time``) and the
events per wall second; times are network time, never domain time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

import uvloop
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from adfunnel.events.jetstream_log import JetStreamEventLog
from adfunnel.events.model import Event


def publish_floor(log: JetStreamEventLog, events: Sequence[Event], concurrency: int = 64
                  ) -> dict[str, Any]:
    """Publish ``events`` into ``log``'s stream from a uvloop loop (module docstring);
    ``{"events", "cpu_us_per_event", "events_per_s"}``.

    Raises:
        RuntimeError: the loop publisher did not connect within 10 s.
    """
    async def run() -> tuple[float, float]:
        fast = log.loop_publisher()
        fast.start()
        for _ in range(1_000):
            if fast.ready:
                break
            await asyncio.sleep(0.01)
        else:
            raise RuntimeError("the loop publisher did not connect")
        todo = iter(events)

        async def worker() -> None:
            for event in todo:
                await fast.publish(event)

        try:
            cpu0, t0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.process_time() - cpu0, time.perf_counter() - t0
        finally:
            await fast.aclose()

    cpu, wall = uvloop.run(run())
    return _figures(len(events), cpu, wall)


def receive_floor(url: str, stream: str, subjects: Sequence[str], n: int,
                  timeout_s: float = 60.0) -> dict[str, Any]:
    """Receive ``n`` messages of ``stream`` (over ``subjects``, one durable each, made
    and deleted here) on one nats-py connection (module docstring);
    ``{"events", "cpu_us_per_event", "events_per_s"}`` (``events``: how many came
    within ``timeout_s``)."""
    async def run() -> tuple[int, float, float]:
        nc = NatsClient()
        await nc.connect(servers=[url])
        js = nc.jetstream()
        tag = uuid.uuid4().hex[:8]
        durables = [f"floor_{tag}_{i}" for i in range(len(subjects))]
        for durable, subject in zip(durables, subjects, strict=True):
            await js.add_consumer(stream, ConsumerConfig(
                durable_name=durable, ack_policy=AckPolicy.NONE, filter_subject=subject))
        got = 0
        done = asyncio.Event()

        async def on_message(msg: Msg) -> None:
            nonlocal got
            if not msg.data:  # a status (404: nothing more on that partition)
                return
            got += 1
            if got >= n:
                done.set()

        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=on_message)
        try:
            cpu0, t0 = time.process_time(), time.perf_counter()
            for durable in durables:
                await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
                                 json.dumps({"batch": n, "no_wait": True}).encode(),
                                 reply=inbox)
            with contextlib.suppress(TimeoutError):  # fewer came: counted as they are
                await asyncio.wait_for(done.wait(), timeout_s)
            return got, time.process_time() - cpu0, time.perf_counter() - t0
        finally:
            for durable in durables:
                await js.delete_consumer(stream, durable)
            await nc.close()

    got, cpu, wall = asyncio.run(run())
    return _figures(got, cpu, wall)


def _figures(n: int, cpu_s: float, wall_s: float) -> dict[str, Any]:
    return {"events": n,
            "cpu_us_per_event": round(cpu_s / n * 1e6, 2) if n else None,
            "events_per_s": round(n / wall_s, 1) if n and wall_s > 0 else None}
