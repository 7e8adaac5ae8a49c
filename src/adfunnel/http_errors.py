"""One JSON shape for every HTTP error the API returns: :class:`ApiError` and the error body.

Shapes (always a JSON object with an ``error`` code)::

    400 {"error": "malformed_json", "fields": [{"field": "body", "problem": "..."}]}
    422 {"error": "validation", "fields": [{"field": "daily_budget_micros",
                                           "problem": "must be >= 0"}, ...]}
    404 {"error": "not_found", "entity": "campaign", "id": 7, "message": "..."}
    409 {"error": "version_conflict", "entity": "campaign", "id": 7,
         "expected_version": 3, "current_version": 4, "message": "..."}
    409 {"error": "conflict", "message": "..."}
    4xx {"error": "<slug>", "message": "...", "detail": ...}   (other HTTP errors)

Field names are dotted paths into the body (``dayparts[0].end_hour``,
``targeting.all[1].attr``) or a query/path parameter name (``from``).
The handlers that answer with these shapes are ``adfunnel.api.errors``; the app builder
calls its ``install_error_handlers`` once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.responses import JSONResponse


class ApiError(Exception):
    """An error the routes raise to answer with ``status`` and a JSON body."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str | None = None,
        fields: Sequence[tuple[str, str]] = (),
        **extra: Any,
    ) -> None:
        super().__init__(message or error)
        self.status = status
        self.body: dict[str, Any] = {"error": error}
        # every error names what is at fault: the request as a whole when no field is
        fields = fields or [("request", message or error)]
        self.body["fields"] = [{"field": f, "problem": p} for f, p in fields]
        if message:
            self.body["message"] = message
        self.body.update(extra)


def validation_error(*fields: tuple[str, str]) -> ApiError:
    """HTTP 422 naming each ``(field, problem)``."""
    return ApiError(422, "validation", fields=fields)


def error_response(status: int, error: str, fields: list[tuple[str, str]],
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error answer: ``{"error", "fields": [{"field", "problem"}]}``."""
    body = {"error": error, "fields": [{"field": f, "problem": p} for f, p in fields]}
    return JSONResponse(body, status_code=status, headers=headers)
