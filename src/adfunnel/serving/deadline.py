"""A request's deadline runs from its arrival; work that cannot meet it is shed.

DESIGN.md §The funnel, step 7: the deadline counts queueing, so the arrival instant is
stamped by the outermost ASGI layer (:class:`ArrivalStamp`), and decisions wait in one
explicit FIFO queue (:class:`DecisionQueue`) whose consumer yields to the event loop
between short turns, so that new requests keep being read and stamped. Deadlines are
:func:`monotonic_ms` instants: elapsed server time, never domain time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

from adfunnel.clock import monotonic_ms
from adfunnel.serving.decision import Decides, Decision
from adfunnel.serving.dry_run import decide_dry
from adfunnel.serving.request import SelectRequest

#: Scope key of the arrival instant (monotonic ms), set by :class:`ArrivalStamp`.
ARRIVAL_KEY = "adfunnel.arrival_ms"
SELECT_PATH = "/v1/ads:select"

# Why a request was shed (the label of the shed counter).
SHED_QUEUE = "queue"  # the queue ahead could not drain before its deadline: never queued
SHED_EXPIRED = "expired"  # its deadline passed while it waited for the worker


class ArrivalStamp:
    """Outermost ASGI layer: stamps each HTTP request's arrival (monotonic ms) and hands
    the hot routes — ``routes``, keyed by ``(method, path)``, bare ASGI callables such as
    ``POST /v1/ads:select`` — straight to their handler, so they skip the advertiser
    API's framework layers, middleware and router; everything else goes to ``app``.

    Measured in process (CPU per request, ASGI called directly): a bare 204 costs ~3 µs
    from here and ~14 µs when it first passes FastAPI's own layers (``FastAPI.__call__``,
    error middleware); a route reached through FastAPI's router, like ``/healthz``,
    ~100-150 µs. So this layer sits outside the FastAPI app (:func:`adfunnel.runtime.asgi.
    build_app`), and the hot routes never enter it. ``select`` is the older spelling of
    ``routes={("POST", SELECT_PATH): select}``.
    """

    def __init__(self, app: Any, select: Any = None,
                 routes: dict[tuple[str, str], Any] | None = None) -> None:
        self.app = app
        self.hot = dict(routes or {})
        if select is not None:
            self.hot[("POST", SELECT_PATH)] = select

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope[ARRIVAL_KEY] = monotonic_ms()
            handler = self.hot.get((scope["method"], scope["path"]))
            if handler is not None:
                await handler(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def __getattr__(self, name: str) -> Any:
        """The wrapped app's attributes (``routes``, ``state``, … of a FastAPI app)."""
        if name == "app":  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.app, name)


def arrival_ms(scope: dict[str, Any]) -> float:
    """The request's arrival instant (monotonic ms); now when no stamp is present."""
    stamped = scope.get(ARRIVAL_KEY)
    return monotonic_ms() if stamped is None else float(stamped)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A decision made in time to start, or the reason it was shed (decision is None)."""

    decision: Decision | None
    shed: str | None = None


class DecisionQueue:
    """Runs decisions one at a time, in arrival order (FIFO), on the event loop.

    Requests wait in an explicit queue; one consumer task decides for at most
    ``turn_ms`` (2 ms) at a time, then yields, so the loop reads, stamps and parses new
    requests between turns (a request's arrival stamp is at most one turn late). A
    request is shed, never decided, when its deadline has passed by the time the
    consumer reaches it (``expired``), or when on arrival the queue ahead of it, at the
    recent decision time, cannot drain before its deadline (``queue``: answered at once
    rather than after a wait that would end in a shed anyway). A request that finds the
    queue empty is always queued: were the estimate inflated (a decision that once took
    seconds), shedding on it alone would shed every request and never measure again.

    Measured against one dedicated decision thread (``adfunnel bench overload``, 1,000
    clients, 2 cores): the thread loses to the GIL — every I/O callback of the loop
    waits for the decision thread to give the GIL back — at about 2,600 answers/s and a
    client p99 ~900 ms, where this queue answers about 6,800/s with a p99 ~400 ms.

    ``service_ms`` is the initial estimate of one decision's duration (ms); it follows
    measured durations as an exponentially weighted mean (weight ``alpha``).
    """

    def __init__(self, decider: Decides, *, service_ms: float = 0.5, alpha: float = 0.05,
                 turn_ms: float = 2.0) -> None:
        self.decider = decider
        self.service_ms = service_ms
        self.alpha = alpha
        self.turn_ms = turn_ms
        self._queue: deque[_Job] = deque()
        self._consumer: asyncio.Task[None] | None = None

    def queued(self) -> int:
        """Requests waiting for a decision."""
        return len(self._queue)

    async def decide(self, req: SelectRequest, request_id: str, deadline_ms: float,
                     dry_run: bool = False) -> Outcome:
        """Decide ``req`` before ``deadline_ms`` (monotonic ms), or shed it. ``dry_run``:
        decided writing nothing (:func:`~adfunnel.serving.dry_run.decide_dry`)."""
        waiting = len(self._queue)
        if waiting and monotonic_ms() + (waiting + 1) * self.service_ms > deadline_ms:
            return Outcome(None, SHED_QUEUE)
        loop = asyncio.get_running_loop()
        job = _Job(req, request_id, deadline_ms, loop.create_future(), dry_run)
        self._queue.append(job)
        if self._consumer is None:
            self._consumer = loop.create_task(self._consume())
        return await job.done

    async def _consume(self) -> None:
        try:
            while self._queue:
                turn_ends = monotonic_ms() + self.turn_ms
                while self._queue and monotonic_ms() < turn_ends:
                    job = self._queue.popleft()
                    if job.done.done():  # its client may have gone
                        continue
                    try:
                        job.done.set_result(self._run(job))
                    except Exception as exc:  # that request fails (500), the queue goes on
                        job.done.set_exception(exc)
                await asyncio.sleep(0)  # let the loop read and stamp new requests
        finally:
            self._consumer = None

    def _run(self, job: _Job) -> Outcome:
        start = monotonic_ms()
        if start >= job.deadline_ms:
            return Outcome(None, SHED_EXPIRED)
        if job.dry_run:
            decision = decide_dry(self.decider, job.req, job.request_id, job.deadline_ms)
        else:
            decision = self.decider.decide(job.req, job.request_id, job.deadline_ms)
        self.service_ms += self.alpha * ((monotonic_ms() - start) - self.service_ms)
        return Outcome(decision)


@dataclass(slots=True)
class _Job:
    req: SelectRequest
    request_id: str
    deadline_ms: float
    done: asyncio.Future[Outcome]
    dry_run: bool = False
