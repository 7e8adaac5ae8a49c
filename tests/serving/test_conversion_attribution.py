"""Who can attribute a conversion (issue 22 §1): only the click's redirect reveals the
click id that bills one; the serve token in the page never does. The embedded server
(memory event log applied inline, in-memory SQLite, manual clock)."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.serving.test_conversions_api import (
    UA,
    click_id_of,
    convert,
    cpa_campaign,
    move_clock,
    report,
    serve,
    show_and_click,
)

GOOGLEBOT = {"user-agent": "Googlebot/2.1 (+http://www.google.com/bot.html)"}


@pytest.fixture
def budget_mode() -> str:
    return "local"  # no pacing: every request is served


def test_the_serve_token_never_bills_a_conversion(client: TestClient,
                                                  runtime: Runtime) -> None:
    """The issue's attack: select → /i → /c → /v with the token the page holds."""
    cid = cpa_campaign(client)
    ad = serve(client)
    show_and_click(client, runtime, ad)
    r = client.get("/v", params={"t": ad["token"]}, headers=UA)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "invalid_token"
    assert [f["field"] for f in r.json()["fields"]] == ["t"]
    r = client.get("/v", params={"click_id": ad["token"]}, headers=UA)
    assert r.status_code == 400, r.text
    assert r.json()["fields"] == [{"field": "click_id", "problem": "serve_token"}]
    got = report(client, cid)
    assert (got["clicks"], got["conversions"], got["billed_micros"]) == (1, 0, 0)


