"""The dashboard's pages and forms on a real embedded app (SQLite in memory, manual
clock) through Starlette's TestClient: login, what each role sees, another
advertiser's campaign (404), the edit forms with the server's field errors, the CSV."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from adfunnel.ui.session import COOKIE

START = datetime(2026, 7, 15, 9, 0, tzinfo=UTC)
ADMIN_KEY = "ui-pages-admin-key-0123456789abcdefghij"


@pytest.fixture
def rt() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY)
    runtime = build_runtime(settings, ManualClock(START), seed=1)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(build_app(rt), follow_redirects=False) as c:
        yield c


def campaign(rt: Runtime, advertiser_id: int, name: str) -> int:
    c = rt.store.create_campaign(
        advertiser_id=advertiser_id, name=name, objective="clicks", bid_type="CPM",
        bid_micros=2_000_000, daily_budget_micros=10_000_000, time_zone="UTC",
        flight_start=date(2026, 7, 1))
    rt.store.create_ad(campaign_id=c.id, landing_url="https://a.example/", creative_ref="x",
                       format="banner", width=300, height=250)
    return c.id


@pytest.fixture
def world(rt: Runtime) -> dict[str, Any]:
    """Two advertisers with a campaign each; keys for the first, a reviewer and admin."""
    a = rt.store.create_advertiser("Alpha")
    b = rt.store.create_advertiser("Beta")
    return {"a": a.id, "b": b.id, "ca": campaign(rt, a.id, "Alpha one"),
            "cb": campaign(rt, b.id, "Beta one"),
            "key_a": rt.keys.issue("advertiser", a.id).key,
            "reviewer": rt.keys.issue("reviewer").key}


def log_in(client: TestClient, key: str) -> str:
    """Log in with ``key``; the session id the cookie holds."""
    r = client.post("/ui/login", data={"api_key": key})
    assert r.status_code == 303, r.text
    session_id = r.cookies[COOKIE]
    client.cookies.set(COOKIE, session_id, path="/ui")
    return session_id


def test_login_cookie_and_refused_keys(client: TestClient, world: dict[str, Any]) -> None:
    r = client.post("/ui/login", data={"api_key": "not-a-key"})
    assert r.status_code == 401 and "unknown or has been revoked" in r.text
    assert COOKIE not in r.headers.get("set-cookie", "")
    r = client.post("/ui/login", data={"api_key": world["key_a"]})
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert client.get("/ui/campaigns").status_code == 200  # the client sends the cookie
    r = client.post("/ui/logout")
    assert r.headers["location"] == "/ui/login"
    assert f'{COOKIE}=""' in r.headers["set-cookie"]
    client.cookies.clear()
    assert client.get("/ui/campaigns").headers["location"] == "/ui/login"


def test_advertiser_sees_only_its_own(client: TestClient, world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    page = client.get("/ui/campaigns")
    assert page.status_code == 200
    assert "Alpha one" in page.text and "Beta one" not in page.text
    other = world["cb"]
    assert client.get(f"/ui/campaigns/{other}").status_code == 404
    assert client.get(f"/ui/campaigns/{other}/report.csv").status_code == 404
    r = client.post(f"/ui/campaigns/{other}/status", data={"action": "pause", "version": "1"})
    assert r.status_code == 404
    r = client.post(f"/ui/campaigns/{other}/budget",
                    data={"daily_budget": "1", "lifetime_budget": "", "version": "1"})
    assert r.status_code == 404
    assert client.get(f"/ui/campaigns/{world['ca']}").status_code == 200


def test_other_advertisers_campaign_is_unchanged(rt: Runtime, client: TestClient,
                                                 world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    client.post(f"/ui/campaigns/{world['cb']}/status", data={"action": "pause", "version": "1"})
    assert rt.store.get_campaign(world["cb"]).status.value == "active"


def test_a_write_the_viewer_may_not_make_answers_its_refusal(
        rt: Runtime, client: TestClient, world: dict[str, Any]) -> None:
    """A reviewer posting a campaign's edit form by hand, or an advertiser posting to
    another's campaign, gets the API's refusal (403 / 404) with its message, not a 422
    form page with none. Red when the form reads the refusal as a field problem."""
    log_in(client, world["reviewer"])
    r = client.post(f"/ui/campaigns/{world['ca']}/status", data={"action": "pause",
                                                                 "version": "1"})
    assert r.status_code == 403 and "Not allowed" in r.text and "not reviewer" in r.text
    assert rt.store.get_campaign(world["ca"]).status.value == "active"
    log_in(client, world["key_a"])
    r = client.post(f"/ui/campaigns/{world['cb']}/status", data={"action": "pause",
                                                                 "version": "1"})
    assert r.status_code == 404 and "Not found" in r.text
    assert rt.store.get_campaign(world["cb"]).status.value == "active"


def test_admin_sees_every_advertiser(client: TestClient, world: dict[str, Any]) -> None:
    log_in(client, ADMIN_KEY)
    page = client.get("/ui/campaigns").text
    assert "Alpha one" in page and "Beta one" in page
    only_b = client.get(f"/ui/campaigns?advertiser_id={world['b']}").text
    assert "Beta one" in only_b and "Alpha one" not in only_b


def test_reviewer_lands_on_the_review_queue(rt: Runtime, client: TestClient,
                                            world: dict[str, Any]) -> None:
    pending = rt.store.create_ad(campaign_id=world["ca"], landing_url="https://p.example/",
                                 creative_ref="pending.png", format="banner", width=300,
                                 height=250, review_state="pending_review")
    log_in(client, world["reviewer"])
    assert client.get("/ui").headers["location"] == "/ui/review"
    assert client.get("/ui/campaigns").headers["location"] == "/ui/review"
    queue = client.get("/ui/review")
    assert f'data-ad-id="{pending.id}"' in queue.text
    r = client.post(f"/ui/review/{pending.id}/approve", headers={"HX-Request": "true"})
    assert r.status_code == 204 and r.headers["HX-Redirect"] == "/ui/review"
    assert rt.store.get_ad(pending.id).review_state.value == "approved"
    assert f'data-ad-id="{pending.id}"' not in client.get("/ui/review").text


def test_advertiser_cannot_review(rt: Runtime, client: TestClient,
                                  world: dict[str, Any]) -> None:
    ad = rt.store.create_ad(campaign_id=world["ca"], landing_url="https://p.example/",
                            creative_ref="own.png", format="banner", width=300, height=250,
                            review_state="pending_review")
    log_in(client, world["key_a"])
    r = client.post(f"/ui/review/{ad.id}/approve")
    assert r.status_code in (403, 404)
    assert rt.store.get_ad(ad.id).review_state.value == "pending_review"


def test_targeting_errors_show_next_to_the_field(client: TestClient,
                                                 world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    url = f"/ui/campaigns/{world['ca']}/targeting"
    hx = {"HX-Request": "true"}
    r = client.post(url, data={"targeting": '{"all": [{"attr": "shoe_size", "in": [1]}]}',
                               "version": "1"}, headers=hx)
    assert r.status_code == 200 and r.text.lstrip().startswith("<form id=\"targeting-form\"")
    assert 'data-field="targeting.all[0].attr"' in r.text
    r = client.post(url, data={"targeting": '{"attr": ', "version": "1"}, headers=hx)
    assert 'data-field="targeting"' in r.text and "not valid JSON" in r.text
    r = client.post(url, data={"targeting": '{"attr": "geo.country", "in": ["US"]}',
                               "version": "1"}, headers=hx)
    assert r.status_code == 204 and r.headers["HX-Redirect"] == f"/ui/campaigns/{world['ca']}"
    page = client.get(f"/ui/campaigns/{world['ca']}").text
    assert "geo.country" in page


def test_budget_edit_is_checked_against_its_version(rt: Runtime, client: TestClient,
                                                    world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    url = f"/ui/campaigns/{world['ca']}/budget"
    r = client.post(url, data={"daily_budget": "12.5", "lifetime_budget": "", "version": "1"})
    assert r.status_code == 303
    assert rt.store.get_campaign(world["ca"]).daily_budget_micros == 12_500_000
    # the same form again, still at version 1: refused, not overwritten
    r = client.post(url, data={"daily_budget": "99", "lifetime_budget": "", "version": "1"})
    assert r.status_code == 422 and "version" in r.text
    assert rt.store.get_campaign(world["ca"]).daily_budget_micros == 12_500_000
    r = client.post(url, data={"daily_budget": "1.0000001", "lifetime_budget": "",
                               "version": "2"}, headers={"HX-Request": "true"})
    assert 'data-field="daily_budget_micros"' in r.text and "6 decimals" in r.text


def test_dayparts_and_status_forms(rt: Runtime, client: TestClient,
                                   world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    cid = world["ca"]
    url = f"/ui/campaigns/{cid}/dayparts"
    # row 0 left empty (removed), row 1 ends past midnight: the error names row 1
    bad = {"rows": "2", "version": "1", "dp-0-start": "0", "dp-0-end": "24",
           "dp-1-wd": "0", "dp-1-start": "9", "dp-1-end": "30"}
    r = client.post(url, data=bad, headers={"HX-Request": "true"})
    assert 'data-field="dayparts[1].end_hour"' in r.text
    assert 'name="dp-1-end" value="30"' in r.text  # the submitted row, shown again
    good = {"rows": "2", "version": "1", "dp-0-wd": ["0", "1"], "dp-0-start": "9",
            "dp-0-end": "17", "dp-1-start": "0", "dp-1-end": "24"}
    r = client.post(url, data=good)
    assert r.status_code == 303
    (part,) = rt.store.get_campaign(cid).dayparts
    assert (part.weekdays, part.start_hour, part.end_hour) == ((0, 1), 9, 17)
    page = client.get(f"/ui/campaigns/{cid}").text
    assert 'name="dp-0-wd" value="1" aria-label="Tue, row 1" checked' in page
    r = client.post(f"/ui/campaigns/{cid}/status", data={"action": "pause", "version": "2"})
    assert r.status_code == 303
    page = client.get(f"/ui/campaigns/{cid}").text
    assert 'data-status="paused"' in page and 'id="resume-button"' in page


def test_new_campaign_and_ad_forms(rt: Runtime, client: TestClient,
                                   world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    form = {"name": "Made in the UI", "objective": "clicks", "bid_type": "CPC",
            "bid": "0.40", "daily_budget": "abc", "time_zone": "UTC",
            "flight_start": "2026-07-15", "pacing_mode": "even", "targeting": ""}
    r = client.post("/ui/campaigns", data=form)
    assert r.status_code == 422 and 'data-field="daily_budget_micros"' in r.text
    r = client.post("/ui/campaigns", data={**form, "daily_budget": "5", "time_zone": "Mars/Base"})
    assert r.status_code == 422 and 'data-field="time_zone"' in r.text
    r = client.post("/ui/campaigns", data={**form, "daily_budget": "5"})
    assert r.status_code == 303
    cid = int(r.headers["location"].rsplit("/", 1)[1])
    made = rt.store.get_campaign(cid)
    assert made.advertiser_id == world["a"] and made.bid_micros == 400_000
    assert made.billable_event.value == "viewable"  # the form's default
    r = client.post("/ui/campaigns", data={**form, "daily_budget": "5",
                                           "billable_event": "rendered"})
    assert r.status_code == 303
    rendered = int(r.headers["location"].rsplit("/", 1)[1])
    assert rt.store.get_campaign(rendered).billable_event.value == "rendered"
    r = client.post("/ui/campaigns", data={**form, "daily_budget": "5",
                                           "billable_event": "sometimes"})
    assert r.status_code == 422 and 'data-field="billable_event"' in r.text
    r = client.post(f"/ui/campaigns/{cid}/ads", data={
        "landing_url": "https://made.example/", "creative_ref": "made.png", "format": "banner",
        "width": "300", "height": "250"})
    assert r.status_code == 303
    ads = rt.store.list_ads(cid)
    assert [a.review_state.value for a in ads] == ["pending_review"]
    page = client.get(f"/ui/campaigns/{cid}").text
    assert 'data-review="pending_review"' in page and 'data-status="no_approved_ads"' in page


def test_csv_download(client: TestClient, world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    r = client.get(f"/ui/campaigns/{world['ca']}/report.csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    assert r.text.splitlines()[0].startswith("period_start,campaign_id,impressions,clicks")
    r = client.get(f"/ui/campaigns/{world['ca']}/report.csv?from=2026-07-10&to=2026-07-15")
    assert r.status_code == 200
    r = client.get(f"/ui/campaigns/{world['ca']}/report.csv?from=2026-07-16&to=2026-07-15")
    assert r.status_code == 422 and "from must be on or before to" in r.text


def test_revoked_key_is_logged_out(rt: Runtime, client: TestClient,
                                   world: dict[str, Any]) -> None:
    log_in(client, world["key_a"])
    assert client.get("/ui/campaigns").status_code == 200
    rt.keys.revoke(world["key_a"][:12])
    assert client.get("/ui/campaigns").headers["location"] == "/ui/login"


def test_explainer_shows_each_candidate(client: TestClient, world: dict[str, Any]) -> None:
    r = client.post("/v1/ads:select", json={
        "user": {"key": "u1"}, "placement": {"id": "feed", "reserve_cpm_micros": 100_000},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
        "request_id": "explain-me", "explain": True},
        headers={"authorization": f"Bearer {ADMIN_KEY}"})  # explain: admin keys only
    assert r.status_code == 200
    log_in(client, ADMIN_KEY)
    page = client.get("/ui/explain?request_id=explain-me").text
    assert 'id="explain-record"' in page
    won = r.json()["ads"][0]["campaign_id"]
    lost = world["cb"] if won == world["ca"] else world["ca"]
    assert f"#{won}" in page and f"#{lost}" in page  # the loser, with its reason
    missing = client.get("/ui/explain?request_id=nobody").text
    assert 'id="explain-error"' in missing
    log_in(client, world["key_a"])  # every advertiser's candidates: admins only
    assert client.get("/ui/explain?request_id=explain-me").status_code == 403


def test_the_explainer_calls_the_decision_route_only(rt: Runtime, client: TestClient,
                                                    world: dict[str, Any]) -> None:
    """A ``../`` in the request id stays in it: the page's API call reaches the decision
    route (no such record), never another GET route. Breaks if the id is put in the path
    unquoted (tried: the call went to ``/v1/campaigns`` and showed its answer)."""
    log_in(client, ADMIN_KEY)
    for request_id in ("../campaigns", "../../v1/campaigns", "x/../../campaigns"):
        r = client.get("/ui/explain", params={"request_id": request_id})
        assert r.status_code == 200 and 'id="explain-error"' in r.text, request_id
        assert 'id="explain-record"' not in r.text


def test_static_assets_are_served_locally(client: TestClient) -> None:
    page = client.get("/ui/login").text
    for asset in ("vendor/htmx-2.0.11.min.js", "vendor/uPlot-1.6.32.iife.min.js", "app.js",
                  "app.css"):
        assert f"/ui/static/{asset}" in page
        assert client.get(f"/ui/static/{asset}").status_code == 200
    assert "http://" not in page.split("<main>")[0] and "https://" not in page.split("<main>")[0]


def test_pages_stay_out_of_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert paths and not [p for p in paths if p.startswith("/ui")]


@pytest.mark.slow
def test_csv_download_puts_each_event_in_its_own_local_hour_and_day(
        rt: Runtime, client: TestClient, world: dict[str, Any]) -> None:
    """Adelaide (+10:30): 23:50 on 3 March and 00:10 on 4 March, a day apart in the
    dashboard's CSV as in the ledger report (issue #22 §8)."""
    from adfunnel.billing.model import EventType, LedgerEvent
    from adfunnel.billing.rollups import hours_of
    from adfunnel.campaigns.schedule import local_day

    c = rt.store.create_campaign(
        advertiser_id=world["a"], name="Adelaide", objective="clicks", bid_type="CPM",
        bid_micros=2_000_000, daily_budget_micros=10_000_000, time_zone="Australia/Adelaide",
        flight_start=date(2026, 3, 1))
    times = [datetime(2026, 3, 3, 13, 20, tzinfo=UTC), datetime(2026, 3, 3, 13, 40, tzinfo=UTC)]
    for i, at in enumerate(times):
        rt.ledger.record(LedgerEvent(f"adl{i}", EventType.IMPRESSION, c.id, 1, "feed", "CPM",
                                     1_000, at, local_day(at, "Australia/Adelaide")), 10**9)
    rt.rollups.refresh(hours_of(times))
    log_in(client, world["key_a"])
    r = client.get(f"/ui/campaigns/{c.id}/report.csv?from=2026-03-03&to=2026-03-04")
    assert r.status_code == 200, r.text
    rows = [line.split(",")[:3] for line in r.text.splitlines()[1:]]
    assert rows == [["2026-03-03T23:00:00+10:30", str(c.id), "1"],
                    ["2026-03-04T00:00:00+10:30", str(c.id), "1"]]


