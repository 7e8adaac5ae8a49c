"""The dashboard's campaign pages under ``/ui/campaigns``: the list and the new-campaign
form, one campaign's page and its edit forms (budget, status, sale, dayparts, targeting,
ads), and its hourly report as CSV.

Each edit form writes through the API as the viewer and answers its htmx fragment or the
whole page (:mod:`adfunnel.ui.routes` tells the rules).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from adfunnel.ui import views
from adfunnel.ui.api_client import ApiAnswer, ApiClient, ApiFailure, form_key
from adfunnel.ui.bidding import bidding_fields
from adfunnel.ui.facts import ServerFacts
from adfunnel.ui.forms import (
    FieldProblem,
    dayparts_from_form,
    int_field,
    json_field,
    rows_of_errors,
    units_to_micros,
)
from adfunnel.ui.pages import Pages, done
from adfunnel.ui.selling import sale_fields
from adfunnel.ui.session import Viewer


def add_campaign_routes(router: APIRouter, pages: Pages, facts: ServerFacts) -> None:
    """Add the campaign pages and their edit forms to ``router``."""
    render, page = pages.render, pages.page

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
            body = campaign_body(form, viewer)
            answer = await api.call("POST", "/v1/campaigns", json=body,
                                    idempotency_key=form_key(form))
            errors = answer.form_errors()
        except FieldProblem as exc:
            answer, errors = None, {exc.field: exc.problem}
        if answer is not None and answer.ok:
            return done(request, f"/ui/campaigns/{answer.body['id']}")
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
            errors = rename(answer.form_errors())
        except FieldProblem as exc:
            errors = {exc.field: exc.problem}
        if not errors:
            return done(request, f"/ui/campaigns/{campaign_id}")
        context = await campaign_context(api, campaign_id)
        if request.headers.get("HX-Request"):
            return render(request, f"forms/{form_name}.html", viewer, errors=errors,
                          form=form_name, values=form, raw=raw, **context)
        return render(request, "campaign.html", viewer, status=422, errors=errors,
                      form=form_name, values=form, raw=raw, **context)

    def add_edit_form(segment: str, form_name: str, call: EditCall) -> None:
        """``POST /ui/campaigns/{id}/<segment>``: the form's API call (:data:`EDIT_FORMS`)."""
        async def handler(request: Request, viewer: Viewer, api: ApiClient,
                          campaign_id: int) -> Response:
            async def write(form: Any) -> ApiAnswer:
                method, suffix, body = call(form)
                return await api.call(method, f"/v1/campaigns/{campaign_id}{suffix}",
                                      json=body, idempotency_key=form_key(form))
            return await edit(request, viewer, api, campaign_id, form_name, write)
        handler.__name__ = f"edit_{form_name}"
        router.post(f"/ui/campaigns/{{campaign_id}}/{segment}")(page(handler))

    for segment, (form_name, call) in EDIT_FORMS.items():
        add_edit_form(segment, form_name, call)

    @router.post("/ui/campaigns/{campaign_id}/dayparts")
    @page
    async def dayparts(request: Request, viewer: Viewer, api: ApiClient,
                       campaign_id: int) -> Response:
        used: list[int] = []

        async def write(form: Any) -> ApiAnswer:
            parts, rows = dayparts_from_form(form)
            used.extend(rows)
            body = {"dayparts": parts, "version": _version(form)}
            return await api.call("PATCH", f"/v1/campaigns/{campaign_id}", json=body)
        return await edit(request, viewer, api, campaign_id, "dayparts", write,
                          lambda errors: rows_of_errors(errors, used))

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


#: An edit form's API call from its submitted form: (method, path after
#: ``/v1/campaigns/{id}``, JSON body). Raises FieldProblem for a field it cannot read.
EditCall = Callable[[Any], tuple[str, str, dict[str, Any]]]


def _version(form: Any) -> int:
    return int_field(str(form.get("version", "")), "version")


def _budget_call(form: Any) -> tuple[str, str, dict[str, Any]]:
    lifetime = form.get("lifetime_budget", "").strip()
    return "PUT", "/budget", {
        "daily_budget_micros": units_to_micros(form.get("daily_budget", ""),
                                               "daily_budget_micros"),
        "version": _version(form),
        "lifetime_budget_micros": (units_to_micros(lifetime, "lifetime_budget_micros")
                                   if lifetime else None)}


def _status_call(form: Any) -> tuple[str, str, dict[str, Any]]:
    action = "pause" if form.get("action") == "pause" else "resume"
    return "POST", f":{action}", {"version": _version(form)}


def _sale_call(form: Any) -> tuple[str, str, dict[str, Any]]:
    return "PATCH", "", {**sale_fields(form, edit=True), "version": _version(form)}


def _targeting_call(form: Any) -> tuple[str, str, dict[str, Any]]:
    return "PATCH", "", {"targeting": json_field(str(form.get("targeting", "")), "targeting"),
                         "version": _version(form)}


def _bidding_call(form: Any) -> tuple[str, str, dict[str, Any]]:
    return "PATCH", "", {**bidding_fields(form, edit=True), "version": _version(form)}


def _ad_call(form: Any) -> tuple[str, str, dict[str, Any]]:
    return "POST", "/ads", {"landing_url": form.get("landing_url", "").strip(),
                            "creative_ref": form.get("creative_ref", "").strip(),
                            "format": form.get("format", "").strip(),
                            "width": int_field(form.get("width", ""), "width"),
                            "height": int_field(form.get("height", ""), "height")}


#: The campaign page's edit forms that map one to one onto an API call (the dayparts
#: form, whose errors name its rows, has its own route): the route's last segment ->
#: (the form's name, its fragment ``forms/<name>.html``; its call).
EDIT_FORMS: dict[str, tuple[str, EditCall]] = {
    "budget": ("budget", _budget_call), "status": ("status", _status_call),
    "sale": ("sale", _sale_call), "targeting": ("targeting", _targeting_call),
    "ads": ("ad", _ad_call), "bidding": ("bidding", _bidding_call),
}


def campaign_body(form: dict[str, str], viewer: Viewer) -> dict[str, Any]:
    """The API body of the new-campaign form (money entered in units)."""
    advertiser = (viewer.advertiser_id if viewer.is_advertiser
                  else int_field(form.get("advertiser_id", ""), "advertiser_id"))
    body: dict[str, Any] = {
        "advertiser_id": advertiser,
        "name": form.get("name", ""),
        "objective": form.get("objective", "clicks"),
        "bid_type": form.get("bid_type", "CPM"),
        **bidding_fields(form, edit=False),
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
