"""Request ids and the access log, as one pure ASGI middleware (:class:`RequestLog`).

Every HTTP answer carries ``x-request-id``: the request's own ``x-request-id`` when it
is sane (1-128 characters of ``A-Z a-z 0-9 . _ : -``), else one made here from a
random per-process prefix and a counter. A handler may name the request otherwise by
setting ``scope[REQUEST_ID_KEY]`` before it answers (the ad decision names it by its
decision's request id, so that ``GET /v1/decisions/{id}`` finds it).

With an access log, one line per request on logger ``adfunnel.access`` (INFO):
``method``, ``path`` (without the query string: tracking tokens stay out of logs),
``status`` (499 when the client left before an answer), ``latency_ms`` (monotonic,
from this layer's first sight of the request to the end of the answer) and
``request_id``; the line's time is the log record's own.

The tracker's beacons (:data:`BEACON_PATHS`) get no access line unless asked for
(setting ``access_log_beacons``): they are the feed's bulk, each is recorded in the
event log and counted in ``adfunnel_beacons_total``, and a line each cost the tracker
about a third of its throughput (one write to stderr per beacon, ``adfunnel bench
events``).

It wraps every route, the bare hot routes included (``POST /v1/ads:select``, ``GET /i``,
``/c``), so it is kept cheap: no Request objects, the header scan stops at the first
``x-request-id``, the id is a counter, and without an access log nothing is timed or
formatted. Cost measured with ``python -m benchmarks.http_bench``: see README.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
import uuid
from typing import Any

#: Scope key of the request id (str) while a request is handled.
REQUEST_ID_KEY = "adfunnel.request_id"
HEADER = b"x-request-id"
_SANE = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")
_SANE_TEXT = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
ACCESS_LOGGER = "adfunnel.access"
#: The tracker's beacon routes.
BEACON_PATHS = frozenset({"/i", "/vi", "/c", "/v"})
#: The status an access line gives a request whose client left before any answer.
CLIENT_GONE = 499


class RequestLog:
    """Outermost ASGI layer: request id on every answer, and an access line per request
    when ``access_log`` is on. Other attributes read through to the wrapped app (the
    FastAPI app's ``routes``, ``openapi`` …)."""

    def __init__(self, app: Any, *, access_log: bool = True,
                 quiet_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.log = logging.getLogger(ACCESS_LOGGER) if access_log else None
        #: paths answered with a request id but no access line (the beacons)
        self.quiet_paths = quiet_paths
        self._prefix = uuid.uuid4().hex[:12]
        self._ids = itertools.count(1)

    def new_id(self) -> str:
        """A request id unique in this process and, by its random prefix, across them."""
        return f"{self._prefix}-{next(self._ids):x}"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = None
        for name, value in scope["headers"]:
            if name == HEADER:
                if _SANE.fullmatch(value):
                    rid = value.decode("ascii")
                break
        scope[REQUEST_ID_KEY] = rid or self.new_id()
        log = self.log
        if log is None or scope["path"] in self.quiet_paths or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, _with_id(scope, send, None))
            return
        start = time.perf_counter()
        status = [CLIENT_GONE]
        try:
            await self.app(scope, receive, _with_id(scope, send, status))
        except BaseException:
            if status[0] == CLIENT_GONE:
                status[0] = 500  # the server's own failure, answered 500 by uvicorn
            raise
        finally:
            _access_line(log, scope, status[0], start)


def _with_id(scope: dict[str, Any], send: Any, status: list[int] | None) -> Any:
    """``send`` adding ``x-request-id`` to the response's start (a new message: a
    handler's start message may be a shared constant); the status noted in ``status``."""

    async def send_with_id(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            if status is not None:
                status[0] = message["status"]
            headers = [*message.get("headers", ()),
                       (HEADER, scope[REQUEST_ID_KEY].encode("ascii"))]
            message = {**message, "headers": headers}
        await send(message)

    return send_with_id


#: Control characters, which a percent-encoded path decodes to (``%0a``, ``%00``).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def loggable_path(path: str) -> str:
    """``path`` with its control characters written as ``\\xNN``: a client's
    ``/x%0a2026-12-03 ERROR ...`` would otherwise forge a line of the text log (and a
    NUL make it binary to grep)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", path)


def _access_line(log: logging.Logger, scope: dict[str, Any], status: int, start: float) -> None:
    latency_ms = round((time.perf_counter() - start) * 1000.0, 3)
    method, path, rid = scope["method"], loggable_path(scope["path"]), scope[REQUEST_ID_KEY]
    log.info("%s %s %d %.3f ms %s", method, path, status, latency_ms, rid,
             extra={"method": method, "path": path, "status": status,
                    "latency_ms": latency_ms, "request_id": rid})


def sane_id(text: str) -> bool:
    """True when ``text`` may name a request in ``x-request-id`` (1-128 characters of
    ``A-Z a-z 0-9 . _ : -``)."""
    return _SANE_TEXT.fullmatch(text) is not None


def name_request(scope: dict[str, Any], rid: str) -> str:
    """Name the request ``rid`` in its answer's ``x-request-id`` when ``rid`` is sane
    (else the id it has keeps naming it); returns ``rid``."""
    if REQUEST_ID_KEY in scope and sane_id(rid):
        scope[REQUEST_ID_KEY] = rid
    return rid


def quiet_paths(access_log_beacons: bool) -> frozenset[str]:
    """The paths without an access line: :data:`BEACON_PATHS`, unless the beacons are
    to be logged too (setting ``access_log_beacons``)."""
    return frozenset() if access_log_beacons else BEACON_PATHS
