"""Authentication over HTTP: the :class:`Authenticate` middleware and the FastAPI
dependencies that routes use to learn who calls and to refuse a role.

Two layers, each with one job:

- :class:`Authenticate` (ASGI, around the whole app) answers 401 to a request for a
  protected path without a valid ``Authorization: Bearer <key>``, and 403 to a
  non-admin key outside the areas non-admin roles may enter (:data:`SHARED_AREAS`);
  otherwise it leaves the :class:`Principal` in ``request.state.principal``. Every
  path is protected unless it is in :data:`OPEN_PATHS` or under :data:`OPEN_PREFIXES`,
  so a new route is closed until someone opens it.
- :func:`current_principal` and :func:`require_role` (FastAPI dependencies) give a
  route the principal, or refuse a role with 403. Whether an advertiser may see a
  record is the route's to decide (another advertiser's ids answer 404).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from adfunnel.auth.keys import Principal, Role
from adfunnel.auth.ratelimit import RateLimiter, retry_after
from adfunnel.auth.service import ApiKeys
from adfunnel.http_errors import ApiError, error_response
from adfunnel.internal_auth import bearer_key

#: Paths anyone may call: the ad decision, the beacons, probes, the API's documents.
OPEN_PATHS = frozenset({
    "/healthz", "/readyz", "/v1/ads:select", "/i", "/vi", "/c", "/v", "/v1/bench/noop",
    "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
    "/tag.js", "/f", "/demo",  # the ad tag, an html creative's frame, the demo page
    # an exchange's OpenRTB notices: no key, a signed token (tracking/notice_desk.py)
    "/rtb/win", "/rtb/bill", "/rtb/loss",
    # the bidder endpoint: no API key; an exchange's own key header, which the endpoint
    # checks when openrtb_exchange_keys is set (openrtb/endpoint.py)
    "/openrtb2/bid",
})
#: Path prefixes anyone may call. ``/ui`` checks its own session cookie
#: (``adfunnel.ui``), ``/static`` holds the documents' assets, ``/creatives/files/``
#: the uploaded creative images pages show, ``/demo/`` the demo's landing page and assets.
OPEN_PREFIXES = ("/ui", "/static/", "/docs/", "/redoc/", "/creatives/files/", "/demo/")
#: Where advertiser and reviewer keys may go at all; each route there checks the role
#: and the advertiser. Every other protected path is the admin's.
SHARED_AREAS = ("/v1/advertisers", "/v1/campaigns", "/v1/ads/", "/v1/review/",
                "/v1/conversions", "/v1/creatives")

#: ASGI scope key of a principal already resolved in this process: the dashboard's
#: in-process API calls act as the viewer of a server-side session without holding the
#: viewer's key. A server never puts keys of its own in a scope, so no request from the
#: network can carry one.
IN_PROCESS_PRINCIPAL = "adfunnel.principal"

_ASGI = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                  Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]


def is_open(path: str) -> bool:
    """True for a path that needs no key."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def admits(principal: Principal, path: str) -> bool:
    """True when ``principal``'s role may enter ``path`` at all (routes check more)."""
    return principal.is_admin or path.startswith(SHARED_AREAS)


def unauthorized(problem: str) -> ApiError:
    """401 naming the ``authorization`` header."""
    return ApiError(401, "unauthorized", fields=[("authorization", problem)])


def forbidden(field: str, problem: str) -> ApiError:
    """403: the key is valid but its role may not do this."""
    return ApiError(403, "forbidden", fields=[(field, problem)])


class Authenticate:
    """ASGI middleware resolving ``Authorization: Bearer <key>`` with ``keys``.

    Answers (JSON ``{"error", "fields"}``): 401 ``unauthorized`` (with
    ``WWW-Authenticate: Bearer``) for a missing, unknown or revoked key on a
    protected path; 403 ``forbidden`` for a non-admin key outside
    :data:`SHARED_AREAS`; 429 ``rate_limited`` with ``Retry-After`` (seconds) when an
    advertiser or reviewer key is over its ``limiter``'s rate (admin keys, the
    operator's tools, are not limited). Open paths — the ad decision and the beacons
    among them — pass untouched: no key is looked up, nothing is limited."""

    def __init__(self, app: _ASGI, keys: ApiKeys, limiter: RateLimiter | None = None) -> None:
        self.app = app
        self.keys = keys
        self.limiter = limiter

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope["headers"]
                       if k == b"authorization"), None)
        key = bearer_key(header)
        principal = scope.get(IN_PROCESS_PRINCIPAL)  # set in this process only
        if not isinstance(principal, Principal):
            principal = self.keys.resolve(key) if key else None
        if principal is None:
            problem = ("send Authorization: Bearer <API key>" if key is None
                       else "unknown or revoked API key")
            response = error_response(401, "unauthorized", [("authorization", problem)],
                                      headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        if not admits(principal, scope["path"]):
            response = error_response(403, "forbidden", [
                ("authorization", f"a key of role {principal.role} may not use this route")])
            await response(scope, receive, send)
            return
        limiter = self.limiter
        wait = limiter.take(principal.key_prefix) if limiter and not principal.is_admin else 0.0
        if limiter is not None and wait > 0:
            seconds = retry_after(wait)
            response = error_response(429, "rate_limited", [
                ("authorization", f"over {limiter.rate_per_s:g} requests/s for this key; "
                                  f"retry in {seconds} s")],
                headers={"Retry-After": str(seconds)})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def current_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller, as :class:`Authenticate` resolved it.

    Raises:
        ApiError: 401 when no principal was resolved (the app lacks the middleware:
            closed rather than open).
    """
    principal = getattr(request.state, "principal", None)
    if not isinstance(principal, Principal):
        raise unauthorized("send Authorization: Bearer <API key>")
    return principal


#: A route parameter holding the caller.
Caller = Annotated[Principal, Depends(current_principal)]


def require_role(*roles: Role) -> Callable[[Principal], Principal]:
    """FastAPI dependency factory: the caller when its role is one of ``roles``.

    Raises (from the dependency):
        ApiError: 403 naming ``authorization`` for another role.
    """
    allowed = frozenset(roles)
    names = ", ".join(sorted(r.value for r in allowed))

    def check(principal: Caller) -> Principal:
        if principal.role not in allowed:
            raise forbidden("authorization", f"needs a key of role {names}, "
                                             f"not {principal.role}")
        return principal

    return check


def install_auth(app: FastAPI, keys: ApiKeys, limiter: RateLimiter | None = None) -> None:
    """Put :class:`Authenticate` around ``app`` (with ``limiter``: per-key request
    limits) and ``keys`` on ``app.state.api_keys`` (where ``/ui`` resolves its session
    cookie)."""
    app.state.api_keys = keys
    app.add_middleware(Authenticate, keys=keys, limiter=limiter)  # type: ignore[arg-type]