@pytest.mark.slow
def test_a_forged_click_id_bills_nothing(client: TestClient, runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    ad = serve(client)
    real = show_and_click(client, runtime, ad)
    body, _, mac = real.partition(".")
    fields = msgspec.json.decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    fields[1] -= 1  # another click time: the same click, as a forger would name it
    forged = base64.urlsafe_b64encode(msgspec.json.encode(fields)).rstrip(b"=").decode()
    r = convert(client, f"{forged}.{mac}")
    assert r.status_code == 400, r.text
    assert r.json()["fields"] == [{"field": "click_id", "problem": "bad_signature"}]
    assert report(client, cid)["conversions"] == 0


@pytest.mark.slow
def test_the_click_id_of_a_flagged_click_bills_nothing(client: TestClient,
                                                       runtime: Runtime) -> None:
    """A crawler's click is redirected with a click id like any other; it never
    attributes."""
    cid = cpa_campaign(client)
    ad = serve(client)
    flagged = show_and_click(client, runtime, ad, headers=GOOGLEBOT)
    r = convert(client, flagged)
    assert r.status_code == 400, r.text
    assert r.json()["fields"] == [{"field": "click_id", "problem": "invalid_traffic"}]
    got = report(client, cid)
    assert (got["conversions"], got["billed_micros"]) == (0, 0)
    assert runtime.ledger.counters()["ivt_click_crawler_ua"] == 1


@pytest.mark.slow
def test_the_click_id_is_appended_to_the_landing_url(client: TestClient,
                                                     runtime: Runtime) -> None:
    cpa_campaign(client, ad={"landing_url": "https://shop.test/p?a=1#top"})
    ad = serve(client)
    assert client.get(ad["impression_url"], headers=UA).status_code == 204
    move_clock(client, runtime, 5)
    r = client.get(ad["click_url"], headers=UA, follow_redirects=False)
    location = urlsplit(r.headers["location"])
    assert (location.netloc, location.path, location.fragment) == ("shop.test", "/p", "top")
    query = parse_qs(location.query)
    assert query["a"] == ["1"] and len(query["adf_click_id"]) == 1
    assert query["adf_click_id"][0] != ad["token"]


# --- the authenticated postback -----------------------------------------------------


def advertiser_key(client: TestClient, advertiser_id: int, role: str = "advertiser") -> dict:
    body: dict[str, Any] = {"role": role}
    if role == "advertiser":
        body["advertiser_id"] = advertiser_id
    r = client.post("/v1/api-keys", json=body)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


@pytest.mark.slow
def test_a_postback_with_the_advertisers_key_bills_once(client: TestClient,
                                                        runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    advertiser = client.get(f"/v1/campaigns/{cid}").json()["advertiser_id"]
    own = advertiser_key(client, advertiser)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    for _ in range(2):  # a retried postback is counted once
        r = client.post("/v1/conversions", json={"click_id": click_id,
                                                 "value_micros": 9_000_000}, headers=own)
        assert r.status_code == 202, r.text
        assert r.json()["campaign_id"] == cid
    got = report(client, cid)
    assert (got["conversions"], got["billed_micros"]) == (1, ad["price_micros"])


def test_a_postback_with_another_advertisers_key_is_refused(client: TestClient,
                                                            runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    other = client.post("/v1/advertisers", json={"name": "rival"}).json()["id"]
    rival = advertiser_key(client, other)
    ad = serve(client)
    click_id = show_and_click(client, runtime, ad)
    r = client.post("/v1/conversions", json={"click_id": click_id}, headers=rival)
    assert r.status_code == 404, r.text
    assert [f["field"] for f in r.json()["fields"]] == ["click_id"]
    reviewer = advertiser_key(client, other, role="reviewer")
    r = client.post("/v1/conversions", json={"click_id": click_id}, headers=reviewer)
    assert r.status_code == 403, r.text
    r = client.post("/v1/conversions", json={"click_id": click_id},
                    headers={"Authorization": ""})
    assert r.status_code == 401, r.text
    assert report(client, cid)["conversions"] == 0


def test_a_postback_refuses_the_serve_token(client: TestClient, runtime: Runtime) -> None:
    cid = cpa_campaign(client)
    advertiser = client.get(f"/v1/campaigns/{cid}").json()["advertiser_id"]
    ad = serve(client)
    show_and_click(client, runtime, ad)
    r = client.post("/v1/conversions", json={"click_id": ad["token"]},
                    headers=advertiser_key(client, advertiser))
    assert r.status_code == 400, r.text
    assert r.json()["fields"] == [{"field": "click_id", "problem": "serve_token"}]
    assert report(client, cid)["conversions"] == 0


# --- late and unknown clicks (§9) -------------------------------------------------------


def test_a_click_on_an_expired_token_still_lands_unbilled(client: TestClient,
                                                           runtime: Runtime) -> None:
    """A tab left open past the token's hour: the person reaches the landing page."""
    cid = cpa_campaign(client, ad={"landing_url": "https://shop.test/l?c={click_id}"})
    ad = serve(client)
    assert client.get(ad["impression_url"], headers=UA).status_code == 204
    move_clock(client, runtime, 3_601)
    r = client.get(ad["click_url"], headers=UA, follow_redirects=False)
    assert r.status_code == 302, r.text
    assert r.headers["location"] == "https://shop.test/l?c="  # no click id: never attributes
    got = report(client, cid)
    assert (got["impressions"], got["clicks"], got["billed_micros"]) == (1, 0, 0)
    assert runtime.tracker.counts()["invalid_tokens_expired"] == 1
    # only a forged token is an error
    r = client.get("/c", params={"t": ad["token"][:-3] + "abc"}, follow_redirects=False)
    assert r.status_code == 400 and r.json()["error"] == "invalid_token"


@pytest.mark.slow
def test_a_click_on_an_unknown_ad_gets_a_page_not_json(client: TestClient,
                                                       runtime: Runtime) -> None:
    from adfunnel.tracking.token import TokenClaims, sign

    now = int(runtime.clock.now().timestamp())
    claims = TokenClaims("gone1", 987_654, 1, 0, "CPC", "nowhere", now - 10, now + 3_600)
    token = sign(claims, runtime.settings.token_secret.encode())
    r = client.get("/c", params={"t": token}, headers=UA, follow_redirects=False)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")


@pytest.mark.slow
def test_click_ids_are_distinct_per_click(client: TestClient, runtime: Runtime) -> None:
    cpa_campaign(client)
    first = show_and_click(client, runtime, serve(client))
    move_clock(client, runtime, 120)
    second = show_and_click(client, runtime, serve(client))
    assert first != second
    assert click_id_of(f"https://x.test/?adf_click_id={first}") == first
