"""``Idempotency-Key`` on the API's POST routes: a retried create answers what the first
made, never a second campaign, ad or advertiser.

A client that does not know whether its POST arrived (a timeout, a dropped connection,
a double click on the dashboard's form) sends it again with the same
``Idempotency-Key`` header (1-255 visible ASCII characters, its own choice: a UUID).
The first request with a key runs; its answer, when 2xx, is kept for
``IDEMPOTENCY_TTL_S`` (24 hours of the domain clock) and every later request with the
key gets it again — the same status, body and ``Location`` — with
``Idempotent-Replayed: true``, and nothing runs. Answers:

- the key with another method, path, query or body: 422 naming ``idempotency-key``
  (a key names one request; a client reusing one has a bug that must not pass silently);
- the key while its first request still runs: 409 naming ``idempotency-key`` (retry);
  a first request that never finished (its process died) frees the key after
  ``ABANDONED_S`` (5 minutes);
- a first answer that is not 2xx is not kept: its retry runs (a 422 corrected, a 5xx).

Not on ``POST /v1/api-keys`` (:data:`NOT_KEPT`: its answer is a secret shown once).
Keys are per caller: an API key's prefix, or the dashboard session's principal, so one
caller's key never answers another's request. Without the header, or on other methods,
nothing changes. The seed of the practice: Stripe's API and the IETF draft
"The Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header).
"""

from __future__ import annotations

import hashlib
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
from sqlalchemy import Engine, and_, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from adfunnel.api.idempotency_tables import idempotency_keys as t
from adfunnel.auth.keys import Principal
from adfunnel.clock import Clock
from adfunnel.db import connection_guard
from adfunnel.http_errors import error_response

#: Seconds an answer is kept for its key (domain clock).
IDEMPOTENCY_TTL_S = 24 * 3600.0
#: The header (lower case, as ASGI gives it) and its longest value.
HEADER = "idempotency-key"
MAX_KEY_CHARS = 255
#: Routes whose answer is never kept: an issued API key is shown once and stored only as
#: its digest, so a kept answer would store the key itself. The header there is a 400.
NOT_KEPT = frozenset({"/v1/api-keys"})
#: Seconds after which a key whose first request never finished (its process died) is
#: free again: a retry runs instead of answering 409 for a day.
ABANDONED_S = 300.0
#: Seconds of domain time between sweeps of expired rows.
_SWEEP_S = 3600.0


@dataclass(frozen=True, slots=True)
class Kept:
    """A kept 2xx answer."""

    status: int
    content_type: str | None
    location: str | None
    body: bytes


#: What :meth:`IdempotencyStore.begin` found: run the request (NEW), replay a
#: :class:`Kept`, or refuse (OTHER_REQUEST, RUNNING).
NEW, OTHER_REQUEST, RUNNING = "new", "other_request", "running"


