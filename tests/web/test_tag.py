"""The web routes without a browser: ``GET /tag.js`` (size budget, headers, ETag), the
html creative's frame (``GET /f``: macro, sandbox policy, unknown tokens), the demo's
switch and its idempotent seed. The browser tests are in ``test_tag_browser.py``."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from adfunnel.campaigns.creative import HtmlCreative
from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import ManualClock, SystemClock
from adfunnel.db import make_engine
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from adfunnel.web.demo_seed import DEMO_ADVERTISER, SLOTS, demo_enabled, seed_demo
from adfunnel.web.frame import CLICK_URL_MACRO, FRAME_CSP, frame_document
from adfunnel.web.tag import GZIP_BUDGET_BYTES, tag_bytes
from tests.api_keys import ADMIN_HEADERS
from tests.serving.conftest import START


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", demo=True,
                             derive_client_facts=False)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    seed_demo(rt.store, "http://testserver")  # as `adfunnel serve` does with the demo on
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(runtime)) as c:
        yield c


def test_the_tag_is_served_within_its_size_budget(client: TestClient) -> None:
    r = client.get("/tag.js")  # no key: the route is open
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/javascript; charset=utf-8"
    assert r.content == tag_bytes()
    size = len(gzip.compress(r.content, compresslevel=9))
    print(f"tag.js: {len(r.content)} bytes, {size} bytes gzipped (level 9); "
          f"budget {GZIP_BUDGET_BYTES}")
    assert size <= GZIP_BUDGET_BYTES
    assert "max-age=" in r.headers["cache-control"]
    again = client.get("/tag.js", headers={"if-none-match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    # no eval and no inline style strings: it must run under a strict CSP
    source = r.text
    for forbidden in ("eval(", "new Function", "innerHTML", "outerHTML", "insertAdjacentHTML",
                      "document.write", '.setAttribute("style"', "cssText"):
        assert forbidden not in source, forbidden


def test_frame_document_substitutes_the_click_url_escaped() -> None:
    doc = frame_document(f'<a href="{CLICK_URL_MACRO}">x</a>', 'https://a.example/c?t=1&"x')
    assert '<a href="https://a.example/c?t=1&amp;&quot;x">x</a>' in doc
    assert doc.startswith("<!doctype html>")
    whole = "<!DOCTYPE html><html><body>hi</body></html>"
    assert frame_document(whole, "u") == whole  # a whole document is kept as it is


def _placed_html_ad(client: TestClient) -> dict:
    """The answer's ad for one 300x250 html slot of the demo placement."""
    placed = client.post("/v1/ads:select", json={
        "user": {"key": "u1"}, "placement": {"id": "demo-bottom"},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250,
                   "format": "html"}]})
    assert placed.status_code == 200, placed.text
    return placed.json()["ads"][0]


def test_the_frame_shows_the_html_ad_of_a_token_sandboxed(client: TestClient,
                                                           runtime: Runtime) -> None:
    ad = _placed_html_ad(client)
    r = client.get(f"/f?t={ad['token']}")
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == FRAME_CSP
    assert "allow-same-origin" not in r.headers["content-security-policy"]
    held = runtime.catalog.ads[ad["ad_id"]].creative
    assert isinstance(held, HtmlCreative)
    assert CLICK_URL_MACRO in held.markup
    assert CLICK_URL_MACRO not in r.text
    assert f'href="http://testserver/c?t={ad["token"]}"' in r.text
    forged = client.get("/f?t=forged.token")
    assert forged.status_code == 404 and forged.json()["fields"][0]["field"] == "t"
    assert client.get("/f").status_code == 422
    # a banner ad's token shows no frame
    top = client.post("/v1/ads:select", json={
        "user": {"key": "u1"}, "placement": {"id": "demo-top"},
        "slots": [{"id": "s1", "position": 1, "width": 728, "height": 90}]}).json()
    assert client.get(f"/f?t={top['ads'][0]['token']}").status_code == 404


