"""The ad tag in a real browser: Playwright driving Debian's Chromium against a real
``adfunnel serve`` process (SQLite file, system clock, ``ADFUNNEL_DEMO=true``) and a second
web origin (a tiny page server on another port) that embeds the tag as a publisher would.

What a page sees is read from the DOM and the browser's own network log; what the server
counts and bills is read from its campaign reports (admin key, after
``POST /v1/admin/events:settle``). With ``ADFUNNEL_SCREENSHOT_DIR`` set, the demo page is
saved there as ``demo.png`` (``docs/demo.png`` in the README).

The viewability test needs the select answer's ``viewable_url``: it skips, saying so,
against a server that does not send one.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from adfunnel.sim.server_proc import ServerProcess
from adfunnel.web.demo_seed import FRAME_GLOBAL, SLOTS, creative_of
from tests.http_server import serving

pytestmark = pytest.mark.e2e

ADMIN_KEY = "web-browser-test-admin-key-0123456789abcdef"
#: A browser's user agent (headless Chromium's own names it a bot: its beacons never bill).
BROWSER_UA = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/131.0.0.0 Safari/537.36")
SANDBOX = "allow-scripts allow-popups allow-popups-to-escape-sandbox"
#: A native ad whose texts are markup and script: they must show as text.
HOSTILE_TITLE = '<script>window.adfPwned=1</script><b id="pwn">Bold</b> deal'
HOSTILE_BODY = '<img src="x" onerror="window.adfPwned=2"> body & <i>more</i>'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("tag")
    env = {"ADFUNNEL_ADMIN_KEY": ADMIN_KEY, "ADFUNNEL_TOKEN_SECRET": "t" * 40,
           "ADFUNNEL_DEMO": "true", "ADFUNNEL_SEED": "5",
           # rendered/viewable come from the rollups: refreshed often, so a report read
           # a second after a settle counts every earlier test's beacons
           "ADFUNNEL_ROLLUP_REFRESH_S": "0.5",
           # the page's markup and beacons are under test, not latency: on a loaded CI
           # machine a first decision past 100 ms answered no ad and emptied a slot
           "ADFUNNEL_DEFAULT_DEADLINE_MS": "2000"}
    with ServerProcess(f"sqlite:///{tmp / 'tag.sqlite3'}", clock="system", extra_env=env,
                       log_path=tmp / "server.log", timeout_s=180) as proc:
        yield proc


class Admin:
    """The operator, over the API with the bootstrap admin key."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=15.0,
                                 headers={"Authorization": f"Bearer {ADMIN_KEY}"})

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(path, json=body)
        assert r.status_code in (201, 202), r.text
        return dict(r.json())

    def campaign_id(self, name: str) -> int:
        items = self.http.get("/v1/campaigns", params={"limit": 500}).json()["items"]
        return next(int(c["id"]) for c in items if c["name"] == name)

    def report(self, campaign_id: int) -> dict[str, Any]:
        """The campaign's report for today, once every event sent so far is recorded."""
        assert self.http.post("/v1/admin/events:settle").status_code == 200
        r = self.http.get(f"/v1/campaigns/{campaign_id}/report")
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[Admin]:
    a = Admin(server.url)
    yield a
    a.http.close()


class Publisher:
    """Another origin (a page server on its own port) whose pages embed the tag, under a
    strict CSP that allows the ad server's origin and its own only. ``GET /?slots=JSON``:
    a page with one placeholder per ``[placement, format, width, height]`` (``["gap"]``:
    3,000 px of text-free space); ``GET /vi?t=…`` counts hits (``hits``)."""

    def __init__(self, url: str, hits: list[str]) -> None:
        self.url = url
        self.hits = hits


