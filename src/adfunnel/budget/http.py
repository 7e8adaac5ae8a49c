"""HTTP transport of the budget & pacing service (a thin, swappable layer).

Server: a Starlette app exposing one :class:`~adfunnel.budget.service.BudgetService`
shard (``adfunnel budget-service`` runs it under uvicorn):

- ``POST /v1/report``: a JSON :class:`~adfunnel.budget.protocol.Report` -> ``Reply``;
- ``POST /v1/billed``: a JSON list of ``BilledUpdate`` -> ``{"applied": n}`` (a long
  list is applied in bulk, ``BudgetService.record_billed_bulk``);
- ``POST /v1/step``: run one control step now (``adfunnel budget-service`` runs them
  on its domain-time ticker, ``adfunnel.budget.process``);
- ``GET /healthz``: ``{"ok": true, "shard": n}``.

Who may call: every route but ``/healthz`` (``/metrics`` and the other routes
``adfunnel.budget.process`` adds included) needs the deployment's internal token
(``Authorization: Bearer <ADFUNNEL_INTERNAL_TOKEN>``, :mod:`adfunnel.internal_auth`:
401 without, 403 with another); bodies over ``max_body_bytes`` answer 413 JSON before
they are parsed (:mod:`adfunnel.body_limit`).

Client: :class:`HttpReportTransport`, the ``ReportTransport`` of an ad server's
``BudgetClient`` over httpx (per shard a primary URL and optional standbys, written
``primary|standby``), sending the internal token. Failures never raise into the
caller: the entries stay pending and the client fails closed after 60 s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import date

import httpx
import msgspec
import numpy as np
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.body_limit import BodyLimit
from adfunnel.budget.protocol import BilledColumns, BilledUpdate, Reply, Report
from adfunnel.budget.service import BudgetService
from adfunnel.internal_auth import InternalAuth, internal_headers

_log = logging.getLogger(__name__)

_report_decoder = msgspec.json.Decoder(Report)
_billed_decoder = msgspec.json.Decoder(list[BilledUpdate])
_reply_decoder = msgspec.json.Decoder(Reply)


#: A billed post of at least this many updates is applied in bulk (columns).
BULK_BILLED = 64
#: Largest request body a shard reads, bytes: a report of ~100,000 campaign entries
#: (a fleet's busiest second) fits; past it 413 before any parsing.
MAX_BODY_BYTES = 16 << 20
#: Paths open without the internal token: the liveness probe only (``/metrics`` needs
#: it, as an ad server's ``/metrics`` needs an admin key: it shows spend per campaign).
OPEN_PATHS = ("/healthz",)


def billed_columns(updates: Sequence[BilledUpdate]) -> BilledColumns:
    """``BilledUpdate`` s as :class:`BilledColumns` (days as ordinals)."""
    ords: dict[str, int] = {}

    def ordinal(day: str) -> int:
        o = ords.get(day)
        if o is None:
            o = ords[day] = date.fromisoformat(day).toordinal()
        return o

    n = len(updates)

    def col(values: Iterable[float], dtype: type = np.int64) -> np.ndarray:
        return np.fromiter(values, dtype=dtype, count=n)

    return BilledColumns(
        col(u.campaign_id for u in updates), col(ordinal(u.day) for u in updates),
        col(u.billed_micros for u in updates), col((u.complete_before for u in updates),
                                                   np.float64),
        col(u.settled_after_micros for u in updates),
        col(u.lifetime_billed_before_micros for u in updates))


def create_app(service: BudgetService, *, token: str, lock: threading.Lock | None = None,
               max_body_bytes: int = MAX_BODY_BYTES) -> Starlette:
    """The Starlette app of one shard. ``token``: the internal token every caller sends
    (module docstring); ``lock`` serialises every use of ``service`` (pass the one other
    threads of the process use too); ``max_body_bytes``: the body limit, bytes."""
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
        cols = billed_columns(ups) if len(ups) >= BULK_BILLED else None
        with lock:
            if cols is not None:
                service.record_billed_bulk(cols)
            else:
                for u in ups:
                    service.record_billed(u)
        return JSONResponse({"applied": len(ups)})

    async def step(request: Request) -> Response:
        with lock:
            service.step()
        return JSONResponse({"ok": True})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "shard": service.shard, "shards": service.shards})

    return Starlette(
        routes=[
            Route("/v1/report", report, methods=["POST"]),
            Route("/v1/billed", billed, methods=["POST"]),
            Route("/v1/step", step, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        # the token before the body: a stranger's body is never read
        middleware=[Middleware(InternalAuth, token=token, open_paths=OPEN_PATHS),
                    Middleware(BodyLimit, max_bytes=max_body_bytes)],
    )


class HttpReportTransport:
    """``ReportTransport`` over HTTP: ``base_urls[shard]`` serves that shard.

    A shard's entry may list standbys after its primary, ``http://a:8090|http://b:8090``:
    a failed post goes to the next URL, which stays in use until it fails in turn (a
    standby that takes over is a new instance: the client re-sends to it, see
    ``adfunnel.budget.client``). ``send_report`` posts synchronously (call
    ``BudgetClient.report`` from a background thread once a second) and calls
    ``on_reply`` on success; errors are counted in ``failures`` and otherwise ignored.
    """

    def __init__(self, base_urls: Sequence[str], *, token: str, timeout_s: float = 0.5,
                 client: httpx.Client | None = None) -> None:
        """``token``: the deployment's internal token, sent with every post."""
        self.candidates = [[u.rstrip("/") for u in entry.split("|") if u] for entry in base_urls]
        self._headers = {"content-type": "application/json", **internal_headers(token)}
        self._active = [0] * len(self.candidates)
        self._http = client or httpx.Client(timeout=timeout_s)
        self.failures = 0
        #: Per shard: its last report found no URL answering (logged once per outage).
        self._down = [False] * len(self.candidates)

    @property
    def base_urls(self) -> list[str]:
        """The URL in use for each shard."""
        return [c[i] for c, i in zip(self.candidates, self._active, strict=True)]

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None:
        urls = self.candidates[report.shard]
        body = msgspec.json.encode(report)
        error: Exception | None = None
        for attempt in range(len(urls)):
            i = (self._active[report.shard] + attempt) % len(urls)
            try:
                r = self._http.post(urls[i] + "/v1/report", content=body,
                                    headers=self._headers)
                r.raise_for_status()
                reply = _reply_decoder.decode(r.content)
            except (httpx.HTTPError, msgspec.DecodeError) as exc:
                self.failures += 1
                error = exc
                continue
            self._active[report.shard] = i
            self._note_answer(report.shard, urls[i])
            on_reply(reply)
            return
        if urls and not self._down[report.shard]:
            self._down[report.shard] = True
            _log.warning("budget service shard %d does not answer at %s (%s): its campaigns "
                         "spend only the slices held, and nothing once its last reply is "
                         "older than the fail-closed limit", report.shard, "|".join(urls),
                         _one_line(error))

    def _note_answer(self, shard: int, url: str) -> None:
        """A shard answered: say so once after an outage was logged."""
        if self._down[shard]:
            self._down[shard] = False
            _log.warning("budget service shard %d answers again at %s", shard, url)

    def send_billed(self, shard: int, updates: Sequence[BilledUpdate]) -> None:
        """Post billed totals to a shard (the aggregator's side). Raises httpx.HTTPError."""
        r = self._http.post(self.base_urls[shard] + "/v1/billed",
                            content=msgspec.json.encode(list(updates)),
                            headers=self._headers)
        r.raise_for_status()

    def close(self) -> None:
        self._http.close()


def _one_line(exc: BaseException | None) -> str:
    """An error's type and first line (httpx's messages can span lines)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
