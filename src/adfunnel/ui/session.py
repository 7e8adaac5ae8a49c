"""Who is looking: the API key in the session cookie, resolved to a :class:`Viewer`.

Logging in puts the key itself in an HttpOnly, SameSite=Strict cookie scoped to
``/ui`` (Secure over HTTPS): scripts cannot read it and no other site's page can make
the browser send it, so forms need no separate CSRF token. Each request resolves the
key again, so a revoked key logs its holder out at the next click.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

COOKIE = "adfunnel_key"
COOKIE_PATH = "/ui"
#: Seconds a login lasts in the browser (the key itself may be revoked sooner).
COOKIE_MAX_AGE_S = 12 * 3600

#: A key → its principal (``role``, ``advertiser_id``, ``key_prefix``), or None for an
#: unknown or revoked key: ``adfunnel.auth.service.ApiKeys.resolve``.
Resolver = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class Viewer:
    key: str
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


def viewer_for(key: str | None, resolve: Resolver) -> Viewer | None:
    """The viewer a key stands for; None for no key or one the server does not know."""
    if not key:
        return None
    principal = resolve(key)
    if principal is None:
        return None
    role = str(getattr(principal.role, "value", principal.role))
    return Viewer(key, role, principal.advertiser_id, principal.key_prefix)


def current_viewer(request: Request, resolve: Resolver) -> Viewer | None:
    return viewer_for(request.cookies.get(COOKIE), resolve)


def log_in(response: Response, request: Request, key: str) -> None:
    response.set_cookie(COOKIE, key, max_age=COOKIE_MAX_AGE_S, path=COOKIE_PATH,
                        httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def log_out(response: Response) -> None:
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")
