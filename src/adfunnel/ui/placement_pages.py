"""The operator's placement pages of the dashboard (admin only): the placements, and one
placement's report — requests, fill, impressions, revenue and eCPM in total, by tier and
per local day or hour, in the server's currency — read from
``GET /v1/placements/{id}/report`` as the viewer (:mod:`adfunnel.api.placement_report`).

Pages::

    GET /ui/placements                 configured placements, each linked to its page
    GET /ui/placements/{id}?from=&to=&granularity=&time_zone=   the placement's report

A report the API refuses (a bad date, zone or granularity) shows the API's field errors
above the form; an unknown placement answers 404, a viewer who is not an admin 403.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from adfunnel.serving.tiers import TIERS
from adfunnel.ui.api_client import ApiClient
from adfunnel.ui.pages import Pages
from adfunnel.ui.session import Viewer

#: The report's query parameters a page passes on (empty ones are left out).
REPORT_PARAMS = ("from", "to", "granularity", "time_zone")
ADMIN_ONLY = "Only admin keys may read placements and their reports."


def add_placement_routes(router: APIRouter, pages: Pages) -> None:
    """Add the placement list and report pages to ``router``."""
    render, page = pages.render, pages.page

    @router.get("/ui/placements")
    @page
    async def placements(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        if not viewer.is_admin:
            return render(request, "error.html", viewer, status=403, code=403,
                          message=ADMIN_ONLY)
        items = await api.items("/v1/placements")
        return render(request, "placements.html", viewer, placements=items)

    @router.get("/ui/placements/{placement_id}")
    @page
    async def placement(request: Request, viewer: Viewer, api: ApiClient,
                        placement_id: str) -> Response:
        if not viewer.is_admin:
            return render(request, "error.html", viewer, status=403, code=403,
                          message=ADMIN_ONLY)
        query = {k: request.query_params[k].strip() for k in REPORT_PARAMS
                 if request.query_params.get(k, "").strip()}
        answer = await api.call("GET", f"/v1/placements/{quote(placement_id, safe='')}/report",
                                params=query)
        if answer.status == 404:
            return render(request, "error.html", viewer, status=404, code=404,
                          message=f"No placement {placement_id} (neither configured nor "
                                  "ever requested).")
        report = answer.body if answer.ok else None
        errors = {} if answer.ok else answer.form_errors()
        return render(request, "placement.html", viewer, status=answer.status,
                      placement_id=placement_id, report=report, errors=errors, query=query,
                      tiers=TIERS)
