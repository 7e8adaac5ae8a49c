"""``POST /openrtb2/bid`` over HTTP on the embedded app: a banner bid and its token, the
committed cost, no-bid answers, exchange keys, the billing setting."""

from __future__ import annotations

from html import escape
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from adfunnel.tracking.notices import notice_mac
from adfunnel.tracking.token import verify
from tests.openrtb.conftest import START, banner_campaign, banner_request
from tests.openrtb.validator import response_problems

KEY = b"k" * 32
BID = 2_500_000  # the campaign's CPM bid: 2.50


def _bid(client: TestClient, body: dict[str, Any], **kwargs: Any) -> Any:
    return client.post("/openrtb2/bid", json=body, **kwargs)


@pytest.mark.slow
def test_a_banner_request_gets_a_bid_whose_token_holds_it(client: TestClient,
                                                          runtime: Runtime,
                                                          monkeypatch: Any) -> None:
    """Breaks if the bid is priced at the internal auction's GSP price (tried: ``prices``
    filled from ``p.win.price_micros``: 0.5, the floor), if the markup's URLs are not
    under ``public_base_url`` (tried: ``notice_urls(p.token, '')``), or if the committed
    expected cost is not the bid's (tried: ``bid_token`` keeping the decision's
    ``served``: 500 micros, the GSP charge, committed)."""
    banner_campaign(client, bid_micros=BID)
    committed: list[Any] = []
    record = runtime.decider.gate.record_served
    monkeypatch.setattr(runtime.decider.gate, "record_served",
                        lambda s: (committed.append(s), record(s)))
    request = banner_request()
    r = _bid(client, request)
    assert r.status_code == 200, r.text
    body = r.json()
    assert response_problems(body, request) == []
    [seat] = body["seatbid"]
    [bid] = seat["bid"]
    assert (body["cur"], bid["impid"], bid["price"], bid["w"], bid["h"]) == (
        "USD", "imp-1", 2.5, 300, 250)
    token = bid["nurl"].split("t=", 1)[1].split("&", 1)[0]
    base = "https://ads.test"
    n = notice_mac(token, KEY)  # the exchange's proof: in the notices, never the markup
    assert bid["nurl"] == f"{base}/rtb/win?t={token}&n={n}&p=${{AUCTION_PRICE}}"
    assert bid["burl"] == f"{base}/rtb/bill?t={token}&n={n}&p=${{AUCTION_PRICE}}"
    assert bid["lurl"] == (f"{base}/rtb/loss?t={token}&n={n}&r=${{AUCTION_LOSS}}"
                           f"&m=${{AUCTION_MIN_TO_WIN}}")
    assert n not in bid["adm"] and "/rtb/" not in bid["adm"]
    assert escape(f"{base}/c?t={token}") in bid["adm"]
    assert escape(f"{base}/i?t={token}&p=${{AUCTION_PRICE}}") in bid["adm"]
    assert 'src="https://cdn.test/a.png"' in bid["adm"]
    claims = verify(token, KEY, START.timestamp())
    assert (claims.price_micros, claims.billing_type, claims.expected_micros,
            claims.billable_event, claims.impression_id, claims.placement) == (
        BID, "CPM", BID // 1000, "notice", bid["id"], "site-1")
    assert [(s.impression_id, s.expected_micros) for s in committed] == [
        (bid["id"], BID // 1000)]


@pytest.mark.slow
def test_no_bid_answers_204_or_the_reasons_asked_for(client: TestClient) -> None:
    """Breaks if a no-bid answers a body unasked (tried: ``wants_reasons`` always true:
    200 where 204 is due), or a floor above every bid still bids (tried: the slot's
    ``reserve_cpm_micros`` 0 and ``reprice``'s floor check removed together: either
    alone still refuses the 2.51 floor), or a 204 does not say why as select's does
    (tried: the no-bid 204 without ``x-adfunnel-outcome``: the benchmark cannot tell it
    from a late one)."""
    banner_campaign(client, bid_micros=BID)
    video = banner_request(imp=[{"id": "v", "video": {"mimes": ["video/mp4"]}}])
    r = _bid(client, video)
    assert (r.status_code, r.headers.get("x-adfunnel-outcome")) == (204, "no_fill")
    r = client.post("/openrtb2/bid?nbr=1", json=video)
    assert (r.status_code, r.json()["nbr"]) == (200, 502), r.text
    asked = banner_request(ext={"adfunnel": {"nbr": True}}, cur=["EUR"])
    r = _bid(client, asked)
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"imp-1": "currency_not_accepted"}
    high = banner_request(imp=[{"id": "imp-1", "banner": {"w": 300, "h": 250},
                                "bidfloor": 2.51}])
    assert _bid(client, high).status_code == 204
    r = client.post("/openrtb2/bid?nbr=1", json=high)
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"imp-1": "no_fill"}


@pytest.mark.slow
@pytest.mark.parametrize("openrtb_settings", [
    {"openrtb_exchange_keys": {"ex1": "x" * 20}, "openrtb_bills_on": "beacon"}])
def test_exchange_keys_and_billing_on_the_beacon(client: TestClient) -> None:
    """Breaks if the key is not required (tried: ``keys`` left empty: 200 without the
    header), or ``openrtb_bills_on = beacon`` still bills on the notice (tried:
    ``BILLABLE_EVENT`` maps beacon to ``notice``)."""
    banner_campaign(client, bid_micros=BID)
    r = _bid(client, banner_request())
    assert (r.status_code, r.json()["fields"][0]["field"]) == (401, "x-openrtb-key")
    r = _bid(client, banner_request(), headers={"x-openrtb-key": "y" * 20})
    assert (r.status_code, r.json()["fields"][0]["field"]) == (403, "x-openrtb-key")
    r = _bid(client, banner_request(), headers={"x-openrtb-key": "x" * 20})
    assert r.status_code == 200, r.text
    token = r.json()["seatbid"][0]["bid"][0]["burl"].split("t=", 1)[1].split("&", 1)[0]
    assert verify(token, KEY, START.timestamp()).billable_event == "exchange_beacon"


@pytest.mark.slow
def test_an_ad_with_nothing_to_render_is_no_bid_and_commits_nothing(
        client: TestClient, runtime: Runtime, monkeypatch: Any) -> None:
    """Breaks if a winner without markup still commits its expected cost (tried: the
    decision's ``placed`` left unfiltered in ``_bids``: one serve committed)."""
    banner_campaign(client, bid_micros=BID, ad={"creative_ref": "cr/1.png"})
    committed: list[Any] = []
    monkeypatch.setattr(runtime.decider.gate, "record_served", committed.append)
    r = client.post("/openrtb2/bid?nbr=1", json=banner_request())
    assert (r.status_code, r.json()["nbr"]) == (200, 507), r.text
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"imp-1": "no_markup"}
    assert committed == []


