"""Click redirects to an IRI landing URL: stored as given, redirected in its URI form."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from adfunnel.tracking.http import without_click_id
from tests.serving.helpers import ad_request, make_campaign

IRI = "https://www.bücher-müller.example/suche/straße?q=größe&x=1%202"
URI = "https://www.xn--bcher-mller-thbg.example/suche/stra%C3%9Fe?q=gr%C3%B6%C3%9Fe&x=1%202"


def click(client: TestClient) -> str:
    """The landing URL a click was sent to, without the click id appended to it."""
    ad = client.post("/v1/ads:select", json=ad_request()).json()["ads"][0]
    r = client.get(ad["click_url"], follow_redirects=False)
    assert r.status_code == 302, r.text
    location = r.headers["location"]
    assert "adf_click_id=" in location
    return without_click_id(location)


@pytest.mark.slow
def test_iri_is_stored_as_given_and_redirected_as_uri(client: TestClient) -> None:
    made = make_campaign(client, ad={"landing_url": IRI})
    assert made["ad"]["landing_url"] == IRI
    got = client.get(f"/v1/ads/{made['ad']['id']}")
    assert got.json()["landing_url"] == IRI
    assert IRI.encode() in got.content  # the same UTF-8 bytes, not an escaped variant
    assert click(client) == URI


@pytest.mark.slow
@pytest.mark.parametrize(
    "url",
    [
        "https://x.test/p?a=1&b=2&c=%20",
        "https://x.test/a|b^c?q=%7e&r=%E2%82%AC#frag",  # RedirectResponse quoted | and ^
        "https://[2001:db8::1]:8443/x",
    ],
)
def test_ascii_landing_urls_are_redirected_byte_identically(client: TestClient, url: str) -> None:
    make_campaign(client, ad={"landing_url": url})
    assert click(client) == url


def test_host_without_an_idna_form_is_refused_on_create(client: TestClient) -> None:
    adv = client.post("/v1/advertisers", json={"name": "a"}).json()
    made = make_campaign(client, advertiser_id=adv["id"])
    r = client.post(f"/v1/campaigns/{made['campaign']['id']}/ads", json={
        "landing_url": "https://-bücher.example/", "creative_ref": "c", "format": "banner",
        "width": 300, "height": 250,
    })
    assert r.status_code == 422, r.text
    fields = {f["field"]: f["problem"] for f in r.json()["fields"]}
    problem = next(p for f, p in fields.items() if f.endswith("landing_url"))
    assert "internationalised domain name" in problem
