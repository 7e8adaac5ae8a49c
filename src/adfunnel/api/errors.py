"""The API's exception handlers: every error a route raises becomes the one JSON error
shape of :mod:`adfunnel.http_errors`.

Request validation (400 malformed JSON, 422 naming each field), :class:`ApiError`, the
targeting room's :class:`TargetingError` and the campaign store's errors (422
:class:`InvalidChange`, 404 :class:`NotFound`, 409 :class:`VersionConflict`) and every
other HTTP error. The app builder calls :func:`install_error_handlers` once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from adfunnel.campaigns.errors import InvalidChange, NotFound, VersionConflict
from adfunnel.http_errors import ApiError
from adfunnel.targeting.expr import TargetingError

_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


def field_path(loc: Iterable[str | int]) -> str:
    """``("body", "dayparts", 0, "end_hour")`` → ``dayparts[0].end_hour``."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] in _LOCATIONS:
        parts = parts[1:]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or "body"


def problem_text(err: dict[str, Any]) -> str:
    """A short human text for one pydantic error (``must be >= 0``, ``unknown field``)."""
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    loc = err.get("loc") or ()
    name = str(loc[-1]) if loc else ""
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        if name.endswith("_micros"):
            return "must be an integer number of micros"
        return "must be an integer"
    if kind in ("string_type", "str_type"):
        return "must be a string"
    if kind == "bool_type":
        return "must be true or false"
    for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if kind.startswith(("greater_than", "less_than")) and key in ctx:
            return f"must be {op} {ctx[key]}"
    if kind in ("enum", "literal_error"):
        return f"must be one of {ctx.get('expected', '')}".strip()
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a JSON object"
    if kind == "list_type":
        return "must be a list"
    if kind.startswith("date"):
        return "must be a date YYYY-MM-DD"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} item(s)"
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else str(err.get("msg"))
    if kind == "string_too_long":
        return f"longer than {ctx.get('max_length')} characters"
    msg = str(err.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


def _json(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(status_code=status, content=body)


async def _on_request_validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    bad_json = [e for e in errors if e.get("type") == "json_invalid"]
    if bad_json:
        e = bad_json[0]
        ctx = e.get("ctx") or {}
        pos = e["loc"][-1] if len(e.get("loc", ())) > 1 else "?"
        problem = f"invalid JSON at position {pos}: {ctx.get('error', e.get('msg'))}"
        return _json(
            400, {"error": "malformed_json", "fields": [{"field": "body", "problem": problem}]}
        )
    fields = [{"field": field_path(e.get("loc", ())), "problem": problem_text(e)} for e in errors]
    return _json(422, {"error": "validation", "fields": fields})


async def _on_api_error(_request: Request, exc: ApiError) -> JSONResponse:
    return _json(exc.status, exc.body)


async def _on_targeting(_request: Request, exc: TargetingError) -> JSONResponse:
    return _json(
        422, {"error": "validation", "fields": [{"field": exc.path, "problem": exc.problem}]}
    )


async def _on_invalid_change(_request: Request, exc: InvalidChange) -> JSONResponse:
    fields = [{"field": f, "problem": p} for f, p in exc.problems]
    return _json(422, {"error": "validation", "fields": fields})


async def _on_not_found(_request: Request, exc: NotFound) -> JSONResponse:
    body = {"error": "not_found", "entity": exc.entity, "id": exc.entity_id, "message": str(exc),
            "fields": [{"field": f"{exc.entity}_id", "problem": "not found"}]}
    return _json(404, body)


async def _on_conflict(_request: Request, exc: VersionConflict) -> JSONResponse:
    body = {
        "error": "version_conflict",
        "entity": exc.entity,
        "id": exc.entity_id,
        "expected_version": exc.expected,
        "current_version": exc.current,
        "message": str(exc),
        "fields": [{"field": "version",
                    "problem": f"stale: expected {exc.expected}, current is {exc.current}"}],
    }
    return _json(409, body)


_SLUGS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}


async def _on_http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    detail = exc.detail
    body: dict[str, Any] = {
        "error": _SLUGS.get(exc.status_code, "http_error"),
        "message": detail if isinstance(detail, str) else str(exc.status_code),
        "detail": detail,
        "fields": [{"field": "request",
                    "problem": detail if isinstance(detail, str) else str(exc.status_code)}],
    }
    return JSONResponse(status_code=exc.status_code, content=body, headers=exc.headers)


def install_error_handlers(app: FastAPI) -> None:
    """Register the JSON error handlers above on ``app`` (call once per app)."""
    app.add_exception_handler(RequestValidationError, _on_request_validation)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _on_api_error)  # type: ignore[arg-type]
    app.add_exception_handler(TargetingError, _on_targeting)  # type: ignore[arg-type]
    app.add_exception_handler(InvalidChange, _on_invalid_change)  # type: ignore[arg-type]
    app.add_exception_handler(NotFound, _on_not_found)  # type: ignore[arg-type]
    app.add_exception_handler(VersionConflict, _on_conflict)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http)  # type: ignore[arg-type]
