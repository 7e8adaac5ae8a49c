"""The dashboard's in-process API client over a small real ASGI app: plain lists and
cursor pages, field errors, the viewer's principal (never a key) on every request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse

from adfunnel.auth.http import IN_PROCESS_PRINCIPAL
from adfunnel.auth.keys import Principal, Role
from adfunnel.ui.api_client import ApiClient, ApiFailure

VIEWER = Principal(Role.ADVERTISER, 7, "k-123")

ITEMS = list(range(7))


def app() -> FastAPI:
    api = FastAPI()

    @api.get("/plain")
    def plain(request: Request) -> list[Any]:
        held = request.scope[IN_PROCESS_PRINCIPAL]
        return [held.key_prefix, request.headers.get("authorization")]

    @api.get("/paged")
    def paged(limit: int = Query(3), cursor: int = Query(0)) -> dict[str, Any]:
        page = ITEMS[cursor:cursor + min(limit, 3)]
        nxt = cursor + len(page)
        return {"items": page, "next_cursor": str(nxt) if nxt < len(ITEMS) else None}

    @api.post("/refuse")
    def refuse() -> JSONResponse:
        return JSONResponse({"error": "validation", "fields": [
            {"field": "targeting.all[0].attr", "problem": "unknown attribute"}]},
            status_code=422)

    seen: list[str | None] = []

    @api.post("/busy")
    def busy(request: Request) -> JSONResponse:
        """In progress twice (409 with Retry-After, as the idempotency middleware
        answers), then made."""
        seen.append(request.headers.get("idempotency-key"))
        if len(seen) < 3:
            return JSONResponse({"error": "idempotency_key_in_progress", "fields": []},
                                status_code=409, headers={"Retry-After": "1"})
        return JSONResponse({"id": 5}, status_code=201)

    api.state.seen = seen

    @api.get("/gone")
    def gone() -> JSONResponse:
        return JSONResponse({"error": "not_found", "message": "no campaign 9"},
                            status_code=404)

    return api


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_items_follow_cursor_pages_and_plain_lists() -> None:
    async def go() -> tuple[list[Any], list[Any]]:
        async with ApiClient(app(), VIEWER) as api:
            return await api.items("/paged"), await api.items("/plain")
    paged, plain = run(go())
    assert paged == ITEMS
    assert plain == ["k-123", None]  # the principal rides in the scope; no key is sent


def test_field_errors_and_refused_reads() -> None:
    async def go() -> dict[str, str]:
        async with ApiClient(app(), VIEWER) as api:
            answer = await api.call("POST", "/refuse", json={})
            assert not answer.ok and answer.status == 422
            with pytest.raises(ApiFailure) as err:
                await api.get("/gone")
            assert err.value.answer.field_errors() == {"": "no campaign 9"}
            return answer.field_errors()
    assert run(go()) == {"targeting.all[0].attr": "unknown attribute"}


def test_a_keyed_post_waits_while_its_first_runs() -> None:
    """A form's second post, answered 409 in progress, asks again until the first's
    answer is there (the API's kept 201); without a key a 409 is the answer. Red when
    the client returns the first 409."""
    api_app = app()

    async def go() -> tuple[int, int]:
        async with ApiClient(api_app, VIEWER) as api:
            keyed = await api.call("POST", "/busy", json={}, idempotency_key="ui-k")
            api_app.state.seen.clear()
            bare = await api.call("POST", "/busy", json={})
            return keyed.status, bare.status
    assert run(go()) == (201, 409)
    assert api_app.state.seen == [None]
