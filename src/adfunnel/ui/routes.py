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
    GET  /ui/placements              placements (admin), each linked to its report page
    GET  /ui/placements/{id}?from=&to=&granularity=&time_zone=   a placement's requests,
                                     fill, revenue and eCPM: totals, by tier, per day or
                                     hour (admin; adfunnel.ui.placement_pages)
    GET  /ui/review                  pending ads (reviewer, admin); POST /ui/review/{ad}/{verdict}
                                     (form field ``version``: the ad as shown, 409 if edited since)
    GET  /ui/explain?request_id=     one decision: winners and every candidate's reason
    GET  /ui/forecasts, POST /ui/forecasts   availability forecast form and answer (admin)

A form posted by htmx (``HX-Request``) answers its own fragment: with the API's field
errors next to the fields, or ``HX-Refresh`` after a successful write; posted without
JavaScript it answers a redirect (303) or the whole page with the errors. Reads and
writes go through the API as the viewer (:mod:`adfunnel.ui.api_client`): another
advertiser's campaign answers 404 here because it does there. None of these routes is
in the OpenAPI document.

This module holds the session, review and explain routes and assembles the router; the
campaign pages are in :mod:`adfunnel.ui.campaign_pages`, the rendering and the viewer
check every page shares in :mod:`adfunnel.ui.pages`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from adfunnel.tracking.client import parse_networks
from adfunnel.ui.api_client import ApiClient
from adfunnel.ui.campaign_pages import add_campaign_routes
from adfunnel.ui.facts import ServerFacts
from adfunnel.ui.forecast_pages import add_forecast_routes
from adfunnel.ui.pages import LOGIN_URL, Pages, done
from adfunnel.ui.placement_pages import add_placement_routes
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

#: Where the review queue and verdicts live in the API (auth's review routes).
REVIEW_QUEUE = "/v1/review/ads"
REVIEW_VERDICT = "/v1/ads/{ad_id}:{verdict}"


def make_ui_router(rt: Any, sessions: Sessions) -> APIRouter:
    """The ``/ui`` routes over an embedded runtime (:class:`adfunnel.runtime.embedded.Runtime`);
    ``sessions`` opens, resolves and ends the server-side sessions (``ApiKeys``)."""
    router = APIRouter(include_in_schema=False)
    pages = Pages(sessions, rt.settings.currency)
    render, page = pages.render, pages.page
    proxies = parse_networks(rt.settings.trusted_proxies)  # whose X-Forwarded-Proto counts

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
        refused = pages.refuse_other_origins(request, None, "login.html")
        if refused is not None:  # another origin's page would log the browser in as it
            return refused
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
        refused = pages.refuse_other_origins(request, current_viewer(request, sessions))
        if refused is not None:
            return refused
        sessions.end_session(request.cookies.get(COOKIE))
        response = RedirectResponse(LOGIN_URL, status_code=303)
        log_out(response)
        return response


    add_campaign_routes(router, pages, ServerFacts(rt))
    add_forecast_routes(router, pages)
    add_placement_routes(router, pages)

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
        # the version of the ad the page showed: an edit since is refused (409), never
        # approved unseen
        seen = str((await request.form()).get("version", "")).strip()
        body = {"version": int(seen)} if seen.isascii() and seen.isdigit() else None
        answer = await api.call("POST", REVIEW_VERDICT.format(ad_id=ad_id, verdict=verdict),
                                json=body)
        if answer.ok:
            return done(request, "/ui/review")
        ads = await api.items(REVIEW_QUEUE)
        return render(request, "review.html", viewer, status=answer.status, ads=ads,
                      errors={ad_id: answer.form_errors()})

    @router.get("/ui/explain")
    @page
    async def explain(request: Request, viewer: Viewer, api: ApiClient) -> Response:
        if not viewer.is_admin:  # explain records show every advertiser's candidates
            return render(request, "error.html", viewer, status=403, code=403,
                          message="Only admin keys may read decision records.")
        request_id = request.query_params.get("request_id", "").strip()
        record, error = None, None
        if request_id:
            # quoted whole: a ``../`` in the id must not aim the call at another route
            answer = await api.call("GET", f"/v1/decisions/{quote(request_id, safe='')}")
            if answer.ok:
                record = answer.body
            else:
                error = "; ".join(answer.field_errors().values())
        return render(request, "explain.html", viewer, request_id=request_id,
                      record=record, error=error)

    return router