@pytest.fixture(scope="module")
def publisher(server: ServerProcess) -> Iterator[Publisher]:
    ads = server.url
    csp = (f"default-src 'none'; script-src {ads}; connect-src {ads} 'self'; "
           f"img-src {ads}; frame-src {ads}; style-src 'self'; base-uri 'none'")
    hits: list[str] = []

    def slot(i: int, spec: list[Any]) -> str:
        if spec == ["gap"]:
            return '<div class="gap"></div>'
        p, f, w, h = spec
        return (f'<div id="{p}-{i}" data-adf-placement="{p}" data-adf-format="{f}" '
                f'data-adf-width="{w}" data-adf-height="{h}"></div>')

    async def page(request: Request) -> HTMLResponse:
        slots = "".join(slot(i, spec) for i, spec in
                        enumerate(json.loads(request.query_params["slots"])))
        html = (f'<!doctype html><html><head><meta charset="utf-8"><title>publisher</title>'
                f'<link rel="stylesheet" href="/style.css">'
                f'<script async src="{ads}/tag.js"></script></head>'
                f"<body><h1>A publisher's page</h1>{slots}</body></html>")
        return HTMLResponse(html, headers={"content-security-policy": csp})

    async def style(_: Request) -> Response:
        return Response(".gap { height: 3000px; }", media_type="text/css")

    async def viewable(request: Request) -> Response:
        hits.append(request.query_params["t"])
        return Response(status_code=204, headers={"access-control-allow-origin": "*"})

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/", page), Route("/style.css", style),
                            Route("/vi", viewable), Route("/healthz", healthz)])
    with serving(app) as url:
        yield Publisher(url, hits)


@pytest.fixture(scope="module")
def hostile(admin: Admin, publisher: Publisher) -> str:
    """Placements the publisher's origin may use (``pub-feed``, ``pub-low``), filled by a
    native ad whose title and body are markup and script; returns ``pub-feed``."""
    for placement in ("pub-feed", "pub-low"):
        admin.post("/v1/placements", {"id": placement, "name": f"Publisher {placement}",
                                      "allowed_origins": [publisher.url],
                                      "allowed_formats": ["native"]})
    advertiser = admin.post("/v1/advertisers", {"name": "Hostile texts"})
    campaign = admin.post("/v1/campaigns", {
        "advertiser_id": advertiser["id"], "name": "Markup in native texts",
        "objective": "clicks", "bid_type": "CPM", "bid_micros": 3_000_000,
        "daily_budget_micros": 50_000_000, "time_zone": "UTC", "flight_start": "2024-01-01",
        "pacing_mode": "accelerated",
        "targeting": {"attr": "placement", "in": ["pub-feed", "pub-low"]}})
    admin.post(f"/v1/campaigns/{campaign['id']}/ads", {
        "landing_url": "https://advertiser.example/", "format": "native", "width": 600,
        "height": 160, "creative": {"type": "native", "title": HOSTILE_TITLE,
                                    "body": HOSTILE_BODY, "sponsor": "<u>Sponsor</u>",
                                    "cta": "Go"}})
    return "pub-feed"


class Visit:
    """One page in a fresh browser context (its own storage: a new user): its console
    messages, every request it sends and every response it gets, and the ads the tag
    rendered (the tag's ``adfunnel:rendered`` events, recorded by an init script)."""

    def __init__(self, browser: Any, url: str, *, height: int = 900,
                 before: Any = None) -> None:
        self.context = browser.new_context(user_agent=BROWSER_UA,
                                           viewport={"width": 1280, "height": height})
        self.context.add_init_script(
            "document.addEventListener('adfunnel:rendered', function (e) {"
            " (window.__adfRendered = window.__adfRendered || []).push("
            "  {placement: e.target.getAttribute('data-adf-placement'), ad: e.detail}); });")
        self.page = self.context.new_page()
        self.page.set_default_timeout(20_000)
        self.console: list[str] = []
        self.requests: list[str] = []
        self.responses: list[tuple[str, int, dict[str, str]]] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("response", lambda r: self.responses.append((r.url, r.status, r.headers)))
        if before is not None:  # e.g. routes, set before the page loads
            before(self.page)
        self.first = self.page.goto(url)

    def rendered(self) -> dict[str, dict[str, Any]]:
        """placement id -> the ad the tag rendered there (the last one)."""
        events = self.page.evaluate("window.__adfRendered || []")
        return {e["placement"]: e["ad"] for e in events}

    def fired(self, url: str) -> int:
        """How many times the page requested ``url`` (relative to the ad server)."""
        return self.requests.count(urljoin(self.first.url, url))

    def close(self) -> None:
        self.context.close()