class IdempotencyStore:
    """The kept answers in the ``idempotency_keys`` table (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self._swept = -_SWEEP_S

    def begin(self, caller: str, key: str, fingerprint: str) -> str | Kept:
        """Claim ``key`` for a request of ``fingerprint``: NEW when this request runs
        (a row in progress is written, or an expired one replaced), else what the key
        holds (a :class:`Kept` answer, OTHER_REQUEST or RUNNING)."""
        now = self.clock.now().timestamp()
        where = and_(t.c.caller == caller, t.c.key == key)
        with connection_guard(self.engine), self.engine.begin() as conn:
            if now - self._swept >= _SWEEP_S:
                self._swept = now
                conn.execute(delete(t).where(t.c.created_at < now - IDEMPOTENCY_TTL_S))
            conn.execute(delete(t).where(where, or_(
                t.c.created_at < now - IDEMPOTENCY_TTL_S,
                and_(t.c.status.is_(None), t.c.created_at < now - ABANDONED_S))))
        try:
            with connection_guard(self.engine), self.engine.begin() as conn:
                conn.execute(insert(t).values(caller=caller, key=key, fingerprint=fingerprint,
                                              created_at=now))
            return NEW
        except IntegrityError:
            pass
        with connection_guard(self.engine), self.engine.connect() as conn:
            row = conn.execute(select(t).where(where)).one_or_none()
        if row is None:  # its first request failed and let go of it meanwhile
            return self.begin(caller, key, fingerprint)
        if row.fingerprint != fingerprint:
            return OTHER_REQUEST
        if row.status is None:
            return RUNNING
        return Kept(row.status, row.content_type, row.location, bytes(row.body or b""))

    def finish(self, caller: str, key: str, answer: Kept | None) -> None:
        """Keep ``answer`` for the key, or (None: not 2xx) let the key go."""
        where = and_(t.c.caller == caller, t.c.key == key)
        with connection_guard(self.engine), self.engine.begin() as conn:
            if answer is None:
                conn.execute(delete(t).where(where))
            else:
                conn.execute(update(t).where(where).values(
                    status=answer.status, content_type=answer.content_type,
                    location=answer.location, body=answer.body))


def key_problem(value: str) -> str | None:
    """Why ``value`` is not a usable key, or None."""
    if not 1 <= len(value) <= MAX_KEY_CHARS:
        return f"1 to {MAX_KEY_CHARS} characters"
    if not all(33 <= ord(ch) <= 126 for ch in value):
        return "visible ASCII characters only (no spaces)"
    return None


def caller_of(scope: MutableMapping[str, Any]) -> str | None:
    """The caller a key belongs to: the principal the auth middleware resolved."""
    p = scope.get("state", {}).get("principal")
    if not isinstance(p, Principal):
        return None
    return f"{p.role}:{p.advertiser_id}:{p.key_prefix}"


class Idempotent:
    """ASGI middleware applying :class:`IdempotencyStore` to ``POST /v1/…`` requests that
    carry the header (module docstring). Sits inside the auth middleware (it needs the
    caller) and the body limit (it reads the whole body)."""

    def __init__(self, app: Any, store: IdempotencyStore) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST"
                or not scope["path"].startswith("/v1/")):
            await self.app(scope, receive, send)
            return
        raw = next((v for k, v in scope["headers"] if k == HEADER.encode()), None)
        caller = caller_of(scope)
        if raw is None or caller is None:
            await self.app(scope, receive, send)
            return
        key = raw.decode("latin-1")
        problem = key_problem(key) if scope["path"] not in NOT_KEPT else (
            "not accepted on this route: its answer holds a secret shown once, never kept")
        if problem is not None:
            await error_response(400, "invalid_header", [(HEADER, problem)])(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:  # the client left before its body arrived
            return
        fingerprint = _fingerprint(scope, body)
        found = await anyio.to_thread.run_sync(self.store.begin, caller, key, fingerprint)
        if found != NEW:
            await _answer_kept(found, scope, receive, send)
            return
        await self._run(scope, body, receive, send, caller, key)

    async def _run(self, scope: MutableMapping[str, Any], body: bytes, receive: Any,
                   send: Any, caller: str, key: str) -> None:
        """The request, its answer sent as it comes and kept when 2xx."""
        sent = False
        status, headers, chunks = 0, [], []

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()  # a disconnect, when it comes
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def keep(message: dict[str, Any]) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status, headers = message["status"], message.get("headers", [])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            await send(message)

        kept: Kept | None = None
        try:
            await self.app(scope, replay, keep)
            if 200 <= status < 300:
                head = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
                kept = Kept(status, head.get("content-type"), head.get("location"),
                            b"".join(chunks))
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.store.finish, caller, key, kept)


async def _read_body(receive: Any) -> bytes | None:
    """The whole body (already read, and limited, by ``BodyLimit``); None on a disconnect."""
    parts, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(parts)


def _fingerprint(scope: MutableMapping[str, Any], body: bytes) -> str:
    h = hashlib.sha256()
    for part in (scope["method"].encode(), scope["path"].encode(),
                 scope.get("query_string", b""), body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


async def _answer_kept(found: str | Kept, scope: MutableMapping[str, Any], receive: Any,
                       send: Any) -> None:
    if found == OTHER_REQUEST:
        response = error_response(422, "idempotency_key_reused", [
            (HEADER, "already used with another request (method, path, query or body); "
                     "a key names one request")])
    elif found == RUNNING:
        response = error_response(409, "idempotency_key_in_progress", [
            (HEADER, "the first request with this key is still running; retry later")],
            headers={"Retry-After": "1"})
    else:
        assert isinstance(found, Kept)
        headers = [(b"idempotent-replayed", b"true"),
                   (b"content-length", str(len(found.body)).encode())]
        if found.content_type:
            headers.append((b"content-type", found.content_type.encode("latin-1")))
        if found.location:
            headers.append((b"location", found.location.encode("latin-1")))
        await send({"type": "http.response.start", "status": found.status, "headers": headers})
        await send({"type": "http.response.body", "body": found.body})
        return
    await response(scope, receive, send)
