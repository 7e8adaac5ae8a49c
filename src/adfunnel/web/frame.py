"""``GET /f?t=TOKEN``: the document an html creative is shown in.

The tag puts it in ``<iframe sandbox="allow-scripts allow-popups
allow-popups-to-escape-sandbox" src="<server>/f?t=TOKEN">``. Served from the ad server
rather than as ``srcdoc``, the markup neither inherits the page's Content-Security-Policy
(a strict page would block the ad's own scripts) nor its origin; the answer's own
``Content-Security-Policy: sandbox …`` keeps it in an opaque origin even when it is
opened on its own, outside the tag's iframe.

The token is the select answer's (``ad.token``): it names the ad, whose markup is read
from the serving catalogue. An expired token still shows its ad (a page left open); one
that is not ours, of an ad without html, or of an ad not approved (edited since, and
back in review: its markup is unreviewed) gets 404 ``not_found`` naming ``t`` (the JSON
error of every route), a request without one 422.

Macro: ``%%CLICK_URL%%`` in the markup becomes the ad's click URL (``/c?t=TOKEN``,
absolute), HTML-escaped for an attribute value, so ``<a href="%%CLICK_URL%%"
target="_blank">`` is a click that bills and lands. Open to anyone (an iframe's src).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from adfunnel.campaigns.creative import HtmlCreative
from adfunnel.http_errors import error_response
from adfunnel.tracking.token import InvalidToken, verify

FRAME_PATH = "/f"
#: Replaced in an html creative's markup by its click URL (attribute-escaped).
CLICK_URL_MACRO = "%%CLICK_URL%%"
#: The frame's own policy: what the tag's sandbox attribute says, enforced by the server.
FRAME_CSP = "sandbox allow-scripts allow-popups allow-popups-to-escape-sandbox"
_HEAD = ('<!doctype html><html><head><meta charset="utf-8"><base target="_blank">'
         "<style>html,body{margin:0;padding:0;overflow:hidden}</style></head><body>")
_HEADERS = {"content-security-policy": FRAME_CSP, "cache-control": "no-store",
            "x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}


def frame_document(markup: str, click_url: str) -> str:
    """The frame's HTML: ``markup`` (a fragment, or a whole document from ``<!doctype``
    or ``<html``) with :data:`CLICK_URL_MACRO` replaced by ``click_url`` escaped."""
    markup = markup.replace(CLICK_URL_MACRO, html.escape(click_url, quote=True))
    if markup.lstrip()[:9].lower().startswith(("<!doctype", "<html")):
        return markup
    return f"{_HEAD}{markup}</body></html>"


def frame_route(ad_of: Callable[[int], Any], keys: Callable[[], tuple[bytes, tuple[bytes, ...]]],
                now_s: Callable[[], float], public_base_url: str | None) -> Route:
    """The route of ``GET /f``. ``ad_of(ad_id)``: the serving catalogue's ad (or None);
    ``keys()``: the token key and previous keys; ``now_s()``: unix seconds of the
    domain clock; ``public_base_url``: the origin of click URLs (else the request's)."""

    def not_found() -> Response:
        return error_response(404, "not_found", [("t", "no html ad for this token")])

    async def frame(request: Request) -> Response:
        token = request.query_params.get("t")
        if not token:
            return error_response(422, "validation", [("t", "required")])
        key, previous = keys()
        try:
            claims = verify(token, key, now_s(), previous)
        except InvalidToken as exc:
            if exc.claims is None:  # not ours: nothing to show
                return not_found()
            claims = exc.claims  # expired: the ad still shows (its beacons will not bill)
        ad = ad_of(claims.ad_id)
        creative = getattr(ad, "creative", None)
        # the token names the ad, not its markup: an edit since the serve is unreviewed
        approved = getattr(ad, "approved", False)
        if not approved or not isinstance(creative, HtmlCreative):
            return not_found()
        base = public_base_url or str(request.base_url).rstrip("/")
        click = f"{base}/c?t={quote(token, safe='')}"
        return HTMLResponse(frame_document(creative.markup, click), headers=_HEADERS)

    return Route(FRAME_PATH, frame, methods=["GET"])