def test_the_frame_never_shows_markup_no_reviewer_approved(client: TestClient,
                                                           runtime: Runtime) -> None:
    """An advertiser's edit of an approved html ad sends it back to review; a token
    served before (kept in a page, or fetched by anyone from the open ``ads:select``;
    an expired one still shows its ad) must not serve the unreviewed markup from the
    ad server's own origin."""
    evil = "<script>top.location='https://evil.test/'</script>"
    ad = _placed_html_ad(client)
    frame = f"/f?t={ad['token']}"
    assert client.get(frame).status_code == 200
    owner = runtime.catalog.campaigns[ad["campaign_id"]].advertiser_id
    issued = client.post("/v1/api-keys", json={"role": "advertiser", "advertiser_id": owner},
                         headers=ADMIN_HEADERS)
    key = {"Authorization": f"Bearer {issued.json()['key']}"}
    r = client.patch(f"/v1/ads/{ad['ad_id']}", headers=key,
                     json={"creative": {"type": "html", "markup": evil}})
    assert r.status_code == 200 and r.json()["review_state"] == "pending_review", r.text
    for verdict in (None, "reject"):  # pending, then rejected
        if verdict:
            assert client.post(f"/v1/ads/{ad['ad_id']}:{verdict}",
                               headers=ADMIN_HEADERS).status_code == 200
        shown = client.get(frame)
        assert shown.status_code == 404 and evil not in shown.text, verdict
    assert client.post(f"/v1/ads/{ad['ad_id']}:approve", headers=ADMIN_HEADERS).status_code == 200
    assert evil in client.get(frame).text  # once a reviewer approved it


def test_demo_pages_are_open_and_strict(client: TestClient) -> None:
    page = client.get("/demo")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.text.count("data-adf-placement=") == 3
    assert '<script async src="/tag.js"' in page.text
    landing = client.get("/demo/landing", params={"adf_click_id": "<b>x</b>"})
    assert "&lt;b&gt;x&lt;/b&gt;" in landing.text and "<b>x</b>" not in landing.text
    png = client.get("/demo/assets/banner-728x90.png")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert client.get("/demo/assets/article.html").status_code == 404


def test_demo_switch() -> None:
    secret = {"token_secret": "s" * 40}  # else one is written beside the default store
    assert demo_enabled(load_settings(**secret))  # the embedded default store
    assert not demo_enabled(load_settings(database_url="sqlite:///elsewhere.sqlite3", **secret))
    assert demo_enabled(load_settings(database_url="sqlite:///elsewhere.sqlite3", demo=True,
                                      **secret))
    assert not demo_enabled(load_settings(demo=False, **secret))


def test_without_the_demo_there_is_no_demo_page() -> None:
    settings = load_settings(database_url="sqlite://", clock="manual", demo=False,
                             derive_client_facts=False)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    try:
        with TestClient(build_app(rt)) as c:
            assert c.get("/demo").status_code == 404
            assert c.get("/tag.js").status_code == 200
    finally:
        rt.close()


def test_seeding_is_idempotent_and_follows_the_address(sqlite_file_url: str) -> None:
    upgrade(sqlite_file_url)
    engine = make_engine(sqlite_file_url)
    store = SqlCampaignStore(engine, SystemClock())
    try:
        first = seed_demo(store, "http://127.0.0.1:8080")
        again = seed_demo(store, "http://127.0.0.1:8080")
        assert first == again and set(first) == {s.placement for s in SLOTS}
        assert [a.name for a in store.list_advertisers()] == [DEMO_ADVERTISER]
        for campaign_id in first.values():
            assert store.get_campaign(campaign_id).name.startswith("Demo ")
            (ad,) = store.list_ads(campaign_id)
            assert ad.version == 1 and ad.review_state == "approved"
        moved = seed_demo(store, "http://127.0.0.1:9090")  # restarted on another port
        assert moved == first
        (ad,) = store.list_ads(first["demo-top"])
        assert ad.landing_url == "http://127.0.0.1:9090/demo/landing"
        assert "http://localhost:9090" in store.get_placement("demo-top").allowed_origins
    finally:
        engine.dispose()