@pytest.mark.slow
def test_campaign_page_shows_invalid_traffic_per_reason_beside_spend(
        rt: Runtime, client: TestClient, world: dict[str, Any]) -> None:
    """Flagged events today: the hourly table counts them beside spend, and the line
    under it names each reason (issue #22 §9: a dashboard that shows no invalid traffic
    while billing less than was served leaves the advertiser guessing)."""
    from adfunnel.billing.model import EventType, LedgerEvent
    from adfunnel.billing.rollups import hours_of

    at = START.replace(minute=10)
    for i, reason in enumerate(["crawler_ua", "crawler_ua", "datacenter_ip"]):
        ev = LedgerEvent(f"bot{i}", EventType.IMPRESSION, world["ca"], 1, "feed", "CPM", 0,
                         at, at.date())
        assert rt.ledger.record_invalid(ev, reason)
    rt.rollups.refresh(hours_of([at]))
    log_in(client, world["key_a"])
    r = client.get(f"/ui/campaigns/{world['ca']}")
    assert r.status_code == 200, r.text
    line = r.text[r.text.index('id="ivt-reasons"'):]
    line = line[:line.index("</p>")]
    assert "<code>crawler_ua</code> 2" in line and "<code>datacenter_ip</code> 1" in line
    assert 'title="crawler_ua 2, datacenter_ip 1">3</td>' in r.text


