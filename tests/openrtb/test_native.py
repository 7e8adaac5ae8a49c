"""Native imps: the native request's assets read leniently, the bid's adm a native
response filled from the ad's native creative; over HTTP and as pure functions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.openrtb.native import native_assets, native_size
from tests.openrtb.conftest import banner_request
from tests.openrtb.validator import response_problems
from tests.serving.helpers import make_campaign

NATIVE_AD = {"format": "native", "width": 600, "height": 160, "creative_ref": "n/1",
             "creative": {"type": "native", "title": "A bike for winter <b>", "body": "Body",
                          "sponsor": "Northwind", "cta": "Ride",
                          "image_url": "https://cdn.test/n.png"}}


def _native_request(assets: list[dict[str, Any]], wrapped: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"ver": "1.2", "assets": assets}
    text = json.dumps({"native": body} if wrapped else body)
    return banner_request(imp=[{"id": "n1", "native": {"request": text, "ver": "1.2"}}])


ASSETS = [{"id": 1, "required": 1, "title": {"len": 10}},
          {"id": 2, "required": 1, "img": {"type": 3, "w": 600, "h": 160}},
          {"id": 3, "data": {"type": 1}}, {"id": 4, "img": {"type": 1, "w": 50, "h": 50}}]


def test_native_requests_are_read_leniently() -> None:
    """Breaks if an unreadable request raises rather than giving nothing (tried: the
    ``DecodeError`` not caught: "{" raises)."""
    ask = native_assets(json.dumps({"assets": ASSETS}))
    assert ask is not None and native_size(ask) == (600, 160) and not ask.wrapped
    assert [a.kind for a in ask.assets] == ["title", "img", "data", "img"]
    for bad in ("{", "[]", '{"assets": []}', '{"assets": [{"title": {}}]}', '"x"'):
        assert native_assets(bad) is None, bad


@pytest.mark.slow
@pytest.mark.parametrize("wrapped", [False, True])
def test_a_native_imp_gets_a_native_response(client: TestClient, wrapped: bool) -> None:
    """Breaks if native imps get no slot (tried: ``_imp_terms`` answering
    ``unsupported_media`` for native: 204), or the response ignores the request's asset
    ids or lengths (tried: ``_cut`` returning the whole text: a 21-character title)."""
    make_campaign(client, bid_micros=2_000_000, ad=NATIVE_AD)
    request = _native_request(ASSETS, wrapped)
    r = client.post("/openrtb2/bid", json=request)
    assert r.status_code == 200, r.text
    assert response_problems(r.json(), request) == []
    [bid] = r.json()["seatbid"][0]["bid"]
    doc = json.loads(bid["adm"])
    native = doc["native"] if wrapped else doc
    assert native["assets"] == [{"id": 1, "title": {"text": "A bike for"}},
                                {"id": 2, "img": {"url": "https://cdn.test/n.png"}},
                                {"id": 3, "data": {"value": "Northwind"}}]  # no icon: optional
    token = bid["nurl"].split("t=", 1)[1].split("&", 1)[0]
    assert native["link"]["url"] == f"https://ads.test/c?t={token}"
    assert native["imptrackers"] == [f"https://ads.test/i?t={token}&p=${{AUCTION_PRICE}}"]


@pytest.mark.slow
def test_a_required_asset_we_cannot_fill_is_no_bid(client: TestClient) -> None:
    """Breaks if a required asset is skipped (tried: the ``required`` test removed in
    ``native_adm``: a bid without the required video)."""
    make_campaign(client, bid_micros=2_000_000, ad=NATIVE_AD)
    request = _native_request([*ASSETS, {"id": 9, "required": 1, "video": {"mimes": ["v"]}}])
    r = client.post("/openrtb2/bid?nbr=1", json=request)
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"n1": "no_markup"}, r.text


def test_a_deeply_nested_native_request_is_no_markup_not_a_500(client: TestClient) -> None:
    """A native request nested deeper than the decoder's recursion (a string inside the
    bid request, so the body's own depth check never sees its brackets) is unreadable:
    no bid, ``no_markup``, never a 500. Breaks if ``native_assets`` decodes it without
    bounding its depth (tried: the ``nesting_problem`` check removed: ``RecursionError``
    from msgspec, a 500 over HTTP)."""
    deep = '{"assets": ' + "[" * 5000 + "]" * 5000 + "}"
    assert native_assets(deep) is None
    make_campaign(client, bid_micros=2_000_000, ad=NATIVE_AD)
    request = banner_request(imp=[{"id": "n1", "native": {"request": deep}}])
    r = client.post("/openrtb2/bid?nbr=1", json=request)
    assert r.status_code == 200, r.text
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"n1": "no_markup"}
