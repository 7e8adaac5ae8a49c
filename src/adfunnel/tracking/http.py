"""The tracker's HTTP routes: ``GET /i`` and ``GET /vi`` (204), ``GET /c`` (302) and
``GET|POST /v`` (204).

Shared by ``adfunnel serve`` (the embedded default mounts them) and ``adfunnel
tracker`` (a stateless process of its own). Each answers without waiting on the
database: the event is in the log (or the spool) when the answer leaves. The routes are
coroutines: a beacon waits for the store without holding a thread, and concurrent
beacons share the publisher's rounds (group commit).

- ``/i?t=<token>[&p=<clearing price>]``: the ad was rendered → 204; or, when the
  request's ``Accept`` names an image type first (what ``<img>`` sends:
  ``image/avif,image/webp,…``), 200 with a 1×1 transparent GIF (``image/gif``, not
  cached), recorded exactly the same. Stores a ``render`` event, and the billed
  ``impression`` when the token's billable event is ``rendered``
  (:class:`~adfunnel.tracking.beacons.Tracker`). ``p`` (an OpenRTB bid's markup:
  ``${AUCTION_PRICE}`` substituted by the exchange) bills that clearing price instead
  of the token's; a bad or unsubstituted ``p``, or one above the bid, is 400
  ``invalid_price`` naming ``p``, nothing stored.
- ``/rtb/win``, ``/rtb/bill``, ``/rtb/loss``: an exchange's OpenRTB notices
  (:mod:`adfunnel.tracking.notice_routes`).
- ``/vi?t=<token>``: the ad was viewable (MRC standard, measured by the page's tag) →
  answered as ``/i``; stores a ``viewable`` event, and the billed ``impression`` when the
  token's billable event is ``viewable``.
- ``/c?t=<token>``: click → 302 to the ad's landing URL with the click id
  (:func:`~adfunnel.tracking.click_id.sign_click_id`) in the query parameter
  ``adf_click_id``, or in place of the macro ``{click_id}`` where the landing URL has
  it: what the advertiser's page posts back. A click on an expired but authentic token
  (a tab left open) still lands, without a click id, never billed; a house ad's click
  lands on its placement's house landing URL; an ad no longer known, or not approved
  (edited back into review, or rejected: its URL is not reviewed), gets a short HTML
  page (404) and is never stored, so never billed. Only a forged or malformed token
  gets the JSON error.
- ``/v?click_id=<click id>[&value=<micros>]``: the conversion pixel → 204. ``value`` is
  the conversion's value in integer micros. It trusts nothing but the click id: signed
  by this server for a click it stored and did not flag as invalid traffic. A serve
  token (``t``, or a serve token given as ``click_id``) is refused: anyone who saw the
  ad has it.

A refused token answers 400 ``invalid_token`` naming ``t`` (or ``click_id``); a bad
``value`` 422; when
neither the log nor the spool can store the event, 503 with ``Retry-After`` (the client
retries; nothing was acknowledged). The sender's address comes from the socket, or from
``X-Forwarded-For`` only when the peer is a trusted proxy.

A browser's cross-origin ``/i``, ``/vi`` or ``/v`` (an ``Origin`` other than the server's own) is
checked against the token's placement's ``allowed_origins`` first: refused with 403
``origin_not_allowed`` naming ``Origin`` (nothing recorded), or answered with
``Access-Control-Allow-Origin`` (:mod:`adfunnel.tracking.cors`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from adfunnel.campaigns.landing import LandingUrlError, to_uri
from adfunnel.events.model import EventType
from adfunnel.http_errors import error_response
from adfunnel.tracking.beacons import ORIGIN_REFUSED, UNAVAILABLE, BeaconResult, Tracker
from adfunnel.tracking.clearing_price import PriceRefused
from adfunnel.tracking.client import ClientFacts, ClientResolver, Network
from adfunnel.tracking.cors import allow_origin_headers, cross_origin, origin_refused
from adfunnel.tracking.notice_routes import notice_routes

_INT64_MAX = 2**63 - 1
#: Replaced in a landing URL by the click id (URL-safe as it is).
CLICK_ID_MACRO = "{click_id}"
#: The query parameter that carries the click id to a landing URL without the macro.
CLICK_ID_PARAM = "adf_click_id"
_GONE_PAGE = ("<!doctype html><title>Ad unavailable</title>"
              "<p>This ad is no longer available.</p>")


class TrackingEndpoints:
    """Binds a :class:`Tracker` to Starlette routes."""

    def __init__(self, tracker: Tracker, trusted_proxies: Sequence[Network] = ()) -> None:
        self.tracker = tracker
        self.trusted_proxies = tuple(trusted_proxies)  # whose X-Forwarded-For is believed
        self._resolve = ClientResolver(self.trusted_proxies)

    def routes(self) -> list[Route]:
        return [
            Route("/i", self.impression, methods=["GET"]),
            Route("/vi", self.viewable, methods=["GET"]),
            Route("/c", self.click, methods=["GET"]),
            Route("/v", self.conversion, methods=["GET", "POST"]),
            *notice_routes(self.tracker),
        ]

    def hot_routes(self) -> dict[tuple[str, str], Any]:
        """Bare ASGI handlers of the beacons a feed sends most (``GET /i``, ``GET /vi``,
        ``GET /c``), served by :class:`~adfunnel.serving.deadline.ArrivalStamp` outside
        every framework layer: the query's ``t`` and two headers read from the scope, no
        Request object (the same answers as :meth:`impression`, :meth:`viewable` and
        :meth:`click`)."""
        return {("GET", "/i"): self.impression_asgi, ("GET", "/vi"): self.viewable_asgi,
                ("GET", "/c"): self.click_asgi}

    def _client(self, request: Request) -> ClientFacts:
        peer = request.client.host if request.client is not None else None
        return self._resolve(peer, request.headers.get("x-forwarded-for"),
                             request.headers.get("user-agent"))

    def _scope_client(self, scope: dict[str, Any]) -> ClientFacts:
        """:meth:`_client` from a raw scope (the first of each header, as Starlette's)."""
        forwarded = agent = None
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for" and forwarded is None:
                forwarded = value.decode("latin-1")
            elif name == b"user-agent" and agent is None:
                agent = value.decode("latin-1")
        client = scope.get("client")
        return self._resolve(client[0] if client else None, forwarded, agent)

    async def impression(self, request: Request) -> Response:
        """``/i``: the ad was rendered."""
        return await self._pixel_beacon(EventType.RENDER, request)

    async def viewable(self, request: Request) -> Response:
        """``/vi``: the ad was viewable."""
        return await self._pixel_beacon(EventType.VIEWABLE, request)

    async def _pixel_beacon(self, event_type: EventType, request: Request) -> Response:
        origin = cross_origin(request.scope)
        price = request.query_params.get("p") if event_type is EventType.RENDER else None
        result = await self.tracker.beacon(event_type, request.query_params.get("t"),
                                           self._client(request), origin=origin, price=price)
        return _refused(result, origin=origin) or _pixel_answer(request.scope, origin)

    async def impression_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """:meth:`impression` as a bare ASGI handler."""
        await self._pixel_asgi(EventType.RENDER, scope, receive, send)

    async def viewable_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """:meth:`viewable` as a bare ASGI handler."""
        await self._pixel_asgi(EventType.VIEWABLE, scope, receive, send)

    async def _pixel_asgi(self, event_type: EventType, scope: dict[str, Any], receive: Any,
                          send: Any) -> None:
        origin = cross_origin(scope)
        # the feed's beacons carry no ``p``: their query is not split a second time
        price = (query_value(scope, "p") if event_type is EventType.RENDER
                 and b"p=" in scope.get("query_string", b"") else None)
        result = await self.tracker.beacon(event_type, query_value(scope, "t"),
                                           self._scope_client(scope), origin=origin,
                                           price=price)
        refused = _refused(result, origin=origin)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if origin is None and not wants_image(scope):  # the common case: nothing to add
            await send(_NO_CONTENT)
            await send(_EMPTY_BODY)
            return
        await _pixel_answer(scope, origin)(scope, receive, send)

    async def click(self, request: Request) -> Response:
        token = request.query_params.get("t")
        result = await self.tracker.beacon(EventType.CLICK, token, self._client(request))
        return _click_answer(result)

    async def click_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """:meth:`click` as a bare ASGI handler."""
        token = query_value(scope, "t")
        result = await self.tracker.beacon(EventType.CLICK, token, self._scope_client(scope))
        await _click_answer(result)(scope, receive, send)

    async def conversion(self, request: Request) -> Response:
        query = request.query_params
        if "t" in query:  # the serve token is public: whoever saw the ad has it
            return error_response(400, "invalid_token", [
                ("t", f"a serve token cannot attribute a conversion; send the click's "
                      f"{CLICK_ID_PARAM} as click_id")])
        token, name = query.get("click_id"), "click_id"
        raw = query.get("value")
        value: int | None = None
        if raw is not None:
            if not raw.isascii() or not raw.isdigit() or int(raw) > _INT64_MAX:
                return error_response(422, "validation",
                                      [("value", "integer micros in [0, 2**63 - 1]")])
            value = int(raw)
        origin = cross_origin(request.scope)
        result = await self.tracker.beacon(EventType.CONVERSION, token, self._client(request),
                                           value, origin=origin)
        return _refused(result, name, origin) or _with_origin(Response(status_code=204), origin)


def _click_answer(result: BeaconResult) -> Response:
    """A click's answer: 302 to the ad's landing URL carrying the click id, a short
    HTML page when there is nowhere to land, or the error for a refused token."""
    refused = _refused(result)
    if refused is not None:
        return refused
    if result.landing_url is None:  # a person clicked: a page, not an API error
        return HTMLResponse(_GONE_PAGE, status_code=404)
    try:
        location = with_click_id(to_uri(result.landing_url), result.click_id)
    except LandingUrlError:  # stored before IRIs were checked on create
        return HTMLResponse(_GONE_PAGE, status_code=404)
    # not RedirectResponse: it percent-encodes an IDN host and re-quotes ASCII bytes
    return Response(status_code=302, headers={"location": location})


def with_click_id(location: str, click_id: str | None) -> str:
    """``location`` with ``click_id`` in place of every ``{click_id}`` macro, or else
    appended as the query parameter ``adf_click_id`` (before a fragment). Without a
    click id (an expired click, a house ad) the macro is emptied and nothing appended."""
    if CLICK_ID_MACRO in location:
        return location.replace(CLICK_ID_MACRO, click_id or "")
    if click_id is None:
        return location
    base, hash_, fragment = location.partition("#")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}{CLICK_ID_PARAM}={click_id}{hash_}{fragment}"


