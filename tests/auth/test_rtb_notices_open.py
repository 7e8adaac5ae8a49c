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
