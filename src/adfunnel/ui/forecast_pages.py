"""The dashboard's availability forecast (admin): ``/ui/forecasts``, a form that asks
``POST /v1/forecasts`` as the viewer and shows the answer — what matches, what is left
after the booked lines, which lines take from it and the forecast's basis (issue #26).

A forecast names every booked line, so the page, like the API route, is the admin's.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from adfunnel.ui.api_client import ApiClient
from adfunnel.ui.forms import FieldProblem, int_field, json_field
from adfunnel.ui.pages import Pages
from adfunnel.ui.session import Viewer

FORECASTS = "/v1/forecasts"


def add_forecast_routes(router: APIRouter, pages: Pages) -> None:
    """``GET /ui/forecasts`` (the empty form) and ``POST /ui/forecasts`` (the answer, or
    the form again with its fields' problems, 422)."""
    render, page = pages.render, pages.page

    def refuse(request: Request, viewer: Viewer) -> Response:
        return render(request, "error.html", viewer, status=403, code=403,
                      message="Only admin keys may ask for availability forecasts: a "
                              "forecast names every booked line.")

    @router.get("/ui/forecasts")
    @page
    async def forecast_form(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        if not viewer.is_admin:
            return refuse(request, viewer)
        return render(request, "forecast.html", viewer, values={"time_zone": "UTC"},
                      errors={}, answer=None)

    @router.post("/ui/forecasts")
    @page
    async def forecast_answer(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        if not viewer.is_admin:
            return refuse(request, viewer)
        form = {k: str(v) for k, v in (await request.form()).items()}
        try:
            answer = await api.call("POST", FORECASTS, json=forecast_body(form))
            errors = answer.form_errors()
        except FieldProblem as exc:
            answer, errors = None, {exc.field: exc.problem}
        if answer is None or not answer.ok:
            return render(request, "forecast.html", viewer, status=422, values=form,
                          errors=errors, answer=None)
        return render(request, "forecast.html", viewer, values=form, errors={},
                      answer=answer.body)


def forecast_body(form: dict[str, str]) -> dict[str, Any]:
    """The API body of the forecast form: placements comma-separated (none: every
    placement), targeting as JSON (empty: none), the goal optional.

    Raises:
        FieldProblem: the targeting is not JSON, or the goal not a whole number.
    """
    body: dict[str, Any] = {
        "placements": [p.strip() for p in form.get("placements", "").split(",") if p.strip()],
        "flight_start": form.get("flight_start", "").strip(),
        "flight_end": form.get("flight_end", "").strip(),
        "time_zone": form.get("time_zone", "").strip() or "UTC",
    }
    targeting = json_field(form.get("targeting", ""), "targeting")
    if targeting is not None:
        body["targeting"] = targeting
    goal = form.get("goal", "").strip()
    if goal:
        body["goal"] = int_field(goal, "goal")
    return body
