"""Who is looking: a server-side session, named by the id in the session cookie,
resolved to a :class:`Viewer`.

Logging in with an API key opens a session in the auth store
(:meth:`adfunnel.auth.service.ApiKeys.open_session`): a random id, kept there only as
its digest with the key's public prefix and an expiry (:data:`SESSION_TTL_S` on the
server's clock). The cookie holds that id, never the key: HttpOnly, SameSite=Strict,
scoped to ``/ui``, and ``Secure`` whenever the request came over HTTPS — directly, or
through a trusted proxy (``ADFUNNEL_TRUSTED_PROXIES``) that says so in
``X-Forwarded-Proto`` (:func:`came_over_https`). Scripts cannot read the cookie and no
other site's page can make the browser send it. Another *origin* of the same site (another
port of the host, a sibling subdomain) still can, so a form a browser posts from any
origin but the dashboard's own is refused (:func:`from_another_origin`); forms need no
separate CSRF token.

Each request resolves the session again: an expired session, one logged out, or one
whose key was revoked (revoking a key also deletes its sessions) sends its holder to
the login page at the next click.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from adfunnel.tracking.client import Network, trusted_peer

COOKIE = "adfunnel_session"
COOKIE_PATH = "/ui"
#: Seconds a session lasts (on the server's clock; the cookie's Max-Age matches).
SESSION_TTL_S = 12 * 3600


class Sessions(Protocol):
    """The auth store's sessions (:class:`adfunnel.auth.service.ApiKeys`)."""

    def open_session(self, key: str | None, ttl_s: float) -> str | None: ...

    def resolve_session(self, session_id: str | None) -> Any: ...

    def end_session(self, session_id: str | None) -> None: ...


@dataclass(frozen=True, slots=True)
class Viewer:
    """The principal of a live session (:class:`adfunnel.auth.keys.Principal`)."""

    principal: Any
    role: str
    advertiser_id: int | None
    key_prefix: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def is_advertiser(self) -> bool:
        return self.role == "advertiser"

    @property
    def is_reviewer(self) -> bool:
        return self.role == "reviewer"

    @property
    def sees_campaigns(self) -> bool:
        return self.is_admin or self.is_advertiser

    @property
    def reviews(self) -> bool:
        return self.is_admin or self.is_reviewer


def current_viewer(request: Request, sessions: Sessions) -> Viewer | None:
    """The viewer of the request's session cookie; None without a live session."""
    principal = sessions.resolve_session(request.cookies.get(COOKIE))
    if principal is None:
        return None
    role = str(getattr(principal.role, "value", principal.role))
    return Viewer(principal, role, principal.advertiser_id, principal.key_prefix)


def came_over_https(request: Request, trusted: Sequence[Network]) -> bool:
    """True when the browser's request came over HTTPS: this connection is TLS, or its
    peer is a trusted proxy (the beacons' rule, :func:`trusted_peer`) whose
    ``X-Forwarded-Proto`` (the nearest proxy's, right-most, value) is ``https``."""
    if request.url.scheme == "https":
        return True
    forwarded = request.headers.get("x-forwarded-proto")
    if not forwarded:
        return False
    peer = request.client.host if request.client else None
    nearest = forwarded.split(",")[-1].strip().lower()
    return nearest == "https" and trusted_peer(peer, trusted)


#: ``Sec-Fetch-Site`` values of a request the dashboard's own page (or the user) made.
OWN_FETCH_SITES = ("same-origin", "none")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def from_another_origin(request: Request) -> bool:
    """True when a browser sent this request from another origin's page: its
    ``Sec-Fetch-Site`` is not ``same-origin`` (or ``none``: typed by the user), or,
    from a browser that sends no ``Sec-Fetch-*`` (plain HTTP to a host other than
    localhost), its ``Origin`` is not the host the request was sent to (``null``, a
    sandboxed frame's, never is). A request naming neither is not a browser's
    cross-origin one (every browser names the origin of a cross-origin POST)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site.strip().lower() not in OWN_FETCH_SITES
    origin = request.headers.get("origin")
    if origin is None:
        return False
    own = _host_port(origin)
    # the Host header read with the Origin's scheme: behind a TLS proxy this hop is http
    return own is None or own != _host_port(f"{urlsplit(origin.strip()).scheme}://"
                                            f"{request.headers.get('host', '')}")


def _host_port(url: str) -> tuple[str, int | None] | None:
    """An origin's host and port (the scheme's default when left out); None when it
    names no host (``null``)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def log_in(response: Response, session_id: str, *, secure: bool) -> None:
    response.set_cookie(COOKIE, session_id, max_age=SESSION_TTL_S, path=COOKIE_PATH,
                        httponly=True, samesite="strict", secure=secure)


def log_out(response: Response) -> None:
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
