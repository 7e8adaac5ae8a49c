"""CORS of the browser-facing routes: ``POST /v1/ads:select`` and the beacons ``/i`` and
``/v``, for the origins each placement allows (``Placement.allowed_origins``).

A browser names the page's origin in ``Origin``. The rule, one for every such route:

- no ``Origin``, or the server's own (its ``Host``): not a cross-origin request, served
  as before — apps, servers and the server's own pages are not concerned;
- an ``Origin`` the request's placement allows (the select's ``placement.id``, a beacon's
  token's placement): served, and the answer carries ``Access-Control-Allow-Origin``
  with that origin (and ``Vary: Origin``);
- any other ``Origin``: refused, **403** ``origin_not_allowed`` naming ``Origin``,
  before anything is decided or recorded: no ad, no event.

A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) carries no body, so no
placement: :class:`PlacementCors` answers it for an origin that some placement allows
(Starlette's :class:`~starlette.middleware.cors.CORSMiddleware`, its allowed origins
read from the placements), and the request itself is then checked against its own
placement.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from adfunnel.http_errors import error_response

#: The routes a page's tag calls from the browser.
CORS_PATHS = frozenset({"/v1/ads:select", "/i", "/vi", "/v"})
#: Header pairs of an answer to an allowed cross-origin request, less the origin itself.
VARY_ORIGIN = (b"vary", b"Origin")


def cross_origin(scope: dict[str, Any]) -> str | None:
    """The request's ``Origin`` when it names another origin than the server's own (its
    ``Host``); None for a request without one (not from a browser's cross-origin fetch)
    or from the server's own pages."""
    origin = host = None
    for name, value in scope["headers"]:
        if name == b"origin" and origin is None:
            origin = value.decode("latin-1")
        elif name == b"host" and host is None:
            host = value.decode("latin-1")
    if origin is None:
        return None
    _, sep, authority = origin.partition("://")
    if sep and host is not None and authority.lower() == host.lower():
        return None
    return origin


def allow_origin_headers(origin: str) -> list[tuple[bytes, bytes]]:
    """The headers that let the page of ``origin`` read an answer."""
    return [(b"access-control-allow-origin", origin.encode("latin-1")), VARY_ORIGIN]


def origin_refused(origin: str, placement: str) -> Any:
    """The 403 answer to a browser on an origin ``placement`` does not allow."""
    return error_response(403, "origin_not_allowed", [
        ("Origin", f"{origin[:200]} is not among the allowed_origins of placement "
                   f"{placement[:200]}")])


class PlacementCors(CORSMiddleware):
    """Preflights of :data:`CORS_PATHS` for the origins any placement allows
    (``origins``: their union, read per preflight). Every other request passes straight
    through: the routes add ``Access-Control-Allow-Origin`` themselves, once they know
    the placement (:func:`allow_origin_headers`)."""

    def __init__(self, app: ASGIApp, origins: Callable[[], Collection[str]]) -> None:
        super().__init__(app, allow_methods=("GET", "POST"), allow_headers=("content-type",),
                         max_age=600)
        self._origins = origins

    def is_allowed_origin(self, origin: str) -> bool:
        return origin in self._origins()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "OPTIONS"
                and scope["path"] in CORS_PATHS):
            await super().__call__(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def __getattr__(self, name: str) -> Any:
        """The wrapped app's attributes (``routes``, ``state``, … of a FastAPI app)."""
        if name == "app":  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.app, name)
