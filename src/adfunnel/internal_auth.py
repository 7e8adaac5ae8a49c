"""The shared internal secret between a deployment's own processes.

The budget & pacing service (``adfunnel budget-service``) is called only by the
deployment's own processes: ad servers report to it and the dashboard reads its
budget days. Each sends ``Authorization: Bearer <ADFUNNEL_INTERNAL_TOKEN>``;
:class:`InternalAuth` refuses any other request before its body is read:

- no or malformed ``Authorization`` header: 401 ``unauthorized`` (with
  ``WWW-Authenticate: Bearer``);
- a bearer that is not the token: 403 ``forbidden``.

Both answers are JSON ``{"error", "fields": [{"field": "authorization", ...}]}``.
The comparison is constant-time (``hmac.compare_digest``). Paths in ``open_paths``
(the budget service's liveness probe ``/healthz``) stay open; Prometheus scrapes
``/metrics`` with the token (``authorization`` credentials in its scrape config).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable
from typing import Any

#: The header every internal client sends (value: ``Bearer <token>``).
AUTHORIZATION = "authorization"


def bearer_key(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header value; None otherwise."""
    if not authorization:
        return None
    scheme, _, key = authorization.strip().partition(" ")
    key = key.strip()
    return key if scheme.lower() == "bearer" and key else None


def internal_headers(token: str) -> dict[str, str]:
    """The headers an internal client sends with every request."""
    return {AUTHORIZATION: f"Bearer {token}"}


class InternalAuth:
    """ASGI middleware: only callers holding ``token`` reach ``app`` (module docstring)."""

    def __init__(self, app: Any, token: str, *, open_paths: Iterable[str] = ()) -> None:
        if len(token) < 32:
            raise ValueError("the internal token needs at least 32 characters")
        self.app = app
        self._token = token.encode()
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        raw = dict(scope.get("headers") or []).get(AUTHORIZATION.encode())
        given = bearer_key(raw.decode("latin-1") if raw is not None else None)
        if given is None:
            await _refuse(send, 401, "unauthorized",
                          "missing: Bearer <ADFUNNEL_INTERNAL_TOKEN>")
            return
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._token):
            await _refuse(send, 403, "forbidden", "not this deployment's internal token")
            return
        await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, error: str, problem: str) -> None:
    payload = json.dumps({"error": error,
                          "fields": [{"field": AUTHORIZATION, "problem": problem}]}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