def without_click_id(location: str) -> str:
    """The landing URL a click's ``location`` was made from by appending the click id
    (:func:`with_click_id`'s inverse; any other location is returned as it is)."""
    base, hash_, fragment = location.partition("#")
    head, found, click_id = base.rpartition(CLICK_ID_PARAM + "=")
    if not found or not head.endswith(("?", "&")) or "&" in click_id:
        return location
    return f"{head[:-1]}{hash_}{fragment}"


def query_value(scope: dict[str, Any], name: str) -> str | None:
    """The last value of query parameter ``name`` (None when absent), decoded as
    Starlette's ``QueryParams`` decodes it; a query without ``%`` or ``+`` (a token's
    own characters) is split without the decoder."""
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return None
    text = raw.decode("latin-1")
    if "%" in text or "+" in text:
        pairs = parse_qsl(text, keep_blank_values=True)
    else:
        pairs = [(k, v) for k, _, v in (p.partition("=") for p in text.split("&") if p)]
    found = None
    for key, value in pairs:
        if key == name:
            found = value
    return found


_NO_CONTENT = {"type": "http.response.start", "status": 204, "headers": []}
_EMPTY_BODY = {"type": "http.response.body", "body": b""}


#: A 1×1 transparent GIF (GIF89a, one-colour palette, transparency extension): 43 bytes.
PIXEL_GIF = (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01"
             b"\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")