def filled(visit: Visit, *selectors: str) -> None:
    from playwright.sync_api import expect

    for sel in selectors:
        box = visit.page.locator(sel)
        expect(box).to_have_attribute("data-adf-state", re.compile("filled|empty"),
                                      timeout=20_000)
        if box.get_attribute("data-adf-state") != "filled":  # say why: shed, refused, …
            stats = httpx.get(urljoin(visit.first.url, "/v1/serving/stats"),
                              headers={"Authorization": f"Bearer {ADMIN_KEY}"}).text
            pytest.fail(f"{sel} left empty; console {visit.console}; answers "
                        f"{[r[:2] for r in visit.responses if '/v1/' in r[0]]}; {stats}")


def test_demo_page_renders_image_native_and_html(server: ServerProcess, browser: Any) -> None:
    from playwright.sync_api import expect

    visit = Visit(browser, f"{server.url}/demo")
    page = visit.page
    csp = visit.first.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "unsafe" not in csp
    filled(visit, "#ad-top", "#ad-feed", "#ad-bottom")
    base = server.url

    # top: the image ad, a real link with the "Ad" label
    top = page.locator("#ad-top a.adf-ad.adf-ad-image")
    expect(top).to_have_attribute("rel", "sponsored noopener")
    expect(top).to_have_attribute("target", "_blank")
    assert (top.get_attribute("href") or "").startswith(f"{base}/c?t=")
    expect(top.locator(".adf-label")).to_have_text("Ad")
    image = top.locator("img.adf-image")
    expect(image).to_have_attribute("src", f"{base}/demo/assets/banner-728x90.png")
    page.wait_for_function("document.querySelector('#ad-top img').naturalWidth === 728")

    # in-feed: the native ad, its texts, labelled "Sponsored"
    native = creative_of(SLOTS[1], base)
    feed = page.locator("#ad-feed a.adf-ad.adf-ad-native")
    expect(feed.locator(".adf-label")).to_have_text("Sponsored")
    expect(feed.locator(".adf-title")).to_have_text(native.title)  # type: ignore[union-attr]
    expect(feed.locator(".adf-sponsor")).to_have_text("Northwind Cycles")
    expect(feed.locator(".adf-cta")).to_have_text("Book a test ride")
    expect(feed.locator("img.adf-image")).to_have_count(1)

    # bottom: the html ad in its sandboxed frame; its script runs there, and only there
    frame_el = page.locator("#ad-bottom iframe.adf-frame")
    expect(frame_el).to_have_attribute("sandbox", SANDBOX)
    expect(page.frame_locator("#ad-bottom iframe").locator("#go")).to_contain_text("→")
    frame = next(f for f in page.frames if "/f?t=" in f.url)
    assert frame.evaluate(f"window.{FRAME_GLOBAL}") is True
    assert frame.evaluate("window.origin") == "null"  # opaque: not the page's, not ours
    assert page.evaluate(f"typeof window.{FRAME_GLOBAL}") == "undefined"
    click_href = frame.locator("#ad").get_attribute("href") or ""
    assert click_href.startswith(f"{base}/c?t=")  # %%CLICK_URL%% substituted

    # each ad's render beacon fired once; nothing refused by the page's CSP; no error
    ads = visit.rendered()
    assert set(ads) == {"demo-top", "demo-feed", "demo-bottom"}
    assert [visit.fired(ad["impression_url"]) for ad in ads.values()] == [1, 1, 1]
    assert page.evaluate("window.adfunnel.errors") == 0
    assert not [m for m in visit.console if m.startswith(("error", "warning"))], visit.console
    shots = os.environ.get("ADFUNNEL_SCREENSHOT_DIR")
    if shots:  # the top of the article down to the in-feed ad
        page.set_viewport_size({"width": 1100, "height": 1000})
        page.evaluate("window.scrollTo(0, 0)")
        feed_bottom = page.evaluate(
            "document.getElementById('ad-feed').getBoundingClientRect().bottom")
        page.screenshot(path=str(Path(shots) / "demo.png"), full_page=True,
                        clip={"x": 0, "y": 0, "width": 1100, "height": feed_bottom + 40})
    visit.close()


