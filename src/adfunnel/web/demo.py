"""The demo's pages: ``GET /demo`` (a long article with three placements, filled by the
tag from this server), ``GET /demo/landing`` (where the demo ads' clicks land: it shows
the ``adf_click_id`` it received) and ``GET /demo/assets/<file>`` (its stylesheet and the
demo creatives' images). Open to anyone; served only while the demo is on
(``Settings.demo``).

Every page is sent with :data:`DEMO_CSP`, a strict Content-Security-Policy (this origin
only: no inline script or style, no eval), which shows that the tag works under one.
"""

from __future__ import annotations

import html
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

#: The demo's files (package data).
DEMO_DIR = Path(__file__).resolve().parents[1] / "static" / "demo"
#: The files ``/demo/assets/`` serves, and their media types.
ASSETS = {"demo.css": "text/css; charset=utf-8", "banner-728x90.png": "image/png",
          "thumb-160.png": "image/png"}
#: This origin only, for everything; no inline script or style, no plugins, no framing.
DEMO_CSP = ("default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
            "frame-ancestors 'none'")
_PAGE_HEADERS = {"content-security-policy": DEMO_CSP, "cache-control": "no-cache",
                 "x-content-type-options": "nosniff", "referrer-policy": "strict-origin"}
_LANDING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Northwind Cycles (demo landing page)</title>
<link rel="stylesheet" href="/demo/assets/demo.css"></head>
<body><div class="landing"><h1>Northwind Cycles</h1>
<p>You landed here from a demo ad. The ad server sent its click id along:</p>
<p id="click-id-line">adf_click_id: <code id="click-id">{click_id}</code></p>
<p>An advertiser keeps this id and posts it back with a conversion
(<code>POST /v1/conversions</code>), which bills once.</p>
<p><a href="/demo">Back to the article</a></p></div></body></html>
"""


def demo_routes() -> list[Route]:
    """The routes of ``/demo``, ``/demo/landing`` and ``/demo/assets/{name}`` (files read
    once, here)."""
    article = (DEMO_DIR / "article.html").read_bytes()
    assets = {name: (DEMO_DIR / name).read_bytes() for name in ASSETS}

    async def page(_: Request) -> Response:
        return HTMLResponse(article, headers=_PAGE_HEADERS)

    async def landing(request: Request) -> Response:
        click_id = request.query_params.get("adf_click_id") or "(none)"
        return HTMLResponse(_LANDING.format(click_id=html.escape(click_id[:1024])),
                            headers=_PAGE_HEADERS)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in assets:
            return Response(status_code=404)
        return Response(assets[name], media_type=ASSETS[name],
                        headers={"cache-control": "public, max-age=3600",
                                 "x-content-type-options": "nosniff"})

    return [Route("/demo", page, methods=["GET"]),
            Route("/demo/landing", landing, methods=["GET"]),
            Route("/demo/assets/{name}", asset, methods=["GET"])]