@pytest.mark.slow
def test_a_late_decision_is_204_and_commits_nothing(client: TestClient, runtime: Runtime,
                                                    monkeypatch: Any) -> None:
    """Breaks if a decision found past its deadline still bids or commits (tried: the
    runner's deadline check removed: 200 and one serve committed), or its 204 is not
    named late (tried: the late answer with the no-fill header)."""
    banner_campaign(client, bid_micros=BID)
    committed: list[Any] = []
    monkeypatch.setattr(runtime.decider.gate, "record_served", committed.append)
    monkeypatch.setattr("adfunnel.serving.commit.monotonic_ms", lambda: float("inf"))
    r = _bid(client, banner_request())
    assert (r.status_code, r.content, committed) == (204, b"", [])
    assert r.headers["x-adfunnel-outcome"] == "late"


@pytest.mark.slow
@pytest.mark.parametrize("tmax", [1, 10])
def test_a_tmax_within_the_network_margin_is_late_at_once(client: TestClient,
                                                          runtime: Runtime, monkeypatch: Any,
                                                          tmax: int) -> None:
    """``tmax`` at or below the network margin (10 ms) leaves no time to answer: 204
    late, nothing decided or committed (a bid the exchange discards would hold its
    reservation for its token's window). Breaks when the deadline is floored at 1 ms
    (the trial's case: tmax 1 and 10 were bid, 200)."""
    banner_campaign(client, bid_micros=BID)
    committed: list[Any] = []
    monkeypatch.setattr(runtime.decider.gate, "record_served", committed.append)
    r = _bid(client, banner_request(tmax=tmax))
    assert (r.status_code, r.content, committed) == (204, b"", [])
    assert r.headers["x-adfunnel-outcome"] == "late"
    assert _bid(client, banner_request(id="req-2")).status_code == 200  # the longest tmax


