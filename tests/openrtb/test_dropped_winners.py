"""Winners dropped after the decision (#28 fixes): a winner the endpoint does not bid
gives back its own frequency-cap counts, and only its own."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.openrtb.conftest import banner_campaign, banner_request

ONE_A_DAY = [{"level": "campaign", "count": 1, "window": "day"}]


def _two_imps(secure_b: int) -> dict[str, Any]:
    """imp ``a`` 300x250 and imp ``b`` 728x90 (``secure`` ``secure_b``)."""
    return banner_request(imp=[
        {"id": "a", "banner": {"w": 300, "h": 250}},
        {"id": "b", "banner": {"w": 728, "h": 90}, "secure": secure_b}])


def _bid_imps(client: TestClient, body: dict[str, Any]) -> dict[str, str]:
    """imp id -> the ad id bid on it ({} for 204)."""
    r = client.post("/openrtb2/bid", json=body)
    assert r.status_code in (200, 204), r.text
    if r.status_code == 204:
        return {}
    return {b["impid"]: b["adid"] for s in r.json()["seatbid"] for b in s["bid"]}


@pytest.mark.slow
def test_a_dropped_winner_gives_back_its_caps_and_the_kept_one_keeps_its(
        client: TestClient) -> None:
    """Breaks if a winner dropped after the decision keeps its cap count (tried: the
    ``decider.abandon(decision, dropped)`` call removed from the endpoint's adjust: the
    728x90 ad, never bid, is capped for the day), or if the kept winners' counts go
    back with it (tried: ``give_back_caps`` ignoring ``ad_ids``, giving back the whole
    decision: the 300x250 ad is bid a second time past its 1 a day)."""
    kept = banner_campaign(client, bid_micros=2_000_000, frequency_caps=ONE_A_DAY)
    dropped = banner_campaign(client, 728, 90, bid_micros=2_000_000,
                              frequency_caps=ONE_A_DAY,
                              ad={"creative_ref": "http://cdn.test/b.png"})
    a, b = str(kept["ad"]["id"]), str(dropped["ad"]["id"])
    # imp b is secure: b's http image cannot be bid there (not_secure), a is bid
    assert _bid_imps(client, _two_imps(secure_b=1)) == {"a": a}
    # b was never bid: the user may still be served it; a was, once: capped
    assert _bid_imps(client, _two_imps(secure_b=0)) == {"b": b}
    assert _bid_imps(client, _two_imps(secure_b=0)) == {}
