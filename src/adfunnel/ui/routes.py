"""The dashboard's routes under ``/ui`` (server-rendered Jinja2 pages, htmx forms).

Pages::

    GET  /ui                         → the viewer's first page (or the login form)
    GET  /ui/login, POST /ui/login   API key form → server-side session (cookie: its id)
    POST /ui/logout                  ends the session
    GET  /ui/campaigns               campaign list (admin: every advertiser, ?advertiser_id=)
    POST /ui/campaigns               new campaign
    GET  /ui/campaigns/{id}          campaign page (chart, hourly table, ads, edit forms)
    POST /ui/campaigns/{id}/budget|status|sale|dayparts|targeting|ads   edit forms
                                     (sale: priority, goal, budget period, flight
                                     budget, pacing mode; adfunnel.ui.selling)
    GET  /ui/campaigns/{id}/report.csv?from=&to=   rollups per local hour as CSV
    GET  /ui/review                  pending ads (reviewer, admin); POST /ui/review/{ad}/{verdict}
    GET  /ui/explain?request_id=     one decision: winners and every candidate's reason

A form posted by htmx (``HX-Request``) answers its own fragment: with the API's field
errors next to the fields, or ``HX-Refresh`` after a successful write; posted without
JavaScript it answers a redirect (303) or the whole page with the errors. Reads and
writes go through the API as the viewer (:mod:`adfunnel.ui.api_client`): another
advertiser's campaign answers 404 here because it does there. None of these routes is
in the OpenAPI document.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from functools import wraps
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from adfunnel.money import MICROS_PER_UNIT
from adfunnel.tracking.client import parse_networks
from adfunnel.ui import views
from adfunnel.ui.api_client import ApiAnswer, ApiClient, ApiFailure
from adfunnel.ui.facts import ServerFacts
from adfunnel.ui.forms import (
    WEEKDAYS,
    FieldProblem,
    dayparts_from_form,
    dayparts_rows,
    int_field,
    json_field,
    micros_to_units,
    pretty_json,
    rows_of_errors,
    submitted_rows,
    units_to_micros,
)
from adfunnel.ui.selling import BUDGET_PERIODS, GOAL_METRICS, PACING_MODES, PRIORITIES, sale_fields
from adfunnel.ui.session import (
    COOKIE,
    SESSION_TTL_S,
    Sessions,
    Viewer,
    came_over_https,
    current_viewer,
    log_in,
    log_out,
)

HERE = Path(__file__).parent
STATIC_URL = "/ui/static"
#: Where a visitor without a live session is sent (a route of this router, not a file).
LOGIN_URL = "/ui/login"

#: Where the review queue and verdicts live in the API (auth's review routes).
REVIEW_QUEUE = "/v1/review/ads"
REVIEW_VERDICT = "/v1/ads/{ad_id}:{verdict}"

Handler = Callable[..., Awaitable[Response]]


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.filters["money"] = views.money
    env.filters["units"] = micros_to_units
    env.filters["pretty_json"] = pretty_json
    env.globals["STATIC"] = STATIC_URL
    env.globals["TONE"] = views.STATUS_TONE
    env.globals["MICROS_PER_UNIT"] = MICROS_PER_UNIT
    env.globals["WEEKDAYS"] = WEEKDAYS
    env.globals["dayparts_rows"] = dayparts_rows
    env.globals["submitted_rows"] = submitted_rows
    env.globals["PRIORITIES"] = PRIORITIES
    env.globals["GOAL_METRICS"] = GOAL_METRICS
    env.globals["BUDGET_PERIODS"] = BUDGET_PERIODS
    env.globals["PACING_MODES"] = PACING_MODES
    return templates


def make_ui_router(rt: Any, sessions: Sessions) -> APIRouter:
    """The ``/ui`` routes over an embedded runtime (:class:`adfunnel.runtime.embedded.Runtime`);
    ``sessions`` opens, resolves and ends the server-side sessions (``ApiKeys``)."""
    router = APIRouter(include_in_schema=False)
    templates = make_templates()
    facts = ServerFacts(rt)
    proxies = parse_networks(rt.settings.trusted_proxies)  # whose X-Forwarded-Proto counts

    def render(request: Request, name: str, viewer: Viewer | None, status: int = 200,
               **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, {"viewer": viewer, **context},
                                          status_code=status)

    def page(handler: Handler) -> Handler:
        """Resolve the viewer (else the login page) and open an API client as it; a
        refused read answers the same status as a page."""
        @wraps(handler)
        async def wrapper(request: Request, *args: Any, **kwargs: Any) -> Response:
            viewer = current_viewer(request, sessions)
            if viewer is None:
                return RedirectResponse(LOGIN_URL, status_code=303)
            async with ApiClient(request.app, viewer.principal) as api:
                try:
                    return await handler(request, viewer, api, *args, **kwargs)
                except ApiFailure as exc:
                    return _refused(request, viewer, exc.answer)
        # FastAPI reads the route's parameters from the signature: without these two
        sig = inspect.signature(handler)
        wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[p for n, p in sig.parameters.items() if n not in ("viewer", "api")])
        return wrapper

    def _refused(request: Request, viewer: Viewer, answer: ApiAnswer) -> Response:
        if answer.status == 401:
            return RedirectResponse(LOGIN_URL, status_code=303)
        message = "; ".join(f"{f} {p}".strip() for f, p in answer.field_errors().items())
        return render(request, "error.html", viewer, status=answer.status,
                      code=answer.status, message=message)

    # -- session --------------------------------------------------------------------------
    @router.get("/ui")
    @router.get("/ui/")
    async def home(request: Request) -> Response:
        viewer = current_viewer(request, sessions)
        if viewer is None:
            return RedirectResponse(LOGIN_URL, status_code=303)
        target = "/ui/campaigns" if viewer.sees_campaigns else "/ui/review"
        return RedirectResponse(target, status_code=303)

    @router.get(LOGIN_URL)
    async def login_form(request: Request) -> Response:
        return render(request, "login.html", None, error=None)

    @router.post(LOGIN_URL)
    async def login(request: Request) -> Response:
        form = await request.form()
        key = str(form.get("api_key", "")).strip()
        session_id = sessions.open_session(key, SESSION_TTL_S)
        if session_id is None:
            return render(request, "login.html", None, status=401,
                          error="This key is unknown or has been revoked.")
        response = RedirectResponse("/ui", status_code=303)
        log_in(response, session_id, secure=came_over_https(request, proxies))
        return response

    @router.post("/ui/logout")
    async def logout(request: Request) -> Response:
        sessions.end_session(request.cookies.get(COOKIE))
        response = RedirectResponse(LOGIN_URL, status_code=303)
        log_out(response)
        return response

    # -- campaigns ------------------------------------------------------------------------
    async def list_context(api: ApiClient, viewer: Viewer,
                           advertiser_id: int | None) -> dict[str, Any]:
        advertisers = await api.items("/v1/advertisers") if viewer.is_admin else []
        rows = await views.campaign_rows(api, facts, viewer, advertiser_id)
        return {"rows": rows, "advertisers": advertisers, "advertiser_id": advertiser_id,
                "names": {a["id"]: a["name"] for a in advertisers}, "now": facts.now()}

    @router.get("/ui/campaigns")
    @page
    async def campaigns(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        if not viewer.sees_campaigns:
            return RedirectResponse("/ui/review", status_code=303)
        raw = request.query_params.get("advertiser_id")
        advertiser_id = int(raw) if raw and raw.isdigit() else None
        context = await list_context(api, viewer, advertiser_id)
        return render(request, "campaigns.html", viewer, errors={}, values={}, **context)

    @router.post("/ui/campaigns")
    @page
    async def create_campaign(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        try:
            body = _campaign_body(form, viewer)
            answer = await api.call("POST", "/v1/campaigns", json=body)
            errors = answer.field_errors()
        except FieldProblem as exc:
            answer, errors = None, {exc.field: exc.problem}
        if answer is not None and answer.ok:
            return _done(request, f"/ui/campaigns/{answer.body['id']}")
        context = await list_context(api, viewer, None)
        return render(request, "campaigns.html", viewer, status=422, errors=errors,
                      values=form, **context)

    async def campaign_context(api: ApiClient, campaign_id: int) -> dict[str, Any]:
        return await views.campaign_page(api, facts, campaign_id)

    @router.get("/ui/campaigns/{campaign_id}")
    @page
    async def campaign(request: Request, viewer: Viewer, api: ApiClient,
                       campaign_id: int) -> Response:
        context = await campaign_context(api, campaign_id)
        return render(request, "campaign.html", viewer, errors={}, form=None, values={},
                      **context)

    async def edit(request: Request, viewer: Viewer, api: ApiClient, campaign_id: int,
                   form_name: str, write: Callable[[Any], Awaitable[ApiAnswer]],
                   rename: Callable[[dict[str, str]], dict[str, str]] = dict,
                   ) -> Response:
        """Run one edit form's write; answer its fragment or the page (module doc).
        ``rename`` maps the API's field names onto the form's."""
        raw = await request.form()
        form = {k: str(v) for k, v in raw.items()}
        try:
            answer = await write(raw)
            errors = rename(answer.field_errors())
        except FieldProblem as exc:
            errors = {exc.field: exc.problem}
        if not errors:
            return _done(request, f"/ui/campaigns/{campaign_id}")
        context = await campaign_context(api, campaign_id)
        if request.headers.get("HX-Request"):
            return render(request, f"forms/{form_name}.html", viewer, errors=errors,
                          form=form_name, values=form, raw=raw, **context)
        return render(request, "campaign.html", viewer, status=422, errors=errors,
                      form=form_name, values=form, raw=raw, **context)

    @router.post("/ui/campaigns/{campaign_id}/budget")
    @page
    async def budget(request: Request, viewer: Viewer, api: ApiClient,
                     campaign_id: int) -> Response:
        async def write(form: Any) -> ApiAnswer:
            body: dict[str, Any] = {
                "daily_budget_micros": units_to_micros(form.get("daily_budget", ""),
                                                       "daily_budget_micros"),
                "version": int_field(form.get("version", ""), "version")}
            lifetime = form.get("lifetime_budget", "").strip()
            body["lifetime_budget_micros"] = (
                units_to_micros(lifetime, "lifetime_budget_micros") if lifetime else None)
            return await api.call("PUT", f"/v1/campaigns/{campaign_id}/budget", json=body)
        return await edit(request, viewer, api, campaign_id, "budget", write)

    @router.post("/ui/campaigns/{campaign_id}/status")
    @page
    async def status(request: Request, viewer: Viewer, api: ApiClient,
                     campaign_id: int) -> Response:
        async def write(form: Any) -> ApiAnswer:
            action = "pause" if form.get("action") == "pause" else "resume"
            body = {"version": int_field(form.get("version", ""), "version")}
            return await api.call("POST", f"/v1/campaigns/{campaign_id}:{action}", json=body)
        return await edit(request, viewer, api, campaign_id, "status", write)

    @router.post("/ui/campaigns/{campaign_id}/sale")
    @page
    async def sale(request: Request, viewer: Viewer, api: ApiClient,
                   campaign_id: int) -> Response:
        async def write(form: Any) -> ApiAnswer:
            body = {**sale_fields(form, edit=True),
                    "version": int_field(str(form.get("version", "")), "version")}
            return await api.call("PATCH", f"/v1/campaigns/{campaign_id}", json=body)
        return await edit(request, viewer, api, campaign_id, "sale", write)

    def json_patch(name: str, campaign_id: int, api: ApiClient
                   ) -> Callable[[Any], Awaitable[ApiAnswer]]:
        async def write(form: Any) -> ApiAnswer:
            value = json_field(str(form.get(name, "")), name)
            body = {name: value, "version": int_field(form.get("version", ""), "version")}
            return await api.call("PATCH", f"/v1/campaigns/{campaign_id}", json=body)
        return write

    @router.post("/ui/campaigns/{campaign_id}/dayparts")
    @page
    async def dayparts(request: Request, viewer: Viewer, api: ApiClient,
                       campaign_id: int) -> Response:
        used: list[int] = []

        async def write(form: Any) -> ApiAnswer:
            parts, rows = dayparts_from_form(form)
            used.extend(rows)
            body = {"dayparts": parts,
                    "version": int_field(str(form.get("version", "")), "version")}
            return await api.call("PATCH", f"/v1/campaigns/{campaign_id}", json=body)
        return await edit(request, viewer, api, campaign_id, "dayparts", write,
                          lambda errors: rows_of_errors(errors, used))

    @router.post("/ui/campaigns/{campaign_id}/targeting")
    @page
    async def targeting(request: Request, viewer: Viewer, api: ApiClient,
                        campaign_id: int) -> Response:
        return await edit(request, viewer, api, campaign_id, "targeting",
                          json_patch("targeting", campaign_id, api))

    @router.post("/ui/campaigns/{campaign_id}/ads")
    @page
    async def new_ad(request: Request, viewer: Viewer, api: ApiClient,
                     campaign_id: int) -> Response:
        async def write(form: Any) -> ApiAnswer:
            body = {"landing_url": form.get("landing_url", "").strip(),
                    "creative_ref": form.get("creative_ref", "").strip(),
                    "format": form.get("format", "").strip(),
                    "width": int_field(form.get("width", ""), "width"),
                    "height": int_field(form.get("height", ""), "height")}
            return await api.call("POST", f"/v1/campaigns/{campaign_id}/ads", json=body)
        return await edit(request, viewer, api, campaign_id, "ad", write)

    @router.get("/ui/campaigns/{campaign_id}/report.csv")
    @page
    async def report_csv(request: Request, viewer: Viewer, api: ApiClient,
                         campaign_id: int) -> Response:
        params = {k: v for k, v in request.query_params.items() if k in ("from", "to")}
        answer = await api.call("GET", f"/v1/campaigns/{campaign_id}/report/rollups",
                                params={**params, "granularity": "hour"}, accept="text/csv")
        if not answer.ok:
            raise ApiFailure(answer)
        return Response(answer.body, media_type="text/csv; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="campaign-{campaign_id}-hourly.csv"'})

    # -- review and explain ---------------------------------------------------------------
    @router.get("/ui/review")
    @page
    async def review(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        ads = await api.items(REVIEW_QUEUE) if viewer.reviews else []
        return render(request, "review.html", viewer, ads=ads, errors={})

    @router.post("/ui/review/{ad_id}/{verdict}")
    @page
    async def verdict(request: Request, viewer: Viewer, api: ApiClient, ad_id: int,
                      verdict: str) -> Response:
        if verdict not in ("approve", "reject"):
            return render(request, "error.html", viewer, status=404, code=404,
                          message="no such verdict")
        answer = await api.call("POST", REVIEW_VERDICT.format(ad_id=ad_id, verdict=verdict))
        if answer.ok:
            return _done(request, "/ui/review")
        ads = await api.items(REVIEW_QUEUE)
        return render(request, "review.html", viewer, status=answer.status, ads=ads,
                      errors={ad_id: answer.field_errors()})

    @router.get("/ui/explain")
    @page
    async def explain(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        if not viewer.is_admin:  # explain records show every advertiser's candidates
            return render(request, "error.html", viewer, status=403, code=403,
                          message="Only admin keys may read decision records.")
        request_id = request.query_params.get("request_id", "").strip()
        record, error = None, None
        if request_id:
            answer = await api.call("GET", f"/v1/decisions/{request_id}")
            if answer.ok:
                record = answer.body
            else:
                error = "; ".join(answer.field_errors().values())
        return render(request, "explain.html", viewer, request_id=request_id,
                      record=record, error=error)

    return router


def _done(request: Request, location: str) -> Response:
    """A successful write: htmx reloads the page; a plain form follows a redirect."""
    if request.headers.get("HX-Request"):
        return Response(status_code=204, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


def _campaign_body(form: dict[str, str], viewer: Viewer) -> dict[str, Any]:
    """The API body of the new-campaign form (money entered in units)."""
    advertiser = (viewer.advertiser_id if viewer.is_advertiser
                  else int_field(form.get("advertiser_id", ""), "advertiser_id"))
    body: dict[str, Any] = {
        "advertiser_id": advertiser,
        "name": form.get("name", ""),
        "objective": form.get("objective", "clicks"),
        "bid_type": form.get("bid_type", "CPM"),
        "bid_micros": units_to_micros(form.get("bid", ""), "bid_micros"),
        "time_zone": form.get("time_zone", "UTC").strip() or "UTC",
        "flight_start": form.get("flight_start", ""),
        "billable_event": form.get("billable_event", "viewable"),
        **sale_fields(form, edit=False),
    }
    daily = form.get("daily_budget", "").strip()
    if daily:  # left out: the API's rule (optional only with budget_period flight)
        body["daily_budget_micros"] = units_to_micros(daily, "daily_budget_micros")
    end = form.get("flight_end", "").strip()
    if end:
        body["flight_end"] = end
    targeting = json_field(form.get("targeting", ""), "targeting")
    if targeting is not None:
        body["targeting"] = targeting
    return body
