"""The OpenAPI document of the whole server: FastAPI's routes, plus the lean routes it
cannot see (the ad decision, the beacons, explain, statistics, the clock, probes).

FastAPI documents its own routes from their models. The serving and tracking routes
are Starlette endpoints or bare ASGI handlers outside FastAPI (so the hot path pays for
no framework layer); :data:`LEAN_PATHS` describes them by hand and
:func:`install_openapi` merges them into the document without touching those routes.

Every error response refers to :class:`ErrorOut`, the body every 4xx really has
(``{"error", "fields": [{"field", "problem"}]}``, :mod:`adfunnel.http_errors`); the
``HTTPValidationError`` schema FastAPI declares by default (and the server never sends)
is removed. Protected operations name the ``bearer`` security scheme and their 401,
403 and 429 answers; open ones (:func:`adfunnel.auth.http.is_open`) do not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict

from adfunnel.api.idempotency import NOT_KEPT
from adfunnel.auth.http import is_open
from adfunnel.serving.request import SelectRequest, SelectResponse

#: Swagger UI (swagger-ui-dist 5.35.0) and ReDoc (redoc 2.5.4), from the npm registry,
#: with their licences: served at :data:`ASSETS_URL`.
ASSETS_DIR = Path(__file__).resolve().parent.parent / "static" / "docs"
ASSETS_URL = "/static/docs"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"

_SERVING_REF = "#/components/schemas/Serving{name}"
_ERROR = {"$ref": "#/components/schemas/ErrorOut"}
_METHODS = ("get", "put", "post", "delete", "patch")


class FieldProblem(BaseModel):
    field: str
    problem: str


class ErrorOut(BaseModel):
    """Every 4xx answer: an ``error`` code and the ``fields`` at fault, each with its
    problem; some errors add more (``message``, ``entity``, ``id``, versions)."""

    model_config = ConfigDict(extra="allow")

    error: str
    fields: list[FieldProblem]
    message: str | None = None


_WHY = {400: "Malformed request (JSON, token)", 401: "No valid API key",
        403: "The key's role may not do this", 404: "Not found (or not the caller's)",
        409: "Conflict (stale version, archived, clock backwards)",
        413: "Request body too large", 422: "Validation error naming each field",
        429: "Over the key's request rate (see Retry-After)",
        503: "A store the answer needs is unavailable (see Retry-After)"}


def _error(code: int) -> dict[str, Any]:
    return {"description": _WHY[code], "content": {"application/json": {"schema": _ERROR}}}


def _json(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": schema or {"type": "object"}}}}


def _query(name: str, description: str, *, required: bool = False,
           schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": description,
            "schema": schema or {"type": "string"}}


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


_TOKEN = _query("t", "The signed tracking token of the served ad", required=True)
_NO_CONTENT = {"description": "Recorded (or refused as invalid traffic: never billed)"}

def _pixel_responses() -> dict[str, Any]:
    """The answers of the pixel beacons ``/i`` and ``/vi`` (a fresh dict each: the
    document is amended per operation)."""
    return {
        "200": {"description": "Recorded; the 1x1 GIF",
                "content": {"image/gif": {"schema": {"type": "string", "format": "binary"}}}},
        "204": _NO_CONTENT, **{str(c): _error(c) for c in (400, 403, 503)}}


#: The routes outside FastAPI, by path and method: (tag, summary, operation fields).
LEAN_PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/v1/ads:select": {"post": {
        "tags": ["serving"], "summary": "Decide the ads of one ad request",
        "description": "200 with one ad per filled slot, or 204 (no fill, shed, late: "
                       "header x-adfunnel-outcome). The deadline counts from arrival. "
                       "Open to anyone, except \"explain\": true, which needs an admin "
                       "key (401/403 naming explain). A browser on an Origin the "
                       "placement's allowed_origins do not list: 403 naming Origin.",
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/ServingSelectRequest"}}}},
        "responses": {"200": _json("The winners",
                                     {"$ref": "#/components/schemas/ServingSelectResponse"}),
                      "204": {"description": "No ad (no fill, shed or late)"},
                      **{str(c): _error(c) for c in (400, 403, 413, 422)}}}},
    "/openrtb2/bid": {"post": {
        "tags": ["serving"], "summary": "OpenRTB 2.6 bidder endpoint: bid on an exchange's "
                                        "BidRequest",
        "description": "An OpenRTB 2.6 BidRequest; 200 with a BidResponse (one bid per imp "
                       "won, price CPM in cur, adm, nurl/burl/lurl), or 204 (no bid, shed, "
                       "late: tmax from arrival). ?nbr=1 or ext.adfunnel.nbr: a no-bid is "
                       "200 with nbr and reasons. 400 naming the field (a path such as "
                       "imp[1].id). With openrtb_exchange_keys set, x-openrtb-key is "
                       "required (401/403 naming it). README: OpenRTB.",
        "security": [{}, {"exchange_key": []}],  # no API key; the exchange's, where set
        "parameters": [_query("nbr", "1: answer a no-bid with its reasons (200)")],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"type": "object", "description": "OpenRTB 2.6 BidRequest"}}}},
        "responses": {"200": _json("A BidResponse (or a no-bid with reasons)"),
                      "204": {"description": "No bid (or shed, or late)"},
                      **{str(c): _error(c) for c in (400, 401, 403, 413, 503)}}}},
    "/i": {"get": {
        "tags": ["tracking"], "summary": "Rendered beacon: the ad was rendered in the page",
        "parameters": [_TOKEN],
        "description": "Records a render event (never billed) and, when the campaign's "
                       "billable_event was \"rendered\" at serve time (or the token "
                       "predates the claim), the billed impression. 204; 200 with a 1x1 "
                       "transparent GIF when Accept names an image type first (an <img> "
                       "pixel). 403 naming Origin for a browser on an origin the token's "
                       "placement does not allow.",
        "responses": _pixel_responses()}},
    "/vi": {"get": {
        "tags": ["tracking"],
        "summary": "Viewable beacon: the ad met the MRC viewable standard",
        "parameters": [_TOKEN],
        "description": "Records a viewable event (never billed) and, when the campaign's "
                       "billable_event was \"viewable\" at serve time, the billed "
                       "impression (once per served ad). Answers as /i: 204, or the 1x1 "
                       "GIF for an <img>; 400 naming t for a bad token; 403 naming Origin.",
        "responses": _pixel_responses()}},
    "/c": {"get": {
        "tags": ["tracking"], "summary": "Click: redirect to the ad's landing URL",
        "parameters": [_TOKEN],
        "responses": {"302": {"description": "To the landing URL (URI form)",
                              "headers": {"Location": {"schema": {"type": "string"}}}},
                      **{str(c): _error(c) for c in (400, 404, 503)}}}},
    "/v": {method: {
        "tags": ["tracking"], "summary": "Conversion pixel",
        "description": "Attributes a conversion only to the click id the click's redirect "
                       "carried (adf_click_id); a serve token is refused (400).",
        "parameters": [_query("click_id", "The click id the landing URL received"),
                       _query("value", "Conversion value, integer micros",
                              schema={"type": "integer", "minimum": 0})],
        "responses": {"204": _NO_CONTENT,
                      **{str(c): _error(c) for c in (400, 403, 422, 503)}}}
        for method in ("get", "post")},
    **{path: {"get": {
        "tags": ["tracking"], "summary": summary,
        "description": "An exchange's OpenRTB notice (README, \"OpenRTB notices\"); open, "
                       "worthless without the bid's signed token. 204; 400 naming t, p, r "
                       "or m (a refused token, or price: missing, unsubstituted, negative, "
                       "not a number, above the bid).",
        "parameters": [_TOKEN, *params],
        "responses": {"204": {"description": "Taken (a replay records nothing again)"},
                      **{str(c): _error(c) for c in (400, 503)}}}}
        for path, summary, params in (
            ("/rtb/bill", "Billing notice (burl): bills the clearing price once",
             [_query("p", "${AUCTION_PRICE}: the clearing price, CPM", required=True)]),
            ("/rtb/win", "Win notice (nurl): records the clearing price, bills nothing",
             [_query("p", "${AUCTION_PRICE}: the clearing price, CPM", required=True)]),
            ("/rtb/loss", "Loss notice (lurl): releases the bid's reservation",
             [_query("r", "${AUCTION_LOSS}: the loss reason code"),
              _query("m", "${AUCTION_MIN_TO_WIN}: the minimum bid to win, CPM")]))},
    "/v1/decisions/{request_id}": {"get": {
        "tags": ["explain"], "summary": "Explain a recent decision",
        "description": "Winners, prices and every rejection with its reason. The record of "
                       "the first decision named request_id, or of the latest explain "
                       "request named so: no other select replaces it.",
        "parameters": [_path("request_id")],
        "responses": {"200": _json("The explain record"), "404": _error(404)}}},
    "/v1/ledger/stats": {"get": {
        "tags": ["statistics"], "summary": "Ledger rows, duplicates, invalid traffic, lag",
        "responses": {"200": _json("Ledger statistics")}}},
    "/v1/serving/stats": {"get": {
        "tags": ["statistics"], "summary": "Decisions, late, shed, rejections per reason",
        "responses": {"200": _json("Serving statistics")}}},
    "/v1/budget/pacing": {"get": {
        "tags": ["statistics"], "summary": "The embedded budget service's pacing summary",
        "responses": {"200": _json("Pacing summary"), "404": _error(404)}}},
    "/v1/admin/clock": {"put": {
        "tags": ["admin"], "summary": "Move the manual clock forward",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["now"], "additionalProperties": False,
            "properties": {"now": {"type": "string", "format": "date-time"}}}}}},
        "responses": {"200": _json("The clock's new time", {
            "type": "object", "properties": {"now": {"type": "string"}}}),
            **{str(c): _error(c) for c in (400, 409, 422)}}}},
    "/v1/admin/events:settle": {"post": {
        "tags": ["admin"], "summary": "Wait until the aggregator has recorded every event",
        "description": "Returns once this process's aggregator has recorded every event "
                       "stored in the log so far (and the spool is empty).",
        "responses": {"200": _json("Settled", {
            "type": "object", "properties": {"settled": {"type": "boolean"}}}),
            "503": _error(503)}}},
    "/v1/users/{key}": {"delete": {
        "tags": ["admin"],
        "summary": "Erase one user: frequency-cap records and served-log records",
        "parameters": [_path("key")],
        "responses": {"204": {"description": "Erased"}, "503": _error(503)}}},
    "/metrics": {"get": {
        "tags": ["statistics"], "summary": "Prometheus metrics",
        "responses": {"200": {"description": "Prometheus text format",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/v1/bench/noop": {"get": {
        "tags": ["probes"], "summary": "No work: the bare-route baseline of bench http",
        "responses": {"204": {"description": "Nothing"}}}},
    "/healthz": {"get": {
        "tags": ["probes"], "summary": "Liveness",
        "responses": {"200": _json("Alive", {"type": "object", "properties": {
            "status": {"type": "string"}}})}}},
    "/readyz": {"get": {
        "tags": ["probes"], "summary": "Readiness: the catalogue follows the change log",
        "responses": {"200": _json("Ready"), "503": _json("Not ready")}}},
    "/tag.js": {"get": {
        "tags": ["web"], "summary": "The JavaScript ad tag a page includes once",
        "description": "Open. ETag (If-None-Match: 304) and Cache-Control: public, "
                       "max-age=300. See README, Put ads on your site.",
        "responses": {"200": {"description": "The tag",
                              "content": {"application/javascript": {
                                  "schema": {"type": "string"}}}},
                      "304": {"description": "Not modified"}}}},
    "/f": {"get": {
        "tags": ["web"], "summary": "The sandboxed frame of an html ad",
        "description": "Open. The markup of the ad a select answer's token names, its "
                       "%%CLICK_URL%% macro replaced, with Content-Security-Policy: sandbox "
                       "allow-scripts allow-popups allow-popups-to-escape-sandbox; 404 "
                       "for a token that is not ours or not of an html ad.",
        "parameters": [_TOKEN],
        "responses": {"200": {"description": "The ad's document", "content": {"text/html": {
            "schema": {"type": "string"}}}}, "404": _error(404), "422": _error(422)}}},
}


#: The optional header of every protected POST (:mod:`adfunnel.api.idempotency`).
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": False,
    "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"},
    "description": "Your own key for this request (a UUID): the same request sent again "
                   "with it answers the first's 2xx answer (Idempotent-Replayed: true) "
                   "and makes nothing more; kept 24 h; another request with it is 422, "
                   "a retry while the first runs 409"}


def build_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of ``app``'s FastAPI routes merged with :data:`LEAN_PATHS`
    (for those of them ``app`` serves), errors as :class:`ErrorOut`."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    error = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(error.pop("$defs", {}))
    schemas["ErrorOut"] = error
    # the serving plane's msgspec types, prefixed: their names (AdOut …) are taken
    (_, _), served = msgspec.json.schema_components(
        (SelectRequest, SelectResponse), ref_template=_SERVING_REF, schema_hook=_any)
    schemas.update({f"Serving{name}": body for name, body in served.items()})
    for path, item in LEAN_PATHS.items():
        doc.setdefault("paths", {}).setdefault(path, {}).update(item)
    doc["components"]["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer",
                   "description": "An API key (POST /v1/api-keys)"},
        "exchange_key": {"type": "apiKey", "in": "header", "name": "x-openrtb-key",
                         "description": "An exchange's key (openrtb_exchange_keys); "
                                        "needed only where any is set"}}
    for path, item in doc.get("paths", {}).items():
        for method in _METHODS:
            if method in item:
                _complete(path, method, item[method])
    return doc


def _complete(path: str, method: str, op: dict[str, Any]) -> None:
    """Errors as ErrorOut; the security, 401, 403 and 429 of protected operations."""
    responses = op.setdefault("responses", {})
    for code, answer in responses.items():
        if code.startswith("4"):
            answer["content"] = {"application/json": {"schema": _ERROR}}
            answer.setdefault("description", _WHY.get(int(code), "Error"))
    if "requestBody" in op:
        for code in (400, 413, 422):
            responses.setdefault(str(code), _error(code))
    if op.get("parameters"):
        responses.setdefault("422", _error(422))
    if is_open(path):
        op.setdefault("security", [])  # an open route's own scheme, else none
        return
    op["security"] = [{"bearer": []}]
    for code in (401, 403, 429):
        responses.setdefault(str(code), _error(code))
    if "{" in path:
        responses.setdefault("404", _error(404))
    if method != "get":  # a stale version, an archived record, a taken id
        responses.setdefault("409", _error(409))
    if method == "post" and path.startswith("/v1/") and path not in NOT_KEPT:
        op.setdefault("parameters", []).append(_IDEMPOTENCY_KEY)
        responses.setdefault("400", _error(400))  # a malformed key
        responses.setdefault("422", _error(422))  # a key reused for another request


def _any(t: type) -> dict[str, Any]:
    if t is object:  # a request attribute's value: checked by the decoder, any JSON here
        return {"description": "any JSON value"}
    raise NotImplementedError(t)


def install_openapi(app: FastAPI) -> None:
    """Serve :func:`build_document` at ``app.openapi_url`` (built once, on first use),
    and Swagger UI at ``/docs`` and ReDoc at ``/redoc`` from assets in the package
    (:data:`ASSETS_DIR`, under ``/static/docs``): the pages load nothing from the
    network. Build ``app`` with ``docs_url=None, redoc_url=None``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    spec = app.openapi_url or "/openapi.json"

    async def swagger(_: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=spec, title=f"{app.title} API", oauth2_redirect_url=OAUTH2_REDIRECT,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png")

    async def oauth2_redirect(_: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(_: Request) -> HTMLResponse:
        return get_redoc_html(openapi_url=spec, title=f"{app.title} API",
                              redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
                              with_google_fonts=False)

    app.add_route("/docs", swagger, methods=["GET"], include_in_schema=False)
    app.add_route(OAUTH2_REDIRECT, oauth2_redirect, methods=["GET"], include_in_schema=False)
    app.add_route("/redoc", redoc, methods=["GET"], include_in_schema=False)
