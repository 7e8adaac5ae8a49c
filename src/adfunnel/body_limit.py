"""ASGI middleware: refuse request bodies over a byte limit with a JSON 413, and JSON
nested deeper than any decoder may recurse with a JSON 422.

The body is read (up to the limit) before the app sees it, so an oversized body —
declared or chunked — is refused without being parsed, and the app receives the same
bytes it would have read itself. Every body but a form's (whose JSON fields the
dashboard checks itself, ``adfunnel.ui.forms``) is checked for its nesting depth
(:mod:`adfunnel.json_depth`): FastAPI's ``json.loads`` and the routes that decode their
own body (``PUT /v1/admin/clock``) never see a document too deep to decode.

A route may have a limit of its own (``routes``: path -> (bytes, field named), the
creative upload's ``file``), higher or lower than the app's, enforced the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from adfunnel.json_depth import MAX_JSON_DEPTH, nesting_problem

Scope = dict[str, Any]
Message = dict[str, Any]


class BodyLimit:
    """Wraps an ASGI app; bodies over ``max_bytes`` get 413 ``{"error": "too_large", ...}``,
    bodies nested deeper than ``max_depth`` levels 422 ``{"error": "validation", ...}``
    naming the member that holds the excess. ``routes`` maps a path to its own limit
    and the field a refusal names (``body`` elsewhere)."""

    def __init__(self, app: Any, max_bytes: int, max_depth: int = MAX_JSON_DEPTH,
                 routes: Mapping[str, tuple[int, str]] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.routes = dict(routes or {})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit, field = self.routes.get(scope.get("path", ""), (self.max_bytes, "body"))
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(send, limit, field)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:  # refused as it arrives: never buffered past the limit
                await _refuse(send, limit, field)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        too_deep = None if _is_form(scope) else nesting_problem(body, self.max_depth)
        if too_deep is not None:
            await _send_json(send, 422, {"error": "validation", "fields": [
                {"field": too_deep[0], "problem": too_deep[1]}]})
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Any, limit: int, field: str) -> None:
    await _send_json(send, 413, {
        "error": "too_large",
        "fields": [{"field": field, "problem": f"over {limit} bytes"}],
    })


#: Content types whose body is not JSON (a form's JSON fields are checked by its route).
_FORM_TYPES = (b"application/x-www-form-urlencoded", b"multipart/form-data")


def _is_form(scope: Scope) -> bool:
    for name, value in scope.get("headers") or []:
        if name == b"content-type":
            return value.lower().lstrip().startswith(_FORM_TYPES)
    return False


async def _send_json(send: Any, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