@pytest.mark.slow
def test_blocked_categories_and_domains_are_never_bid(client: TestClient) -> None:
    """Breaks if ``bcat``/``badv`` are not handed to the funnel (tried: the
    ``blocked_*`` lists left empty in ``map_request``: the IAB7-39 ad wins at 3.00), or
    an ad without a declared domain is judged by its declared domains only in the
    funnel (tried: ``ad_domains`` answering ``adomain`` only: with ``x.test`` blocked
    the 2.80 ad still wins the slot internally, and is either bid under a blocked
    ``adomain`` or leaves the slot unbid, where the allowed 1.00 ad should be bid)."""
    banner_campaign(client, bid_micros=3_000_000, ad={"categories": ["IAB7-39"]})
    banner_campaign(client, bid_micros=2_900_000, ad={"adomain": ["www.shop.test"]})
    banner_campaign(client, bid_micros=2_800_000)  # landing https://x.test/…, no adomain
    banner_campaign(client, bid_micros=1_000_000, ad={"adomain": ["ok.test"],
                                                      "categories": ["IAB1"]})
    request = banner_request(bcat=["IAB7"], badv=["shop.test"])
    r = _bid(client, request)
    assert r.status_code == 200, r.text
    assert response_problems(r.json(), request) == []
    [bid] = r.json()["seatbid"][0]["bid"]
    assert (bid["price"], bid["adomain"], bid.get("cat", [])) == (2.8, ["x.test"], [])
    # the landing host blocked too: the funnel refuses that ad, the allowed one wins
    blocked = banner_request(bcat=["IAB7"], badv=["shop.test", "X.test"])
    r = _bid(client, blocked)
    assert r.status_code == 200, r.text
    assert response_problems(r.json(), blocked) == []
    [bid] = r.json()["seatbid"][0]["bid"]
    assert (bid["price"], bid["adomain"], bid["cat"]) == (1.0, ["ok.test"], ["IAB1"])
    declared = banner_request(bcat=["IAB7"], badv=["shop.test"], imp=[{
        "id": "imp-1", "banner": {"w": 300, "h": 250}, "bidfloor": 2.85}])
    r = _bid(client, declared)  # only the blocked ads could pay 2.85 or more
    assert r.status_code == 204, r.text


@pytest.mark.slow
def test_an_imp_is_sized_by_the_first_of_its_sizes_the_catalogue_holds(
        client: TestClient) -> None:
    """Breaks if the slot always takes the imp's first size (tried: ``has_shape`` not
    wired in ``build_app``: 728x90 first, no such ad, 204)."""
    banner_campaign(client, 300, 600, bid_micros=BID)
    request = banner_request(imp=[{"id": "imp-1", "banner": {
        "w": 728, "h": 90, "format": [{"w": 728, "h": 90}, {"w": 300, "h": 600}]}}])
    r = _bid(client, request)
    assert r.status_code == 200, r.text
    assert response_problems(r.json(), request) == []
    [bid] = r.json()["seatbid"][0]["bid"]
    assert (bid["w"], bid["h"]) == (300, 600)


@pytest.mark.slow
def test_a_secure_imp_gets_no_insecure_markup(client: TestClient) -> None:
    """Breaks if ``imp.secure`` is ignored (tried: the ``not_secure`` check removed: the
    http:// image is bid into an https page)."""
    banner_campaign(client, bid_micros=BID, ad={"creative_ref": "http://cdn.test/a.png"})
    imp = {"id": "imp-1", "banner": {"w": 300, "h": 250}, "secure": 1}
    r = client.post("/openrtb2/bid?nbr=1", json=banner_request(imp=[imp]))
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"imp-1": "not_secure"}, r.text
    r = _bid(client, banner_request(imp=[{**imp, "secure": 0}]))
    assert r.status_code == 200, r.text