def test_click_lands_with_its_click_id_and_a_conversion_bills_once(
        server: ServerProcess, browser: Any, admin: Admin) -> None:
    from playwright.sync_api import expect

    top_campaign = admin.campaign_id(SLOTS[0].campaign)
    before = admin.report(top_campaign)
    visit = Visit(browser, f"{server.url}/demo")
    filled(visit, "#ad-top")
    # a person reads first (quicker clicks are invalid traffic), and the ad is viewable
    # (its billable impression is in) by the time they click
    visit.page.wait_for_timeout(1500)
    with visit.context.expect_page() as opened:
        visit.page.click("#ad-top a")
    landing = opened.value
    landing.wait_for_load_state()
    parts = urlsplit(landing.url)
    assert parts.path == "/demo/landing"
    click_id = parse_qs(parts.query)["adf_click_id"][0]
    expect(landing.locator("#click-id")).to_have_text(click_id)

    # keyboard activation: a real link, so Enter on it opens the landing page too (another
    # visitor: one viewer's second click within a minute is invalid traffic)
    other = Visit(browser, f"{server.url}/demo")
    filled(other, "#ad-feed")
    other.page.focus("#ad-feed a")
    with other.context.expect_page() as by_key:
        other.page.keyboard.press("Enter")
    by_key.value.wait_for_load_state()
    assert urlsplit(by_key.value.url).path == "/demo/landing"
    other.close()

    for _ in range(2):  # a retried postback bills once
        accepted = admin.post("/v1/conversions", {"click_id": click_id})
        assert accepted["campaign_id"] == top_campaign
    after = admin.report(top_campaign)
    assert after["clicks"] - before["clicks"] == 1
    assert after["conversions"] - before["conversions"] == 1
    visit.close()


def test_native_markup_shows_as_text_and_runs_nowhere(
        browser: Any, publisher: Publisher, hostile: str) -> None:
    from playwright.sync_api import expect

    slots = json.dumps([[hostile, "native", 600, 160]])
    visit = Visit(browser, f"{publisher.url}/?slots={slots}")
    filled(visit, f"#{hostile}-0")
    box = visit.page.locator(f"#{hostile}-0")
    expect(box.locator(".adf-title")).to_have_text(HOSTILE_TITLE)
    expect(box.locator(".adf-body")).to_have_text(HOSTILE_BODY)
    expect(box.locator(".adf-sponsor")).to_have_text("<u>Sponsor</u>")
    assert box.locator("script, b, i, u, img").count() == 0  # no element from the texts
    visit.page.wait_for_timeout(300)
    assert visit.page.evaluate("typeof window.adfPwned") == "undefined"
    assert visit.page.evaluate("window.adfunnel.errors") == 0
    # a cross-origin page under a strict CSP: the beacon is allowed for this origin
    (ad,) = visit.rendered().values()
    beacon = [r for r in visit.responses if r[0] == urljoin(visit.first.url, ad["impression_url"])
              or r[0].endswith(ad["impression_url"])]
    assert beacon and beacon[0][1] in (200, 204)
    assert beacon[0][2].get("access-control-allow-origin") == publisher.url
    assert not [m for m in visit.console if "Content Security Policy" in m]
    visit.close()


def test_an_origin_the_placement_does_not_allow_gets_no_ad(
        server: ServerProcess, browser: Any, publisher: Publisher, hostile: str) -> None:
    from playwright.sync_api import expect

    # the publisher's origin may use pub-feed (so its preflight passes), not demo-top
    slots = json.dumps([["demo-top", "banner", 728, 90]])
    visit = Visit(browser, f"{publisher.url}/?slots={slots}")
    box = visit.page.locator("#demo-top-0")
    expect(box).to_have_attribute("data-adf-state", "empty")
    expect(box).to_have_class("adf-empty")
    assert box.locator("*").count() == 0
    # the browser asked (a failed CORS read: the page sees no answer at all), and the
    # server's answer to that origin is the refusal
    assert [u for u in visit.requests if u.endswith("/v1/ads:select")]
    refused = httpx.post(f"{server.url}/v1/ads:select", headers={"origin": publisher.url},
                         json={"user": {"key": "u"}, "placement": {"id": "demo-top"},
                               "slots": [{"id": "s1", "position": 1, "width": 728,
                                          "height": 90}]})
    assert refused.status_code == 403 and refused.json()["error"] == "origin_not_allowed"
    assert visit.page.evaluate("window.adfunnel.errors") >= 1  # warned, never thrown
    assert not [u for u in visit.requests if "/i?t=" in u]
    visit.close()


