"""Coded targeting values match across case through the whole app; storage keeps the case."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serving.helpers import ad_request, make_campaign


@pytest.mark.slow
@pytest.mark.parametrize(("campaign", "request_value"), [("us", "US"), ("US", "us")])
def test_country_matches_in_any_case(client: TestClient, campaign: str, request_value: str) -> None:
    targeting = {"all": [{"attr": "geo.country", "in": [campaign]},
                         {"attr": "os", "in": ["iOS"]}]}
    made = make_campaign(client, targeting=targeting)
    got = client.get(f"/v1/campaigns/{made['campaign']['id']}").json()["targeting"]
    assert got == targeting  # stored as the advertiser wrote it
    user = {"key": "u1", "attributes": {"geo.country": request_value, "os": "IOS"}}
    r = client.post("/v1/ads:select", json=ad_request(user=user))
    assert r.status_code == 200, r.text
    assert r.json()["ads"][0]["campaign_id"] == made["campaign"]["id"]
    other = {"key": "u1", "attributes": {"geo.country": "ca", "os": "ios"}}
    assert client.post("/v1/ads:select", json=ad_request(user=other)).status_code == 204