def test_campaign_page_shows_rendered_viewable_and_viewability(
        rt: Runtime, client: TestClient, world: dict[str, Any]) -> None:
    """Four renders and three viewable today: the hourly table's totals show 4, 3 and
    75.0 %; the facts say when the campaign bills an impression."""
    from adfunnel.billing.model import EventType, LedgerEvent
    from adfunnel.billing.rollups import hours_of

    at = START.replace(minute=10)
    for i in range(4):
        for kind in (EventType.RENDER, EventType.VIEWABLE)[: 1 + (i < 3)]:
            ev = LedgerEvent(f"v{i}", kind, world["ca"], 1, "feed", "CPM", 0, at, at.date())
            rt.ledger.record(ev, 10**9)
    rt.rollups.refresh(hours_of([at]))
    log_in(client, world["key_a"])
    r = client.get(f"/ui/campaigns/{world['ca']}")
    assert r.status_code == 200, r.text
    assert 'id="total-rendered">4<' in r.text and 'id="total-viewable">3<' in r.text
    assert 'id="total-viewability">75.0%<' in r.text
    assert 'id="billable-event">viewable<' in r.text


def test_pages_may_not_be_framed(client: TestClient, world: dict[str, Any]) -> None:
    """A page of another origin on the same site gets the Strict cookie sent in its
    iframe, so it could frame the dashboard and trick a click onto a button (the pages
    answered with no framing policy). Breaks if a page, the login form included, may be
    put in a frame."""
    pages = [client.get("/ui/login")]
    log_in(client, world["key_a"])
    pages += [client.get("/ui/campaigns"), client.get(f"/ui/campaigns/{world['ca']}"),
              client.get(f"/ui/campaigns/{world['cb']}")]  # 404 page
    for r in pages:
        assert r.headers["x-frame-options"] == "DENY", r.url
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"], r.url


