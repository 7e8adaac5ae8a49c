"""The select answer carries each winner's creative with content, through HTTP on a real
embedded app; an html creative serves only where the placement lists the ``html`` format
(reason ``html_not_allowed`` elsewhere, on both decision paths)."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from adfunnel.clock import monotonic_ms
from adfunnel.runtime.embedded import Runtime
from adfunnel.serving.decision import HTML_NOT_ALLOWED
from adfunnel.serving.request import decode_request
from tests.serving.helpers import ad_request, make_campaign

NATIVE: dict[str, Any] = {
    "type": "native", "title": "<script>alert(1)</script> Fast cars",
    "body": "Drive <b>today</b>", "sponsor": "Acme", "cta": "Shop now",
    "image_url": "https://cdn.test/a.png",
}
HTML_SLOT = [{"id": "s1", "position": 1, "width": 300, "height": 250, "format": "html"}]


def test_the_answer_carries_the_creative_verbatim(client: TestClient) -> None:
    make_campaign(client, ad={"creative": NATIVE})
    r = client.post("/v1/ads:select", json=ad_request())
    assert r.status_code == 200, r.text
    ad = r.json()["ads"][0]
    assert ad["creative"] == NATIVE  # markup in a title is data, sent as given
    assert ad["creative_ref"] == "cr/1.png"  # beside the existing fields
    assert {"token", "impression_url", "click_url", "price_micros"} <= ad.keys()


def test_an_ad_without_a_creative_answers_as_before(client: TestClient) -> None:
    make_campaign(client)
    ad = client.post("/v1/ads:select", json=ad_request()).json()["ads"][0]
    assert "creative" not in ad
    assert ad["creative_ref"] == "cr/1.png"


def test_an_image_creative_is_served(client: TestClient) -> None:
    image = {"type": "image", "url": "https://cdn.test/i.png", "width": 600, "height": 500,
             "alt": "A car"}
    make_campaign(client, ad={"creative": image, "creative_ref": None})
    ad = client.post("/v1/ads:select", json=ad_request()).json()["ads"][0]
    assert ad["creative"] == image and ad["creative_ref"] == ""


def _html_campaign(client: TestClient) -> None:
    make_campaign(client, ad={"format": "html",
                              "creative": {"type": "html", "markup": "<p>hi</p>"}})


def _reasons(runtime: Runtime) -> list[str]:
    body = ad_request(slots=HTML_SLOT)
    counted = runtime.decider.decide(decode_request(json.dumps(body).encode()), "r",
                                     monotonic_ms() + 5_000).rejection_counts()
    req = decode_request(json.dumps({**body, "explain": True}).encode())
    listed = [r.reason for r in runtime.decider.decide(req, "r", monotonic_ms() + 5_000).rejections]
    assert counted == {r: listed.count(r) for r in listed}  # both paths agree
    return listed


def test_html_is_not_served_on_a_placement_that_does_not_list_it(
    client: TestClient, runtime: Runtime
) -> None:
    _html_campaign(client)
    # not configured at all: markup is opt-in
    assert client.post("/v1/ads:select", json=ad_request(slots=HTML_SLOT)).status_code == 204
    assert _reasons(runtime) == [HTML_NOT_ALLOWED]
    # configured, every format allowed (empty list) but html not listed
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed"})
    assert r.status_code == 201, r.text
    assert client.post("/v1/ads:select", json=ad_request(slots=HTML_SLOT)).status_code == 204
    assert _reasons(runtime) == [HTML_NOT_ALLOWED]


def test_html_is_served_where_the_placement_lists_it(client: TestClient,
                                                     runtime: Runtime) -> None:
    _html_campaign(client)
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed",
                                            "allowed_formats": ["banner", "html"]})
    assert r.status_code == 201, r.text
    r = client.post("/v1/ads:select", json=ad_request(slots=HTML_SLOT))
    assert r.status_code == 200, r.text
    assert r.json()["ads"][0]["creative"] == {"type": "html", "markup": "<p>hi</p>"}
    assert _reasons(runtime) == []
