"""The dashboard's way to the advertiser API: the same app, in process, as the viewer.

The viewer's principal (resolved from the server-side session) rides in the ASGI scope
(``adfunnel.auth.http.IN_PROCESS_PRINCIPAL``), never a key: the dashboard holds no
key after login, and the API's own checks (role areas, rate limits, each route's
ownership rules) apply to it as to a bearer of the key.

Every read and write of a page goes through the API routes (httpx over ASGI, no
socket), so the dashboard can never see or do more than the viewer's key may through
the API, and a form shows the API's own validation errors. :class:`ApiAnswer` carries
the status and JSON body; :meth:`ApiAnswer.field_errors` turns an error body
(``{"error", "fields": [{"field", "problem"}]}``) into ``{field: problem}``.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

import httpx

from adfunnel.auth.http import IN_PROCESS_PRINCIPAL

#: Host name of in-process requests (never resolved: the transport is the app itself).
INTERNAL_BASE = "http://adfunnel.internal"
#: Largest page asked of a list route; pages are followed through ``next_cursor``.
PAGE_LIMIT = 100
#: Most pages followed for one list (a dashboard page is not an export).
MAX_PAGES = 50
#: The hidden field of a create form holding its own idempotency key (one per render).
FORM_KEY = "form_key"
#: Seconds a form's second post waits for its first to finish, and between its asks.
RUNNING_WAIT_S, RUNNING_POLL_S = 10.0, 0.1


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    status: int
    body: Any
    headers: httpx.Headers

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def field_errors(self) -> dict[str, str]:
        """``{field: problem}`` of an error answer; a body without fields gives its
        ``message`` (or ``error`` code) under ``""``."""
        if self.ok:
            return {}
        body = self.body if isinstance(self.body, dict) else {}
        fields = body.get("fields") or []
        out = {str(f.get("field", "")): str(f.get("problem", "")) for f in fields
               if isinstance(f, dict)}
        if not out:
            out[""] = str(body.get("message") or body.get("error") or f"HTTP {self.status}")
        return out


    def form_errors(self) -> dict[str, str]:
        """:meth:`field_errors` of a form's write, where a refusal of the viewer
        (401, 403: not allowed; 404: not theirs, or gone) that names no field but the
        key (``authorization``) is no problem of the form (a 403 naming a field, e.g. a
        priority only an admin may set, is shown by that field).

        Raises:
            ApiFailure: the answer is such a refusal (the page answers its status and
                message, :meth:`adfunnel.ui.pages.Pages.page`).
        """
        named = set(self.field_errors()) - NOT_A_FORMS_FIELD
        if self.status in REFUSALS and not named:
            raise ApiFailure(self)
        return self.field_errors()


#: Statuses of a write that refuse the viewer, not the form's values.
REFUSALS = frozenset({401, 403, 404})
#: Fields an API refusal may name that no form has (the key, or none).
NOT_A_FORMS_FIELD = frozenset({"", "authorization"})


class ApiFailure(Exception):
    """A read the page needs was refused (the page answers with the same status)."""

    def __init__(self, answer: ApiAnswer) -> None:
        super().__init__(f"API answered {answer.status}")
        self.answer = answer


class ApiClient:
    """Requests to ``app`` as ``principal`` (an :class:`adfunnel.auth.keys.Principal`)."""

    def __init__(self, app: Any, principal: Any, request_id: str | None = None) -> None:
        headers = {"x-request-id": request_id} if request_id else {}

        async def as_viewer(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await app({**scope, IN_PROCESS_PRINCIPAL: principal}, receive, send)

        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=as_viewer),
                                         base_url=INTERNAL_BASE, headers=headers)

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def call(self, method: str, path: str, *, json: Any = None,
                   params: dict[str, Any] | None = None,
                   accept: str = "application/json",
                   idempotency_key: str | None = None) -> ApiAnswer:
        """One request; the answer whatever its status (a JSON body decoded when it is
        JSON, else its text). ``idempotency_key``: sent as ``Idempotency-Key`` (a form's
        own key, :data:`FORM_KEY`): a form posted twice makes one thing, and while the
        first post still runs the second waits for its answer (up to
        ``RUNNING_WAIT_S``) rather than showing the API's 409."""
        headers = {"Accept": accept}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        for _ in range(int(RUNNING_WAIT_S / RUNNING_POLL_S)):
            r = await self._client.request(method, path, json=json, params=params,
                                           headers=headers)
            if not (idempotency_key and r.status_code == 409
                    and r.headers.get("retry-after") is not None):
                break
            await asyncio.sleep(RUNNING_POLL_S)
        body: Any = r.text
        if r.headers.get("content-type", "").startswith("application/json"):
            body = r.json()
        return ApiAnswer(r.status_code, body, r.headers)

    async def get(self, path: str, **params: Any) -> Any:
        """The JSON body of a GET answered 2xx.

        Raises:
            ApiFailure: any other answer.
        """
        answer = await self.call("GET", path, params={k: v for k, v in params.items()
                                                      if v is not None})
        if not answer.ok:
            raise ApiFailure(answer)
        return answer.body

    async def items(self, path: str, **params: Any) -> list[Any]:
        """Every item of a list route: a plain JSON list, or ``{"items", "next_cursor"}``
        pages followed up to :data:`MAX_PAGES`.

        Raises:
            ApiFailure: a page was refused.
        """
        body = await self.get(path, **params)
        if isinstance(body, list):
            return body
        out = list(body.get("items", []))
        for _ in range(MAX_PAGES - 1):
            cursor = body.get("next_cursor")
            if not cursor:
                break
            body = await self.get(path, **params, limit=PAGE_LIMIT, cursor=cursor)
            out.extend(body.get("items", []))
        return out


def new_form_key() -> str:
    """A fresh idempotency key for one rendered create form (128 random bits)."""
    return secrets.token_urlsafe(16)


def form_key(form: Any) -> str | None:
    """The idempotency key a posted form carries (:data:`FORM_KEY`), or None."""
    value = str(form.get(FORM_KEY, "")).strip()
    return f"ui-{value}" if value else None
