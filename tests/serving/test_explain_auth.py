"""``"explain": true`` on the open select route is the operator's: it lists every
competing ad and its state and takes the slow reference path, so it needs an admin key.
Without one the request is refused naming ``explain``, and nothing is decided."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.api_keys import ADMIN_HEADERS
from tests.serving.helpers import ad_request, make_campaign


def _fields(r) -> list[str]:
    return [f["field"] for f in r.json()["fields"]]


@pytest.mark.slow
def test_explain_without_an_admin_key_is_refused(client: TestClient, runtime: Runtime) -> None:
    made = make_campaign(client)
    anonymous = {"authorization": ""}  # the fixture's client sends the admin key otherwise
    advertiser = runtime.keys.issue("advertiser", made["advertiser"]["id"]).key
    before = runtime.decisions.decisions
    cases = [({}, 401), ({"authorization": "Bearer not-a-key"}, 403),
             ({"authorization": f"Bearer {advertiser}"}, 403)]
    for headers, status in cases:
        r = client.post("/v1/ads:select", json=ad_request(explain=True, request_id="x"),
                        headers=headers or anonymous)
        assert r.status_code == status, (headers, r.text)
        assert _fields(r) == ["explain"], r.json()
        assert "rejections" not in r.text
    assert runtime.decisions.decisions == before  # refused before any decision
    assert client.get("/v1/decisions/x").status_code == 404
    # the same request without explain is served to anyone
    r = client.post("/v1/ads:select", json=ad_request(), headers=anonymous)
    assert r.status_code == 200 and "rejections" not in r.json()


def test_explain_with_the_admin_key_lists_the_candidates(client: TestClient) -> None:
    made = make_campaign(client)
    r = client.post("/v1/ads:select", json=ad_request(explain=True), headers=ADMIN_HEADERS)
    assert r.status_code == 200, r.text
    assert r.json()["rejections"] == []
    assert r.json()["ads"][0]["campaign_id"] == made["campaign"]["id"]