def test_load_and_a_growing_feed_fill_later_placeholders(
        browser: Any, publisher: Publisher, hostile: str) -> None:
    from playwright.sync_api import expect

    slots = json.dumps([[hostile, "native", 600, 160]])
    visit = Visit(browser, f"{publisher.url}/?slots={slots}")
    filled(visit, f"#{hostile}-0")
    add = ("(id) => { const d = document.createElement('div'); d.id = id;"
           " d.setAttribute('data-adf-placement', 'pub-feed');"
           " d.setAttribute('data-adf-format', 'native');"
           " d.setAttribute('data-adf-width', '600'); d.setAttribute('data-adf-height', '160');"
           " document.body.appendChild(d); return d; }")
    state = visit.page.evaluate(
        f"() => {{ const d = ({add})('by-load'); window.adfunnel.load();"
        " return d.getAttribute('data-adf-state'); }")
    assert state == "loading"  # load() asked for it at once
    visit.page.evaluate(f"({add})('by-observer')")  # the MutationObserver finds this one
    filled(visit, "#by-load", "#by-observer")
    assert visit.page.evaluate("window.adfunnel.errors") == 0
    # a placeholder without a size is left empty, with a warning, and spoils no other
    visit.page.evaluate(f"() => {{ ({add})('sized'); const d = ({add})('no-size');"
                        " d.removeAttribute('data-adf-height'); window.adfunnel.load(); }")
    expect(visit.page.locator("#no-size")).to_have_attribute("data-adf-state", "empty")
    filled(visit, "#sized")
    assert visit.page.evaluate("window.adfunnel.errors") == 1
    assert any("has no size" in m for m in visit.console)
    visit.close()


def test_viewable_impressions_follow_the_mrc_rule(server: ServerProcess, browser: Any,
                                                  admin: Admin) -> None:
    """The top ad in view from the start is viewable after one second; the bottom one is
    rendered but not viewable while below the fold, not after half a second in view,
    and viewable after one continuous second. Billing is read from the server."""
    top_id = admin.campaign_id(SLOTS[0].campaign)
    bottom_id = admin.campaign_id(SLOTS[2].campaign)
    campaigns = {s.placement: admin.campaign_id(s.campaign) for s in SLOTS}
    admin.report(top_id)  # settles the ledger: earlier tests' beacons are all recorded
    time.sleep(1.5)  # and, after a rollup refresh, counted in the reports read below
    before = {p: admin.report(c) for p, c in campaigns.items()}
    visit = Visit(browser, f"{server.url}/demo")
    filled(visit, "#ad-top", "#ad-feed", "#ad-bottom")
    ads = visit.rendered()
    if "viewable_url" not in ads["demo-top"]:
        visit.close()
        pytest.skip("the select answer carries no viewable_url: viewability is not on "
                    "this server")
    page = visit.page
    top, bottom = ads["demo-top"], ads["demo-bottom"]
    page.wait_for_timeout(1400)
    assert visit.fired(top["viewable_url"]) == 1
    assert visit.fired(bottom["viewable_url"]) == 0
    billed = admin.report(top_id)["impressions"] - before["demo-top"]["impressions"]
    assert billed == 1
    assert admin.report(bottom_id)["impressions"] == before["demo-bottom"]["impressions"]

    # half a second in view, then away: not viewable
    page.evaluate("document.getElementById('ad-bottom').scrollIntoView({block: 'center'})")
    page.wait_for_timeout(500)
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(1400)
    assert visit.fired(bottom["viewable_url"]) == 0
    assert admin.report(bottom_id)["impressions"] == before["demo-bottom"]["impressions"]

    # one continuous second in view: viewable, billed once
    page.evaluate("document.getElementById('ad-bottom').scrollIntoView({block: 'center'})")
    deadline = time.monotonic() + 5
    while visit.fired(bottom["viewable_url"]) == 0 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert visit.fired(bottom["viewable_url"]) == 1
    after = {p: admin.report(c) for p, c in campaigns.items()}
    assert after["demo-bottom"]["impressions"] - before["demo-bottom"]["impressions"] == 1
    assert after["demo-feed"]["impressions"] == before["demo-feed"]["impressions"]
    assert visit.fired(top["viewable_url"]) == 1  # once, though in view again since
    rendered = sum(visit.fired(ad["impression_url"]) for ad in ads.values())
    viewable = sum(visit.fired(ad["viewable_url"]) for ad in ads.values())
    assert (viewable, rendered) == (2, 3)  # the in-feed ad was never in view a second

    # the server's count of this visit (reports read rendered/viewable from the rollups,
    # refreshed every few seconds)
    def counted(p: str, key: str, now: dict[str, dict[str, Any]]) -> int:
        return int(now[p].get(key, 0)) - int(before[p].get(key, 0))

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = {p: admin.report(c) for p, c in campaigns.items()}
        if sum(counted(p, "rendered", now) for p in campaigns) >= 3 and \
                sum(counted(p, "viewable", now) for p in campaigns) >= 2:
            break
        time.sleep(1)
    served = {p: (counted(p, "viewable", now), counted(p, "rendered", now)) for p in campaigns}
    print(f"demo page viewability, as the server counts this visit: {served} "
          f"(viewable, rendered) -> {viewable}/{rendered} = {viewable / rendered:.0%}")
    assert served == {"demo-top": (1, 1), "demo-feed": (0, 1), "demo-bottom": (1, 1)}
    visit.close()


