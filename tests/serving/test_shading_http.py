"""First-price shading end to end over HTTP (#27): a first-price placement made through the
API, an automatic max_clicks campaign, a shading release fitted off the request path and
registered with ``POST /v1/admin/models``; an ad request is answered with the shaded bid
as the price, below the unshaded one, and the click bills exactly that. Before the
release, the same request bids unshaded and explain says why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from adfunnel.bidding.shade_arrays import shade_unit_bids
from adfunnel.bidding.shading import fit
from adfunnel.prediction.shading_release import ShadingRelease
from adfunnel.runtime.embedded import Runtime
from adfunnel.serving.bid_shading import NO_RELEASE
from tests.serving.helpers import ad_request, make_campaign
from tests.serving.test_conversions_api import UA, show_and_click

CAP = 2_000_000  # max_clicks' cap: the value of a click, its unshaded bid
PCTR = 0.001  # the runtime's prior pCTR: 2,000 micros per impression


@pytest.fixture
def budget_mode() -> str:
    return "local"  # no pacing: every request is served


def _release(directory: Path) -> ShadingRelease:
    """Prices to beat uniform on 100..2,000 per impression at 12:00 UTC (the clock's)."""
    release = ShadingRelease(fit([("feed", "300x250", 12, 100 * (1 + i % 20))
                                  for i in range(400)]))
    release.save(directory)
    return release


@pytest.mark.slow
def test_an_automatic_bid_is_shaded_on_a_first_price_placement_over_http(
        client: TestClient, runtime: Runtime, tmp_path: Path) -> None:
    """Red when the registered shading release is not followed by the ad server (the
    price stays 2.00), when the operator API refuses a shading artifact, or when explain
    does not name the missing release."""
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed",
                                            "auction_type": "first_price"})
    assert r.status_code == 201, r.text
    made = make_campaign(client, objective="clicks", bid_type="CPC", bid_micros=None,
                         bid_strategy="max_clicks", bid_cap_micros=CAP)
    cid = made["campaign"]["id"]
    assert made["campaign"]["bid_micros"] == CAP
    r = client.post("/v1/ads:select", json=ad_request(explain=True))
    assert r.status_code == 200, r.text
    assert [a["price_micros"] for a in r.json()["ads"]] == [CAP]
    assert r.json()["shading"] == [f"s1: {NO_RELEASE}"]

    release = _release(tmp_path / "shading")
    r = client.post("/v1/admin/models", json={"path": str(tmp_path / "shading")})
    assert r.status_code == 201, r.text
    assert (r.json()["target"], r.json()["model_version"]) == ("shading", release.version)
    [shaded] = shade_unit_bids(np.array([CAP]), np.array([PCTR]), np.array([0.0]),
                               release.model.curves["feed|300x250|12"], 0.0).tolist()
    assert shaded == 1_000_000  # (2,000 − b) × P(b) peaks at 1,000 per impression
    r = client.post("/v1/ads:select", json=ad_request())
    assert r.status_code == 200, r.text
    [ad] = r.json()["ads"]
    assert (ad["campaign_id"], ad["price_micros"]) == (cid, shaded)
    show_and_click(client, runtime, ad, UA)
    report = client.get(f"/v1/campaigns/{cid}/report").json()
    assert (report["clicks"], report["billed_micros"]) == (1, shaded), report
