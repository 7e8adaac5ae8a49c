"""The dashboard's page plumbing: the Jinja2 templates and their filters, rendering a page,
resolving a page's viewer and API client, and the answer to a successful form write.

:class:`Pages` is what every ``/ui`` route module renders through; the routes themselves
live in :mod:`adfunnel.ui.routes` and :mod:`adfunnel.ui.campaign_pages`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from functools import wraps
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from adfunnel.money import MICROS_PER_UNIT
from adfunnel.ui import views
from adfunnel.ui.api_client import FORM_KEY, ApiAnswer, ApiClient, ApiFailure, new_form_key
from adfunnel.ui.bidding import BID_STRATEGIES
from adfunnel.ui.forms import WEEKDAYS, dayparts_rows, micros_to_units, pretty_json, submitted_rows
from adfunnel.ui.selling import BUDGET_PERIODS, GOAL_METRICS, PACING_MODES, PRIORITIES
from adfunnel.ui.session import Sessions, Viewer, current_viewer, from_another_origin

HERE = Path(__file__).parent
STATIC_URL = "/ui/static"
#: Where a visitor without a live session is sent (a route of the ui router, not a file).
LOGIN_URL = "/ui/login"

Handler = Callable[..., Awaitable[Response]]
#: Every page's framing policy: no other page may frame the dashboard (a page of another
#: origin on the same site gets the SameSite=Strict cookie sent in its iframe, so it
#: could trick a click onto a framed button).
PAGE_HEADERS = {"x-frame-options": "DENY",
                "content-security-policy": "frame-ancestors 'none'"}


def make_templates(currency: str = "") -> Jinja2Templates:
    """The templates; the ``money`` filter names ``currency`` (the server's) unless a
    template passes another."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.filters["money"] = lambda micros, c=currency: views.money(micros, c)
    env.globals["CURRENCY"] = currency
    env.filters["units"] = micros_to_units
    env.filters["pretty_json"] = pretty_json
    env.globals["STATIC"] = STATIC_URL
    env.globals["TONE"] = views.STATUS_TONE
    env.globals["MICROS_PER_UNIT"] = MICROS_PER_UNIT
    env.globals["WEEKDAYS"] = WEEKDAYS
    env.globals["dayparts_rows"] = dayparts_rows
    env.globals["new_form_key"] = new_form_key
    env.globals["FORM_KEY"] = FORM_KEY
    env.globals["submitted_rows"] = submitted_rows
    env.globals["PRIORITIES"] = PRIORITIES
    env.globals["BID_STRATEGIES"] = BID_STRATEGIES
    env.globals["GOAL_METRICS"] = GOAL_METRICS
    env.globals["BUDGET_PERIODS"] = BUDGET_PERIODS
    env.globals["PACING_MODES"] = PACING_MODES
    return templates


class Pages:
    """Renders templates and wraps page handlers for one ui router; ``sessions`` resolves
    the viewer from the session cookie; money is shown in ``currency`` (the server's)."""

    def __init__(self, sessions: Sessions, currency: str = "") -> None:
        self.sessions = sessions
        self.templates = make_templates(currency)

    def render(self, request: Request, name: str, viewer: Viewer | None, status: int = 200,
               **context: Any) -> HTMLResponse:
        return self.templates.TemplateResponse(request, name, {"viewer": viewer, **context},
                                               status_code=status, headers=PAGE_HEADERS)

    def page(self, handler: Handler) -> Handler:
        """Resolve the viewer (else the login page) and open an API client as it; a
        refused read answers the same status as a page; a form posted from another
        origin's page is refused (403, :func:`refuse_other_origins`)."""
        @wraps(handler)
        async def wrapper(request: Request, *args: Any, **kwargs: Any) -> Response:
            viewer = current_viewer(request, self.sessions)
            if viewer is None:
                return RedirectResponse(LOGIN_URL, status_code=303)
            refused = self.refuse_other_origins(request, viewer)
            if refused is not None:
                return refused
            async with ApiClient(request.app, viewer.principal) as api:
                try:
                    return await handler(request, viewer, api, *args, **kwargs)
                except ApiFailure as exc:
                    return self._refused(request, viewer, exc.answer)
        # FastAPI reads the route's parameters from the signature: without these two
        sig = inspect.signature(handler)
        wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[p for n, p in sig.parameters.items() if n not in ("viewer", "api")])
        return wrapper

    def refuse_other_origins(self, request: Request, viewer: Viewer | None,
                             name: str = "error.html") -> Response | None:
        """403 (``name`` rendered) for a write a browser sent from another origin's page
        (:func:`~adfunnel.ui.session.from_another_origin`); None for a read or one of
        the dashboard's own."""
        if request.method in ("GET", "HEAD") or not from_another_origin(request):
            return None
        message = "This form was posted from another site's page; it was not applied."
        return self.render(request, name, viewer, status=403, code=403, message=message,
                           error=message)

    def _refused(self, request: Request, viewer: Viewer, answer: ApiAnswer) -> Response:
        if answer.status == 401:
            return RedirectResponse(LOGIN_URL, status_code=303)
        message = "; ".join(f"{f} {p}".strip() for f, p in answer.field_errors().items())
        return self.render(request, "error.html", viewer, status=answer.status,
                           code=answer.status, message=message)


def done(request: Request, location: str) -> Response:
    """A successful write: htmx reloads the page; a plain form follows a redirect."""
    if request.headers.get("HX-Request"):
        return Response(status_code=204, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)