#: Headless Chromium's pages are always visible: the page's visibility as a browser
#: reports it when the tab goes to the background, and the event it fires then.
_SET_HIDDEN = ("Object.defineProperty(document, 'hidden', {configurable: true, get: () => %s});"
               "document.dispatchEvent(new Event('visibilitychange'))")


def test_the_tag_fires_viewable_url_by_the_mrc_rule(browser: Any, publisher: Publisher,
                                                    hostile: str) -> None:
    """The tag's own timing, whatever the server bills: each answer's ``viewable_url`` is
    fired once, after one continuous second with half the ad in view while the page is
    visible. The real select
    answer passes through the browser with ``viewable_url`` added (pointing at the
    publisher's counter), as a server with viewability sends it."""
    slots = json.dumps([[hostile, "native", 600, 160], ["gap"], ["pub-low", "native", 600, 160]])

    def add_viewable_url(route: Any) -> None:
        answer = route.fetch()
        if answer.status != 200:
            route.fulfill(response=answer)
            return
        body = answer.json()
        for ad in body["ads"]:
            ad["viewable_url"] = f"{publisher.url}/vi?t={ad['token']}"
        route.fulfill(response=answer, json=body)

    del publisher.hits[:]
    visit = Visit(browser, f"{publisher.url}/?slots={slots}",
                  before=lambda p: p.route("**/v1/ads:select", add_viewable_url))
    page = visit.page
    filled(visit, f"#{hostile}-0", "#pub-low-2")
    tokens = {el: page.locator(f"#{el} a").get_attribute("href").split("t=", 1)[1]
              for el in (f"{hostile}-0", "pub-low-2")}
    page.wait_for_timeout(1400)
    assert publisher.hits == [tokens[f"{hostile}-0"]]  # the top one, once

    # half a second in view, then away: not viewable
    page.evaluate("document.getElementById('pub-low-2').scrollIntoView({block: 'center'})")
    page.wait_for_timeout(500)
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(1400)
    assert tokens["pub-low-2"] not in publisher.hits

    # 40 % in view (below the 50 % line) for two seconds: not viewable
    page.evaluate("const r = document.getElementById('pub-low-2').getBoundingClientRect();"
                  "window.scrollBy(0, r.top - window.innerHeight + 0.4 * r.height)")
    page.wait_for_timeout(2000)
    assert tokens["pub-low-2"] not in publisher.hits

    # in view, but the page hidden after half a second (another tab): the second stops
    page.evaluate("document.getElementById('pub-low-2').scrollIntoView({block: 'center'})")
    page.wait_for_timeout(500)
    page.evaluate(_SET_HIDDEN % "true")
    page.wait_for_timeout(1400)
    assert tokens["pub-low-2"] not in publisher.hits
    # visible again: one continuous second from then makes it viewable, once
    page.evaluate(_SET_HIDDEN % "false")
    page.wait_for_timeout(600)
    assert tokens["pub-low-2"] not in publisher.hits  # the hidden time did not count
    page.wait_for_timeout(800)
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(300)
    page.evaluate("document.getElementById('pub-low-2').scrollIntoView({block: 'center'})")
    page.wait_for_timeout(1400)
    assert sorted(publisher.hits) == sorted(tokens.values())
    assert page.evaluate("window.adfunnel.errors") == 0
    visit.close()
