"""Bad input gets a 4xx naming the problem, and the server keeps serving."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.serving.helpers import ad_request, make_campaign


def _fields(r) -> list[str]:
    return [f["field"] for f in r.json()["fields"]]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"{not json", 400, "body"),
        (json.dumps(ad_request(slots=[])).encode(), 422, "slots"),
        (json.dumps(ad_request(slots=[{"id": f"s{i}", "position": i + 1, "width": 1,
                                        "height": 1} for i in range(4)])).encode(), 422, "slots"),
        (json.dumps(ad_request(deadline_ms=0)).encode(), 422, "deadline_ms"),
        (json.dumps(ad_request(deadline_ms=-5)).encode(), 422, "deadline_ms"),
        (json.dumps(ad_request(slots=[{"id": "s", "position": 1, "width": "wide",
                                       "height": 1}])).encode(), 422, "slots[0].width"),
        (json.dumps(ad_request(user={"key": "u", "attributes": {"shoe": "42"}})).encode(),
         422, "user.attributes.shoe"),
        (json.dumps({**ad_request(), "surprise": 1}).encode(), 422, "surprise"),
        (b'{"user": {"key": "u"}}', 422, "placement"),
    ],
)
def test_bad_select_bodies(client: TestClient, body: bytes, status: int, field: str) -> None:
    make_campaign(client)
    r = client.post("/v1/ads:select", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert any(field in f for f in _fields(r)), r.json()
    # the server keeps serving
    assert client.post("/v1/ads:select", json=ad_request()).status_code == 200


def test_body_over_64kb_is_413(client: TestClient) -> None:
    body = ad_request(user={"key": "u", "attributes": {"interests": ["x" * 100] * 700}})
    r = client.post("/v1/ads:select", json=body)
    assert r.status_code == 413
    assert _fields(r) == ["body"]


def test_clock_is_only_settable_in_manual_mode(client: TestClient) -> None:
    r = client.put("/v1/admin/clock", json={"now": "2026-07-15T13:00:00+00:00"})
    assert r.status_code == 200
    r = client.put("/v1/admin/clock", json={"now": "not a time"})
    assert r.status_code == 422 and _fields(r) == ["now"]
