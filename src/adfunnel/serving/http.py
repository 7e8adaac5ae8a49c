"""HTTP endpoints of the serving plane: lean handlers (the hot path).

- ``POST /v1/ads:select`` → 200 with one ad per filled slot, or 204 with
  ``x-adfunnel-outcome: no_fill | shed | late``; ``x-request-id`` names the decision
  (the request's ``request_id`` when sane);
- ``GET /v1/bench/noop`` → 204 at once, no work: the bare-route baseline of
  ``adfunnel bench http`` (always on; it reads nothing and changes nothing);
- ``GET /i?t=TOKEN`` → 204 (impression beacon);
- ``GET /c?t=TOKEN`` → 302 to the URI form of the ad's own landing URL (IDNA host,
  UTF-8 percent-encoding; :mod:`adfunnel.campaigns.landing`);
- ``GET /v1/decisions/{request_id}`` → the explain record of a recent decision: the
  first one named so, unless an explain request took the name since (the caller chooses
  the name, so no other select replaces a record: :mod:`.decision_log`).

Who may call: the select route is open (anyone with a page may ask for an ad), but
``"explain": true`` is the operator's: it lists every competing ad and its state and
takes the slow reference path. It needs an admin key (``Authorization: Bearer <key>``);
without one the request is refused, 401 (no key) or 403 (any other key), naming
``explain``, before anything is decided.

Errors are JSON ``{"error": ..., "fields": [{"field", "problem"}]}`` with a 4xx status.

From a page (:mod:`adfunnel.tracking.cors`): a browser's cross-origin select is served
only for an ``Origin`` among its placement's ``allowed_origins`` — its answer then
carries ``Access-Control-Allow-Origin`` — and is otherwise refused, 403
``origin_not_allowed`` naming ``Origin``, before anything is decided. The server
derives the country and device facts a browser cannot send (:mod:`.derived`); with
``public_base_url`` the tracking URLs and an uploaded image's URL are absolute.

A select's deadline runs from its arrival (stamped by :class:`ArrivalStamp`); the
decision waits its turn in the :class:`DecisionQueue`, and only an answer that is still
in time when it is about to be sent commits spend and the decision log. Late or shed → 204.

The select and no-op routes are bare ASGI callables (:meth:`ServingEndpoints.hot_routes`)
that :class:`ArrivalStamp` calls itself, outside every framework layer; the other routes
are Starlette endpoints behind the advertiser API's app.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Collection
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adfunnel.clock import monotonic_ms
from adfunnel.events.served_log import ServedLog
from adfunnel.http_errors import error_response as error_response
from adfunnel.observability.request_log import REQUEST_ID_KEY, name_request
from adfunnel.serving.answer import with_creative
from adfunnel.serving.commit import SHED_COUNTERS as SHED_COUNTERS
from adfunnel.serving.commit import SHED_REQUESTS as SHED_REQUESTS
from adfunnel.serving.commit import DecisionRunner
from adfunnel.serving.deadline import SELECT_PATH, DecisionQueue, arrival_ms
from adfunnel.serving.decision import Decision
from adfunnel.serving.decision_log import DecisionLog
from adfunnel.serving.placement_traffic import PlacementCounter
from adfunnel.serving.request import (
    MAX_SLOTS,
    AdOut,
    RejectionOut,
    RequestError,
    SelectRequest,
    SelectResponse,
    decode_request,
    encode,
)
from adfunnel.tracking.cors import allow_origin_headers, cross_origin, origin_refused

SELECT_LATENCY = Histogram(
    "adfunnel_select_seconds", "Ad request latency inside the server, from arrival",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
)
DEADLINE_MISS_RATE = Gauge(
    "adfunnel_deadline_miss_rate", "deadline_miss_rate: (late + shed) / ad requests, over "
    "the last 1,000 ad requests of this process",
)
SELECT_OUTCOMES = Counter("adfunnel_decisions", "decisions_total: ad requests by outcome "
                          "(filled, no_fill, shed, late, not_ready)", ["outcome"])
REJECTED_REQUESTS = Counter("adfunnel_bad_requests_total", "Refused requests", ["endpoint"])
#: The bare route of ``adfunnel bench http``'s baseline (always on: 204, no work).
NOOP_PATH = "/v1/bench/noop"
# the labelled children, bound once (``labels()`` takes a lock and a dict lookup per call)
OUTCOME_COUNTERS = {o: SELECT_OUTCOMES.labels(o)
                    for o in ("filled", "no_fill", "shed", "late", "not_ready")}

#: Response header of a 204 select naming why no ad came back.
OUTCOME_HEADER = b"x-adfunnel-outcome"
_OUTCOME_VALUES = {o: o.encode() for o in ("no_fill", "shed", "late")}
_JSON = (b"content-type", b"application/json")
_NOOP_START = {"type": "http.response.start", "status": 204, "headers": []}
_EMPTY_BODY = {"type": "http.response.body", "body": b""}

#: Scope key of an allowed cross-origin select's ``Origin`` (its answer's CORS headers).
CORS_ORIGIN_KEY = "adfunnel.cors_origin"
#: A select's answer: HTTP status, raw header pairs, body.
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


class ServingEndpoints:
    """Binds the decider and decision log to Starlette routes (the beacons are the
    tracker's: :mod:`adfunnel.tracking.http`)."""

    def __init__(
        self,
        queue: DecisionQueue,
        log: DecisionLog,
        *,
        default_deadline_ms: int,
        max_body_bytes: int,
        ready: Callable[[], bool] | None = None,
        served: ServedLog | None = None,
        is_admin: Callable[[str | None], bool] | None = None,
        max_slots: int = MAX_SLOTS,
        derive: Callable[[SelectRequest, dict[str, Any]], None] | None = None,
        public_base_url: str | None = None,
        origins: Callable[[str], Collection[str]] | None = None,
        sample: Callable[[SelectRequest], None] | None = None,
        placements: PlacementCounter | None = None,
    ) -> None:
        # takes every valid request for the availability forecast's sample (O(1), no I/O:
        # adfunnel.forecast.sample); None: not sampled
        self.sample = sample
        # requests and filled slots per placement (the operator's placement report)
        self.placements = placements
        # a placement's allowed_origins (None: cross-origin selects are not checked)
        self.origins = origins
        # page facts: the request's limits, what is derived from its HTTP scope (country,
        # device: serving/derived.py), and the prefix that makes tracking URLs absolute
        self.max_slots = max_slots
        self.derive = derive
        self.url_prefix = public_base_url or ""
        self.queue = queue
        # whether an Authorization header value is an admin's (explain needs one); none
        # given: nobody may explain
        self.is_admin = is_admin or (lambda _: False)
        self.served = served  # the served log: every committed decision, off the path
        self.decider = queue.decider
        # request ids: a random per-process prefix and a counter (no syscall per request)
        self._id_prefix = uuid.uuid4().hex[:16]
        self._ids = itertools.count(1)
        self.log = log
        self.default_deadline_ms = default_deadline_ms
        self.max_body_bytes = max_body_bytes
        self.ready = ready or (lambda: True)
        # decide, commit in time, log: shared with POST /openrtb2/bid (serving/commit.py)
        self.runner = DecisionRunner(queue, log, served=served, placements=placements)
        self.answered = 0  # ad requests answered (filled, no fill, shed or late)
        self.filled = 0  # of which with an ad

    def routes(self) -> list[Route]:
        return [
            Route("/v1/ads:select", self.select, methods=["POST"]),
            Route(NOOP_PATH, self.noop, methods=["GET"]),
            Route("/v1/decisions/{request_id}", self.explain, methods=["GET"]),
        ]

    async def select_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """``POST /v1/ads:select`` as a bare ASGI app (the hot path of :class:`ArrivalStamp`):
        no Request or Response objects, the answer sent as two raw ASGI messages."""
        try:
            status, headers, body = await self._select(scope, receive)
        except ClientGone:
            return
        if CORS_ORIGIN_KEY in scope:
            headers = headers + allow_origin_headers(scope[CORS_ORIGIN_KEY])
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def select(self, request: Request) -> Response:
        """``select`` as a Starlette endpoint (when no :class:`ArrivalStamp` is in front)."""
        status, headers, body = await self._select(request.scope, request.receive)
        if CORS_ORIGIN_KEY in request.scope:
            headers = headers + allow_origin_headers(request.scope[CORS_ORIGIN_KEY])
        return RawResponse(status, headers, body)

    async def noop_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """``GET /v1/bench/noop``: 204 at once — the bare-route baseline of ``adfunnel bench
        http`` (the server's HTTP cost alone, measured in the same process and run)."""
        await send(_NOOP_START)
        await send(_EMPTY_BODY)

    async def _select(self, scope: dict[str, Any], receive: Any) -> Answer:
        start = arrival_ms(scope)
        if not self.ready():
            OUTCOME_COUNTERS["not_ready"].inc()
            return _error(503, "not_ready", [("server", "behind the change log")])
        body = await read_body(scope, receive, self.max_body_bytes)
        if body is None:
            REJECTED_REQUESTS.labels("select").inc()
            return _error(413, "too_large", [("body", f"over {self.max_body_bytes} bytes")])
        try:
            req = decode_request(body, self.max_slots)
        except RequestError as exc:
            REJECTED_REQUESTS.labels("select").inc()
            error = "malformed_json" if exc.status == 400 else "validation"
            return _error(exc.status, error, exc.fields)
        if req.explain:
            refused = self._explain_refused(scope)
            if refused is not None:
                REJECTED_REQUESTS.labels("select").inc()
                return refused
        origins = self.origins
        origin = cross_origin(scope) if origins is not None else None
        if origins is not None and origin is not None:
            if origin not in origins(req.placement.id):
                REJECTED_REQUESTS.labels("select").inc()
                r = origin_refused(origin, req.placement.id)
                return r.status_code, r.raw_headers, bytes(r.body)
            scope[CORS_ORIGIN_KEY] = origin  # the answer carries the CORS headers
        if self.derive is not None:
            self.derive(req, scope)
        if self.sample is not None:
            self.sample(req)
        deadline = start + (req.deadline_ms or self.default_deadline_ms)
        # the decision is named by the request's own id, else by the one its answer
        # carries (x-request-id, from RequestLog), so explain finds it by either
        if req.request_id:
            request_id = name_request(scope, req.request_id)
        else:
            request_id = scope.get(REQUEST_ID_KEY) or f"{self._id_prefix}-{next(self._ids):x}"
        committed = await self.runner.run(req, request_id, deadline)
        decision = committed.decision
        if decision is None:
            return self._no_ad(start, committed.outcome, request_id)
        if not decision.placed and not decision.house:
            return self._no_ad(start, "no_fill", request_id)
        self._observe(start, "filled")
        out = encode(self._response(decision, req.explain))
        return 200, [_JSON, (b"content-length", b"%d" % len(out))], out

    def _explain_refused(self, scope: dict[str, Any]) -> Answer | None:
        """401/403 naming ``explain`` unless the request carries an admin key."""
        header = next((v.decode("latin-1") for k, v in scope["headers"]
                       if k == b"authorization"), None)
        if self.is_admin(header):
            return None
        if not (header or "").strip():
            return _error(401, "unauthorized", [
                ("explain", "needs an admin key: send Authorization: Bearer <admin key>, "
                            "or leave explain out")])
        return _error(403, "forbidden", [("explain", "needs an admin key")])

    def _no_ad(self, start: float, outcome: str, request_id: str) -> Answer:
        """204 naming why no ad (``x-adfunnel-outcome``: no_fill, shed, late); the
        request id is added by :class:`~adfunnel.observability.request_log.RequestLog`."""
        self._observe(start, outcome)
        return 204, [(OUTCOME_HEADER, _OUTCOME_VALUES[outcome])], b""

    def fill_rate(self) -> float:
        """fill rate: ad requests answered with an ad / ad requests answered (0 before
        the first)."""
        return self.filled / self.answered if self.answered else 0.0

    def _observe(self, start: float, outcome: str) -> None:
        self.answered += 1
        if outcome == "filled":
            self.filled += 1
        OUTCOME_COUNTERS[outcome].inc()
        SELECT_LATENCY.observe((monotonic_ms() - start) / 1000.0)
        DEADLINE_MISS_RATE.set(self.log.miss_rate())

    def _response(self, d: Decision, explain: bool) -> SelectResponse:
        ads = [
            AdOut(
                slot_id=p.win.slot_id, ad_id=p.ad.id, campaign_id=p.campaign.id,
                creative_ref=p.ad.creative_ref, format=p.ad.format,
                width=p.ad.width, height=p.ad.height, price_micros=p.win.price_micros,
                billing_type=p.campaign.bid_type.value, token=p.token,
                impression_url=f"/i?t={p.token}", click_url=f"/c?t={p.token}",
                viewable_url=f"/vi?t={p.token}",
            )
            for p in d.placed
        ] + [h.ad_out() for h in d.house]  # house ads: price 0, never billed
        # winners with a creative of content carry its fields (adfunnel.serving.answer)
        ads[: len(d.placed)] = [with_creative(a, p.ad, self.url_prefix)
                                for a, p in zip(ads, d.placed, strict=False)]
        if self.url_prefix:  # public_base_url: absolute, for a tag on another origin
            for ad in ads:
                ad.impression_url = self.url_prefix + ad.impression_url
                ad.click_url = self.url_prefix + ad.click_url
                ad.viewable_url = self.url_prefix + ad.viewable_url
        rejections = (
            [RejectionOut(r.ad_id, r.campaign_id, r.reason, r.detail) for r in d.rejections]
            if explain else None
        )
        return SelectResponse(d.request_id, ads, d.index_version, late=d.late,
                              rejections=rejections,
                              tiers=d.slot_tiers() if explain else None,
                              shading=d.shading if explain and d.shading else None)

    async def noop(self, _: Request) -> Response:
        """``noop_asgi`` as a Starlette endpoint."""
        return Response(status_code=204)

    def hot_routes(self) -> dict[tuple[str, str], Any]:
        """The bare ASGI handlers :class:`ArrivalStamp` serves itself, by (method, path)."""
        return {("POST", SELECT_PATH): self.select_asgi, ("GET", NOOP_PATH): self.noop_asgi}

    def explain(self, request: Request) -> Response:
        record = self.log.explain(request.path_params["request_id"])
        if record is None:
            return error_response(404, "not_found", [("request_id", "no such recent decision")])
        return JSONResponse(record)


class ClientGone(Exception):
    """The client disconnected before its request body was read."""


async def read_body(scope: dict[str, Any], receive: Any, limit: int) -> bytes | None:
    """The request body from ASGI ``receive``, or None when it is larger than ``limit``
    bytes (by its declared ``content-length`` or as read).

    Raises:
        ClientGone: the client disconnected first.
    """
    for name, value in scope["headers"]:
        if name == b"content-length":
            if value.isdigit() and int(value) > limit:
                return None
            break
    body = b""
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        more = message.get("more_body", False)
    return body


class RawResponse(Response):
    """A response from a status, raw ASGI header pairs and a body (nothing re-encoded)."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status_code = status
        self.raw_headers = headers
        self.body = body
        self.background = None


def _error(status: int, error: str, fields: list[tuple[str, str]]) -> Answer:
    r = error_response(status, error, fields)
    return r.status_code, r.raw_headers, bytes(r.body)
