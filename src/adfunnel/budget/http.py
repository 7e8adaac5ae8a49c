"""HTTP transport of the budget & pacing service (a thin, swappable layer).

Server: a Starlette app exposing one :class:`~adfunnel.budget.service.BudgetService`
shard (``adfunnel budget-service`` runs it under uvicorn):

- ``POST /v1/report``: a JSON :class:`~adfunnel.budget.protocol.Report` -> ``Reply``;
- ``POST /v1/billed``: a JSON list of ``BilledUpdate`` -> ``{"applied": n}``;
- ``POST /v1/step``: run one control step now (the process normally runs its own
  loop, see :func:`control_loop`);
- ``GET /healthz``: ``{"ok": true, "shard": n}``.

Client: :class:`HttpReportTransport`, the ``ReportTransport`` of an ad server's
``BudgetClient`` over httpx (one base URL per shard). Failures never raise into the
caller: the entries stay pending and the client fails closed after 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Sequence

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.budget.protocol import BilledUpdate, Reply, Report
from adfunnel.budget.service import BudgetService

_report_decoder = msgspec.json.Decoder(Report)
_billed_decoder = msgspec.json.Decoder(list[BilledUpdate])
_reply_decoder = msgspec.json.Decoder(Reply)


def create_app(service: BudgetService, *, control_loop_s: float | None = None,
               lock: threading.Lock | None = None) -> Starlette:
    """The Starlette app of one shard. With ``control_loop_s`` the app runs
    ``service.step()`` every that many seconds while it is up. ``lock`` serialises
    every use of ``service`` (pass the one other threads of the process use too)."""
    lock = lock or threading.Lock()

    async def report(request: Request) -> Response:
        try:
            rep = _report_decoder.decode(await request.body())
        except msgspec.DecodeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        if rep.shard != service.shard:
            return JSONResponse({"error": f"this is shard {service.shard}"}, status_code=409)
        with lock:
            reply = service.handle_report(rep)
        return Response(msgspec.json.encode(reply), media_type="application/json")

    async def billed(request: Request) -> Response:
        try:
            ups = _billed_decoder.decode(await request.body())
        except msgspec.DecodeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        with lock:
            for u in ups:
                service.record_billed(u)
        return JSONResponse({"applied": len(ups)})

    async def step(request: Request) -> Response:
        with lock:
            service.step()
        return JSONResponse({"ok": True})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "shard": service.shard, "shards": service.shards})

    task: list[asyncio.Task[None]] = []

    async def loop() -> None:
        assert control_loop_s is not None
        while True:
            await asyncio.sleep(control_loop_s)
            with lock:
                service.step()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if control_loop_s:
            task.append(asyncio.create_task(loop()))
        yield
        for t in task:
            t.cancel()

    return Starlette(
        routes=[
            Route("/v1/report", report, methods=["POST"]),
            Route("/v1/billed", billed, methods=["POST"]),
            Route("/v1/step", step, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


class HttpReportTransport:
    """``ReportTransport`` over HTTP: ``base_urls[shard]`` serves that shard.

    ``send_report`` posts synchronously (call ``BudgetClient.report`` from a background
    thread once a second) and calls ``on_reply`` on success; errors are counted in
    ``failures`` and otherwise ignored.
    """

    def __init__(self, base_urls: Sequence[str], *, timeout_s: float = 0.5,
                 client: httpx.Client | None = None) -> None:
        self.base_urls = list(base_urls)
        self._http = client or httpx.Client(timeout=timeout_s)
        self.failures = 0

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        url = self.base_urls[report.shard] + "/v1/report"
        try:
            r = self._http.post(url, content=msgspec.json.encode(report),
                                headers={"content-type": "application/json"})
            r.raise_for_status()
            reply = _reply_decoder.decode(r.content)
        except (httpx.HTTPError, msgspec.DecodeError):
            self.failures += 1
            return
        on_reply(reply)

    def send_billed(self, shard: int, updates: Sequence[BilledUpdate]) -> None:
        """Post billed totals to a shard (the aggregator's side). Raises httpx.HTTPError."""
        r = self._http.post(self.base_urls[shard] + "/v1/billed",
                            content=msgspec.json.encode(list(updates)),
                            headers={"content-type": "application/json"})
        r.raise_for_status()

    def close(self) -> None:
        self._http.close()
