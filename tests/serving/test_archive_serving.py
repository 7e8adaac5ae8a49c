"""An archived campaign or ad is never served again; its billed history stays."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.serving.helpers import ad_request, make_campaign


@pytest.mark.slow
def test_an_archived_campaign_is_not_served_and_keeps_its_report(client: TestClient) -> None:
    made = make_campaign(client)
    cid = made["campaign"]["id"]
    served = client.post("/v1/ads:select", json=ad_request())
    assert served.status_code == 200
    assert client.get(served.json()["ads"][0]["impression_url"]).status_code == 204
    assert client.delete(f"/v1/campaigns/{cid}").status_code == 204
    assert client.post("/v1/ads:select", json=ad_request()).status_code == 204
    report = client.get(f"/v1/campaigns/{cid}/report", params={"from": "2026-07-15"}).json()
    assert report["impressions"] == 1


def test_an_archived_ad_is_not_served(client: TestClient) -> None:
    made = make_campaign(client)
    assert client.post("/v1/ads:select", json=ad_request()).status_code == 200
    assert client.delete(f"/v1/ads/{made['ad']['id']}").status_code == 204
    assert client.post("/v1/ads:select", json=ad_request()).status_code == 204