def _form_key(page: str) -> str:
    marker = 'name="form_key" value="'
    start = page.index(marker) + len(marker)
    return page[start:page.index('"', start)]


def test_a_create_form_posted_twice_makes_one(rt: Runtime, client: TestClient,
                                              world: dict[str, Any]) -> None:
    """The new-campaign and new-ad forms carry a key of their own (one per render), sent
    as ``Idempotency-Key``: the same form posted twice (a double click, a resend after a
    timeout) makes one campaign and one ad, and both posts land on it. A fresh render
    has a fresh key. Red when the form's key is not sent (two campaigns)."""
    log_in(client, world["key_a"])
    page = client.get("/ui/campaigns").text
    key = _form_key(page)
    assert key != _form_key(client.get("/ui/campaigns").text)
    form = {"name": "Once", "objective": "clicks", "bid_type": "CPC", "bid": "0.40",
            "daily_budget": "5", "time_zone": "UTC", "flight_start": "2026-07-15",
            "pacing_mode": "even", "targeting": "", "form_key": key}
    first = client.post("/ui/campaigns", data=form)
    again = client.post("/ui/campaigns", data=form)
    assert first.status_code == again.status_code == 303
    assert first.headers["location"] == again.headers["location"]
    mine = [c for c in rt.store.list_campaigns() if c.name == "Once"]
    assert len(mine) == 1
    cid = mine[0].id
    ad_key = _form_key(client.get(f"/ui/campaigns/{cid}").text)
    ad = {"landing_url": "https://once.example/", "creative_ref": "once.png",
          "format": "banner", "width": "300", "height": "250", "form_key": ad_key}
    assert client.post(f"/ui/campaigns/{cid}/ads", data=ad).status_code == 303
    assert client.post(f"/ui/campaigns/{cid}/ads", data=ad).status_code == 303
    assert len(rt.store.list_ads(cid)) == 1
