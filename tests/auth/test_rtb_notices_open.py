"""The exchange calls our OpenRTB notices, and a page our pixel beacons, without our API
keys: on the embedded app they are open (a bad token is 400 naming ``t``, never 401)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize("path", ["/rtb/win", "/rtb/bill", "/rtb/loss"])
def test_the_notices_are_open_and_refuse_a_forged_token(http: TestClient, path: str) -> None:
    """Breaks if the notice paths are left out of ``OPEN_PATHS`` (401 for the exchange,
    every notice lost) or if the embedded app does not mount them (404)."""
    r = http.get(path, params={"t": "forged", "p": "1.5", "r": "102"})
    assert r.status_code == 400, r.text
    assert r.json()["fields"][0]["field"] == "t"


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("path", ["/i", "/vi"])
def test_the_pixel_beacons_are_open_whatever_the_method(
        http: TestClient, path: str, method: str) -> None:
    """A page fires ``/vi`` without our keys, as ``/i``: a forged token is 400, never 401,
    also where the request reaches the framework (``HEAD``) rather than the bare route;
    the OpenAPI document says so (no security). Red when ``/vi`` is left out of
    ``OPEN_PATHS`` (HEAD was 401 and the document asked for a key)."""
    r = http.request(method, path, params={"t": "forged"})
    assert r.status_code == 400, r.text
    assert http.get("/openapi.json").json()["paths"][path]["get"]["security"] == []


def test_the_bid_endpoint_answers_a_wrong_method_405_not_401(http: TestClient) -> None:
    """An exchange authenticates ``POST /openrtb2/bid`` with its own key header, checked
    by the endpoint, never an API key: a ``GET`` (a health probe, a misconfigured
    exchange) is 405 naming POST, not 401 asking for a bearer key, and the OpenAPI
    document asks for no bearer key (it names the exchange key header instead)."""
    for method in ("GET", "HEAD"):
        r = http.request(method, "/openrtb2/bid")
        assert r.status_code == 405, (method, r.status_code, r.text)
        assert r.headers["allow"] == "POST"
    op = http.get("/openapi.json").json()["paths"]["/openrtb2/bid"]["post"]
    assert {"bearer": []} not in op["security"]
    assert {} in op["security"] and {"exchange_key": []} in op["security"]
