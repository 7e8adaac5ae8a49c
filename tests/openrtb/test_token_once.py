"""Each answered winner's token is signed exactly once: an OpenRTB bid at its bid's
price only (never at the internal auction's price too), a select winner as before."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

import adfunnel.serving.decision as decision_module
from adfunnel.campaigns.model import BidType
from adfunnel.tracking.token import TokenClaims, verify
from tests.openrtb.conftest import START, banner_campaign, banner_request
from tests.serving.helpers import ad_request

KEY = b"k" * 32
BID = 2_500_000  # the campaign's CPM bid: 2.50


def _count_signs(monkeypatch: Any) -> list[TokenClaims]:
    """Every claims signed from now on (the one signer of a winner's token)."""
    signed: list[TokenClaims] = []
    sign = decision_module.sign

    def counting(claims: TokenClaims, key: bytes) -> str:
        signed.append(claims)
        return sign(claims, key)

    monkeypatch.setattr(decision_module, "sign", counting)
    return signed


@pytest.mark.slow
def test_an_openrtb_bid_is_signed_once_at_its_price(client: TestClient,
                                                    monkeypatch: Any) -> None:
    """Breaks if the decider signs its winners too (tried: ``place`` reading
    ``placed.token`` before returning it: two signatures, the first at the internal GSP
    price 500,000), or if the bid's token is not the bid's (tried: ``bid_token``
    keeping ``p.claims``: the token says 500,000, not 2,500,000)."""
    banner_campaign(client, bid_micros=BID)
    signed = _count_signs(monkeypatch)
    r = client.post("/openrtb2/bid", json=banner_request())
    assert r.status_code == 200, r.text
    [bid] = r.json()["seatbid"][0]["bid"]
    assert [c.price_micros for c in signed] == [BID]
    token = bid["nurl"].split("t=", 1)[1].split("&", 1)[0]
    claims = verify(token, KEY, START.timestamp())
    assert claims == signed[0]
    assert (claims.price_micros, claims.expected_micros, claims.billable_event) == (
        BID, 2_500, "notice")
    for url in (bid["burl"], bid["lurl"]):
        assert f"t={token}&" in url
    assert bid["adm"].count(token) == 2  # the click and the impression beacon


@pytest.mark.slow
def test_a_select_winner_is_signed_once_and_says_the_same(client: TestClient,
                                                          monkeypatch: Any) -> None:
    """Breaks if reading the token signs again (tried: ``Placed.token`` not keeping the
    text it signed: four signatures, one per URL and the token field), or if the token
    is not the winner's claims (tried: ``place`` passing a price of 0 in ``claims``)."""
    banner_campaign(client, bid_micros=BID)
    signed = _count_signs(monkeypatch)
    r = client.post("/v1/ads:select", json=ad_request(
        placement={"id": "feed", "reserve_cpm_micros": 500_000}))
    assert r.status_code == 200, r.text
    [ad] = r.json()["ads"]
    assert len(signed) == 1
    claims = verify(ad["token"], KEY, START.timestamp())
    assert claims == signed[0]
    assert (claims.price_micros, claims.billing_type, claims.billable_event) == (
        500_000, "CPM", "rendered")
    for name in ("impression_url", "click_url", "viewable_url"):
        assert ad[name].endswith(f"?t={ad['token']}")


def test_the_signing_key_is_never_shown() -> None:
    """A winner holds the token key until its token is first read (signed lazily); its
    ``repr`` (logs, tracebacks, the test runner's diffs) must not show it: whoever had
    the key could sign tokens that bill. Breaks if the key is in the repr (tried:
    ``repr=True`` on ``Placed.token_key``)."""
    from tests.openrtb.test_pricing import _placed  # a winner signed under b"old-key"

    placed = _placed(BidType.CPM, BID)
    assert "old-key" not in repr(placed)
    placed.token  # noqa: B018 (signed: the key is still held)
    assert "old-key" not in repr(placed)
