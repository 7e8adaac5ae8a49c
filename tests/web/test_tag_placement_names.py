"""The tag with placement ids that are names of ``Object.prototype`` (``constructor``,
``__proto__``, ``toString``): the server accepts them as placement ids, so the tag must
ask for them like any other. It counted each placement's slots in a plain object, so
``positions["constructor"]`` started as the ``Object`` function and the slot's position
went out as ``null`` — a request the server refuses (422): the slot stayed empty.

No ad server here: Playwright answers the page's requests and keeps the select bodies.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from adfunnel.web.tag import tag_bytes

pytestmark = pytest.mark.slow

ADS = "https://ads.test"
PAGE = "https://news.test/article"
NAMES = ("constructor", "__proto__", "toString", "hasOwnProperty")


def test_placements_named_like_object_properties_send_positions(browser: Any) -> None:
    slots = "".join(f'<div data-adf-placement="{n}" data-adf-width="300" '
                    f'data-adf-height="250"></div>' for n in NAMES)
    html = (f'<!doctype html><html><head><meta charset="utf-8"><title>news</title>'
            f'<script async src="{ADS}/tag.js"></script></head><body>{slots}</body></html>')
    bodies: list[dict[str, Any]] = []

    def handle(route: Any) -> None:
        url = route.request.url
        if url == PAGE:
            route.fulfill(body=html, content_type="text/html")
        elif url == f"{ADS}/tag.js":
            route.fulfill(body=tag_bytes(), content_type="application/javascript")
        elif url == f"{ADS}/v1/ads:select":
            bodies.append(json.loads(route.request.post_data or "{}"))
            route.fulfill(status=204, headers={"access-control-allow-origin": "*"})
        else:
            route.fulfill(status=404)

    context = browser.new_context()
    page = context.new_page()
    page.route("**/*", handle)
    page.goto(PAGE)
    page.wait_for_function(
        "document.querySelectorAll('[data-adf-state=empty]').length === 4")
    positions = {b["placement"]["id"]: [s["position"] for s in b["slots"]] for b in bodies}
    assert positions == {n: [1] for n in NAMES}
    assert page.evaluate("window.adfunnel.errors") == 0
    context.close()
