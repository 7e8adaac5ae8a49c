"""What a page's tag needs from the server: facts derived from the client address and
the User-Agent, absolute tracking URLs, a GIF pixel, many slots, CORS per placement.

Against a real embedded app; TestClient's peer is a local transport, so its
``X-Forwarded-For`` names the client (as a trusted proxy's would)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.serving.derived import user_agent_facts
from adfunnel.settings import SettingsError, load_settings
from adfunnel.tracking.http import PIXEL_GIF
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.conftest import START
from tests.serving.helpers import SettlingClient, make_campaign

IPHONE = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
          "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1")
CHROME_WINDOWS = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like "
                  "Gecko) Chrome/124.0.0.0 Safari/537.36")
IPAD = ("Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
        "Gecko) Version/17.4 Mobile/15E148 Safari/604.1")
ANDROID_PHONE = ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like "
                 "Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36")
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
AU_ADDRESS = "1.0.0.7"  # DB-IP: 1.0.0.0,1.0.0.255,AU
JP_ADDRESS = "2001:200::42"  # DB-IP: 2001:200::,2001:200:ffff:…,JP
PAGE = "https://news.example"


@pytest.mark.parametrize(("ua", "facts"), [
    (IPHONE, {"os": "ios", "browser": "safari", "device_type": "mobile"}),
    (CHROME_WINDOWS, {"os": "windows", "browser": "chrome", "device_type": "desktop"}),
    (IPAD, {"os": "ios", "browser": "safari", "device_type": "tablet"}),
    (ANDROID_PHONE, {"os": "android", "browser": "chrome", "device_type": "mobile"}),
    (GOOGLEBOT, {"browser": "googlebot"}),  # a crawler: no device type
    ("curl/8.5.0", {"browser": "curl"}),
    ("", {}),
])
def test_user_agent_facts(ua: str, facts: dict[str, str]) -> None:
    assert dict(user_agent_facts(ua)) == facts


def _runtime(**settings: Any) -> Runtime:
    s = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                      admin_key=ADMIN_KEY, **settings)
    return build_runtime(s, ManualClock(START), seed=1)


@pytest.fixture
def page_client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    rt = _runtime(**getattr(request, "param", {}))
    with SettlingClient(build_app(rt), rt, headers=ADMIN_HEADERS) as c:
        yield c
    rt.close()


def tag_request(slots: int = 1, placement: str = "feed") -> dict[str, Any]:
    """What the tag sends: the placement, its slots and a user key, nothing more."""
    return {"user": {"key": "tag-user"}, "placement": {"id": placement},
            "slots": [{"id": f"s{i}", "position": i + 1, "width": 300, "height": 250}
                      for i in range(slots)]}


def _select(client: TestClient, body: dict[str, Any], ip: str = AU_ADDRESS,
            ua: str = IPHONE, **headers: str) -> Any:
    return client.post("/v1/ads:select", json=body,
                       headers={"x-forwarded-for": ip, "user-agent": ua, **headers})


@pytest.mark.slow
def test_geo_and_device_targeting_work_for_a_bare_tag_request(page_client: TestClient) -> None:
    make_campaign(page_client, targeting={"all": [
        {"attr": "geo.country", "in": ["AU"]}, {"attr": "device_type", "in": ["mobile"]},
        {"attr": "os", "in": ["ios"]}, {"attr": "browser", "in": ["safari"]}]})
    assert _select(page_client, tag_request()).status_code == 200
    assert _select(page_client, tag_request(), ip=JP_ADDRESS).status_code == 204
    assert _select(page_client, tag_request(), ua=CHROME_WINDOWS).status_code == 204
    # what the request gives wins over what is derived
    given = tag_request()
    given["user"]["attributes"] = {"geo.country": "JP"}
    assert _select(page_client, given).status_code == 204
    given["user"]["attributes"] = {"geo.country": "au", "device_type": "mobile"}
    assert _select(page_client, given, ip=JP_ADDRESS).status_code == 200


@pytest.mark.slow
def test_ipv6_client_gets_its_country(page_client: TestClient) -> None:
    make_campaign(page_client, targeting={"attr": "geo.country", "in": ["JP"]})
    assert _select(page_client, tag_request(), ip=JP_ADDRESS).status_code == 200
    assert _select(page_client, tag_request(), ip=AU_ADDRESS).status_code == 204


@pytest.mark.slow
@pytest.mark.parametrize("page_client", [{"derive_client_facts": False}], indirect=True)
def test_derivation_can_be_turned_off(page_client: TestClient) -> None:
    make_campaign(page_client, targeting={"attr": "geo.country", "in": ["AU"]})
    assert _select(page_client, tag_request()).status_code == 204


@pytest.mark.slow
@pytest.mark.parametrize("page_client", [{"public_base_url": "https://ads.example.com/"}],
                         indirect=True)
def test_tracking_urls_are_absolute_under_public_base_url(page_client: TestClient) -> None:
    make_campaign(page_client)
    [ad] = _select(page_client, tag_request()).json()["ads"]
    token = ad["token"]
    assert ad["impression_url"] == f"https://ads.example.com/i?t={token}"
    assert ad["viewable_url"] == f"https://ads.example.com/vi?t={token}"
    assert ad["click_url"] == f"https://ads.example.com/c?t={token}"


@pytest.mark.slow
def test_tracking_urls_stay_relative_without_public_base_url(page_client: TestClient) -> None:
    make_campaign(page_client)
    [ad] = _select(page_client, tag_request()).json()["ads"]
    assert ad["impression_url"] == f"/i?t={ad['token']}"


@pytest.mark.parametrize("url", ["ftp://ads.example.com", "ads.example.com",
                                 "https://ads.example.com/?q=1", "https://"])
def test_public_base_url_is_validated(url: str) -> None:
    with pytest.raises(SettingsError, match="public_base_url"):
        load_settings(public_base_url=url)


@pytest.mark.parametrize("n", [0, 101])
def test_max_slots_is_validated(n: int) -> None:
    with pytest.raises(SettingsError, match="max_slots"):
        load_settings(max_slots=n)


@pytest.mark.slow
def test_a_feed_page_sends_up_to_max_slots(page_client: TestClient) -> None:
    make_campaign(page_client)
    assert _select(page_client, tag_request(slots=10)).status_code == 200
    r = _select(page_client, tag_request(slots=11))
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "slots"


@pytest.mark.slow
@pytest.mark.parametrize("page_client", [{"max_slots": 2}], indirect=True)
def test_max_slots_setting_bounds_a_request(page_client: TestClient) -> None:
    make_campaign(page_client)
    assert _select(page_client, tag_request(slots=2)).status_code == 200
    r = _select(page_client, tag_request(slots=3))
    assert r.status_code == 422 and "1 to 2 slots" in r.json()["fields"][0]["problem"]


@pytest.mark.slow
def test_impression_pixel_answers_a_gif_to_an_img_and_records_once(
        page_client: TestClient) -> None:
    made = make_campaign(page_client)
    [ad] = _select(page_client, tag_request()).json()["ads"]
    img = {"accept": "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"}
    r = page_client.get(ad["impression_url"], headers=img)
    assert r.status_code == 200 and r.headers["content-type"] == "image/gif"
    assert r.content == PIXEL_GIF and r.headers["cache-control"] == "no-store"
    assert page_client.get(ad["impression_url"]).status_code == 204  # a fetch: as before
    stats = page_client.get("/v1/ledger/stats").json()
    assert stats["rows"] == 1 and stats["duplicates_rejected"] == 1
    report = page_client.get(f"/v1/campaigns/{made['campaign']['id']}/report",
                             params={"from": "2026-07-15", "to": "2026-07-15"}).json()
    assert report["impressions"] == 1


def test_pixel_is_a_transparent_1x1_gif() -> None:
    from io import BytesIO

    from PIL import Image

    image = Image.open(BytesIO(PIXEL_GIF))
    assert image.format == "GIF" and image.size == (1, 1)
    assert image.convert("RGBA").getpixel((0, 0))[3] == 0


def _placement(client: TestClient, **body: Any) -> Any:
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed", **body})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.mark.slow
def test_allowed_origin_gets_ad_and_cors_headers(page_client: TestClient) -> None:
    made = _placement(page_client, allowed_origins=["HTTPS://News.Example:443"])
    assert made["allowed_origins"] == [PAGE]  # stored as browsers send it
    make_campaign(page_client)
    r = _select(page_client, tag_request(), origin=PAGE)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == PAGE
    assert "Origin" in r.headers["vary"]
    ad = r.json()["ads"][0]
    beacon = page_client.get(ad["impression_url"], headers={"origin": PAGE})
    assert beacon.status_code == 204
    assert beacon.headers["access-control-allow-origin"] == PAGE
    viewed = page_client.get(ad["viewable_url"], headers={"origin": PAGE})
    assert viewed.status_code == 204
    assert viewed.headers["access-control-allow-origin"] == PAGE
    refused = page_client.get(ad["viewable_url"], headers={"origin": "https://evil.example"})
    assert refused.status_code == 403 and refused.json()["fields"][0]["field"] == "Origin"


@pytest.mark.slow
def test_other_origin_is_refused_and_nothing_recorded(page_client: TestClient,
                                                      ) -> None:
    _placement(page_client, allowed_origins=[PAGE])
    make_campaign(page_client)
    r = _select(page_client, tag_request(), origin="https://evil.example")
    assert r.status_code == 403
    assert r.json()["error"] == "origin_not_allowed"
    assert r.json()["fields"][0]["field"] == "Origin"
    assert "access-control-allow-origin" not in r.headers
    # a token served to the allowed page, fired from another origin: refused, not billed
    ad = _select(page_client, tag_request(), origin=PAGE).json()["ads"][0]
    beacon = page_client.get(ad["impression_url"], headers={"origin": "https://evil.example"})
    assert beacon.status_code == 403 and beacon.json()["fields"][0]["field"] == "Origin"
    assert page_client.get("/v1/ledger/stats").json()["rows"] == 0


@pytest.mark.slow
def test_placement_without_allowed_origins(page_client: TestClient) -> None:
    """Apps and servers (no Origin) and the server's own pages are served as before; a
    browser on another origin is refused; an unknown placement allows no origin."""
    _placement(page_client)
    make_campaign(page_client)
    assert _select(page_client, tag_request()).status_code == 200
    own = _select(page_client, tag_request(), origin="http://testserver")
    assert own.status_code == 200 and "access-control-allow-origin" not in own.headers
    assert _select(page_client, tag_request(), origin=PAGE).status_code == 403
    assert _select(page_client, tag_request(placement="nowhere"),
                   origin=PAGE).status_code == 403


@pytest.mark.slow
def test_preflight(page_client: TestClient) -> None:
    _placement(page_client, allowed_origins=[PAGE])
    ask = {"origin": PAGE, "access-control-request-method": "POST",
           "access-control-request-headers": "content-type"}
    r = page_client.options("/v1/ads:select", headers=ask)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == PAGE
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "content-type" in r.headers["access-control-allow-headers"].lower()
    r = page_client.options("/v1/ads:select", headers={**ask, "origin": "https://evil.example"})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    # a placement added later is seen by the next preflight
    page_client.patch("/v1/placements/feed",
                      json={"allowed_origins": [PAGE, "https://blog.example"]})
    r = page_client.options("/i", headers={**ask, "origin": "https://blog.example",
                                           "access-control-request-method": "GET"})
    assert r.status_code == 200
    r = page_client.options("/vi", headers={**ask, "origin": "https://blog.example",
                                            "access-control-request-method": "GET"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == (
        "https://blog.example")


@pytest.mark.parametrize("origin", ["https://news.example/path", "ftp://x.example",
                                    "news.example", "https://u@news.example"])
def test_allowed_origins_are_validated(client: TestClient, origin: str) -> None:
    r = client.post("/v1/placements", json={"id": "feed", "name": "Feed",
                                            "allowed_origins": [origin]})
    assert r.status_code == 422
    assert r.json()["fields"][0]["field"].startswith("allowed_origins")