_PIXEL_HEADERS = {"cache-control": "no-store"}


def wants_image(scope: dict[str, Any]) -> bool:
    """Whether the request's ``Accept`` names an image type first (an ``<img>`` pixel:
    browsers send ``image/avif,image/webp,…,image/*,*/*;q=0.8``); ``*/*`` alone, or no
    ``Accept`` (``fetch``, ``sendBeacon``, servers), is not."""
    for name, value in scope["headers"]:
        if name == b"accept":
            return value.lstrip().lower().startswith(b"image/")
    return False


def _pixel_answer(scope: dict[str, Any], origin: str | None) -> Response:
    """A stored impression's answer: the GIF for an ``<img>``, else 204."""
    if wants_image(scope):
        answer = Response(PIXEL_GIF, media_type="image/gif", headers=_PIXEL_HEADERS)
    else:
        answer = Response(status_code=204)
    return _with_origin(answer, origin)


def _with_origin(answer: Response, origin: str | None) -> Response:
    if origin is not None:  # allowed: the tracker refused it otherwise
        answer.raw_headers.extend(allow_origin_headers(origin))
    return answer


def _refused(result: BeaconResult, name: str = "t",
             origin: str | None = None) -> Response | None:
    """The error answer for a refused or unstored beacon (its token sent as ``name``),
    else None."""
    if result.outcome == ORIGIN_REFUSED:
        return origin_refused(origin or "", result.placement or "")
    if result.outcome.startswith("invalid:"):
        return error_response(400, "invalid_token", [(name, result.outcome.split(":", 1)[1])])
    if result.outcome.startswith("price:"):  # an OpenRTB markup's clearing price
        reason = result.outcome.split(":", 1)[1]
        return error_response(400, "invalid_price",
                              [("p", f"{reason}: {PriceRefused(reason).problem}")])  # type: ignore[arg-type]
    if result.outcome == UNAVAILABLE:
        return error_response(503, "event_log_unavailable",
                              [(name, "the event could not be stored; retry")],
                              headers={"retry-after": "1"})
    return None
