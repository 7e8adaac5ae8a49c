"""The tag's MRC measurement on a publisher's page that does not style the ad.

README ("Put ads on your site", Beacons): ``viewable_url`` fires once when "at least 50 %
of its pixels" are in view for one continuous second; "the tag ships no styles". An
image ad is ``<a class="adf-ad"><span class="adf-label">Ad</span><img …></a>``: without a
stylesheet the ``<a>`` is an inline box, one line of text tall, sitting on the image's
baseline — not the ad's pixels. What is measured must be the ad itself.

No ad server here: Playwright answers every request of the page (the page, ``/tag.js``
from the package, a canned ``POST /v1/ads:select`` answer, the image) and counts the
``viewable_url`` hits.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from adfunnel.web.tag import tag_bytes

pytestmark = pytest.mark.slow

ADS = "https://ads.test"
PAGE = "https://news.test/article"
#: A 1×1 PNG, stretched by the img's width and height attributes.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGA"
                       "hKmMIQAAAABJRU5ErkJggg==")
VIEWPORT_H = 600


def _answer(creative: dict[str, Any], width: int, height: int) -> dict[str, Any]:
    return {"request_id": "r1", "ads": [{
        "slot_id": "s1", "ad_id": 1, "campaign_id": 1, "format": creative["format"],
        "width": width, "height": height, "price_micros": 1000, "billing_type": "CPM",
        "token": "tok", "impression_url": "/i?t=tok", "click_url": "/c?t=tok",
        "viewable_url": "/vi?t=tok", "house": False, "creative": creative["creative"]}]}


def _open(browser: Any, creative: dict[str, Any], width: int, height: int) -> tuple[Any, list]:
    hits: list[str] = []
    slot = (f'<div id="slot" data-adf-placement="p" data-adf-format="{creative["format"]}" '
            f'data-adf-width="{width}" data-adf-height="{height}"></div>')
    html = (f'<!doctype html><html><head><meta charset="utf-8"><title>news</title>'
            f'<script async src="{ADS}/tag.js"></script></head><body>'
            f'<p>Above the fold.</p><div id="gap1"></div>{slot}<div id="gap2"></div>'
            f"</body></html>")

    def handle(route: Any) -> None:
        url = route.request.url
        if url == PAGE:
            route.fulfill(body=html, content_type="text/html")
        elif url == f"{ADS}/tag.js":
            route.fulfill(body=tag_bytes(), content_type="application/javascript",
                          headers={"access-control-allow-origin": "*"})
        elif url == f"{ADS}/v1/ads:select":
            route.fulfill(body=json.dumps(_answer(creative, width, height)),
                          content_type="application/json",
                          headers={"access-control-allow-origin": "https://news.test"})
        elif url.startswith(f"{ADS}/vi?"):
            hits.append(url)
            route.fulfill(status=204, headers={"access-control-allow-origin": "*"})
        elif url.startswith(f"{ADS}/"):
            route.fulfill(status=204, headers={"access-control-allow-origin": "*"})
        elif url.endswith(".png"):
            route.fulfill(body=PNG, content_type="image/png")
        else:
            route.fulfill(status=404)

    context = browser.new_context(viewport={"width": 1000, "height": VIEWPORT_H})
    page = context.new_page()
    page.route("**/*", handle)
    page.goto(PAGE)
    # the slot far below the fold: 2,000 px before it and after it (CSSOM, no inline style)
    page.evaluate("for (const id of ['gap1', 'gap2'])"
                  " document.getElementById(id).style.height = '2000px'")
    page.wait_for_selector("#slot[data-adf-state=filled]")
    return page, hits


IMAGE = {"format": "banner", "creative": {"type": "image", "url": "https://cdn.test/a.png",
                                          "width": 728, "height": 90, "alt": "Ad"}}


def _scroll_so_rows_in_view(page: Any, selector: str, top_rows: int | None = None,
                            bottom_rows: int | None = None) -> float:
    """Scroll so that only the ad's first ``top_rows`` (at the viewport's bottom edge)
    or last ``bottom_rows`` (at its top edge) pixel rows are in view; returns the share
    of the ad's pixels in view."""
    return float(page.evaluate(
        """([sel, topRows, bottomRows]) => {
             const ad = document.querySelector(sel);
             const r = ad.getBoundingClientRect();
             if (topRows !== null) window.scrollBy(0, r.top - (innerHeight - topRows));
             else window.scrollBy(0, r.bottom - bottomRows);
             const s = ad.getBoundingClientRect();
             return (Math.min(s.bottom, innerHeight) - Math.max(s.top, 0)) / s.height;
           }""", [selector, top_rows, bottom_rows]))


def test_an_image_ad_a_sixth_in_view_is_not_viewable(browser: Any) -> None:
    """15 of the ad's 90 rows in view (17 % of its pixels) for two seconds: not viewable,
    nothing billed for a viewable-billed campaign. The unstyled ``<a>``'s line box is
    the bottom 17 rows of the image, all in view, so the tag counted it 100 % in view."""
    page, hits = _open(browser, IMAGE, 728, 90)
    share = _scroll_so_rows_in_view(page, "#slot img.adf-image", bottom_rows=15)
    assert share == pytest.approx(15 / 90)
    page.wait_for_timeout(2000)
    assert hits == [], "viewable_url fired with 17 % of the ad's pixels in view"
    page.context.close()


def test_an_image_ad_four_fifths_in_view_is_viewable(browser: Any) -> None:
    """72 of the ad's 90 rows in view (80 % of its pixels) for two seconds: viewable,
    once. The ``<a>``'s line box (below the image's top 72 rows) was out of view."""
    page, hits = _open(browser, IMAGE, 728, 90)
    share = _scroll_so_rows_in_view(page, "#slot img.adf-image", top_rows=72)
    assert share == pytest.approx(0.8)
    page.wait_for_timeout(2000)
    assert len(hits) == 1, "viewable_url never fired with 80 % of the ad's pixels in view"
    page.context.close()


NATIVE = {"format": "native", "creative": {
    "type": "native", "title": "A long enough title for a native ad", "body": "Its body text.",
    "sponsor": "Sponsor", "cta": "Go", "image_url": "https://cdn.test/n.png"}}


def test_a_native_ad_a_sixth_in_view_is_not_viewable(browser: Any) -> None:
    """A native ad without the publisher's styles: its ``<a>`` is inline (one line box
    per line of text); a sixth of what it shows in view for two seconds is not viewable."""
    page, hits = _open(browser, NATIVE, 600, 160)
    page.evaluate("document.querySelector('#slot img.adf-image').setAttribute('height', '120')")
    rows = int(page.evaluate("Math.round(document.getElementById('slot')"
                             ".getBoundingClientRect().height / 6)"))
    share = _scroll_so_rows_in_view(page, "#slot", bottom_rows=rows)
    assert share < 0.2
    page.wait_for_timeout(2000)
    assert hits == [], f"viewable_url fired with {share:.0%} of the native ad in view"
    page.context.close()
