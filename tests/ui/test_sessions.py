"""The dashboard's server-side sessions (adfunnel.ui.session): the cookie holds a random
session id, never the API key; a session expires on the server's clock, ends at logout
and when its key is revoked; the cookie is ``Secure`` over HTTPS, directly or through a
trusted proxy's ``X-Forwarded-Proto`` only."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.auth.keys import digest
from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import load_settings
from adfunnel.ui.session import COOKIE, SESSION_TTL_S

START = datetime(2026, 7, 15, 9, 0, tzinfo=UTC)
ADMIN_KEY = "ui-sessions-admin-key-0123456789abcdefghij"
PROXY = ("10.0.0.5", 40000)  # inside the trusted 10.0.0.0/8
STRANGER = ("203.0.113.9", 40000)


def _runtime(db: str = "sqlite://") -> Runtime:
    settings = load_settings(database_url=db, clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY, trusted_proxies=["10.0.0.0/8"])
    return build_runtime(settings, ManualClock(START), seed=1)


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = _runtime()
    yield runtime
    runtime.close()


def _client(rt: Runtime, **kw: Any) -> TestClient:
    return TestClient(build_app(rt), follow_redirects=False, **kw)


def _log_in(c: TestClient, key: str, **headers: str) -> Any:
    r = c.post("/ui/login", data={"api_key": key}, headers=headers)
    assert r.status_code == 303, r.text
    return r


def _page(c: TestClient, session_id: str) -> int:
    """Status of the campaign list with ``session_id`` as the cookie (303: to login)."""
    c.cookies.clear()
    c.cookies.set(COOKIE, session_id, path="/ui")
    return c.get("/ui/campaigns").status_code


@pytest.mark.slow
def test_the_cookie_never_holds_the_key(rt: Runtime) -> None:
    adv = rt.store.create_advertiser("a")
    key = rt.keys.issue("advertiser", adv.id).key
    with _client(rt) as c:
        for k in (key, ADMIN_KEY):
            r = _log_in(c, k)
            session_id = r.cookies[COOKIE]
            assert k not in r.headers["set-cookie"] and k[:12] not in session_id
            assert len(session_id) >= 43 and session_id != k
            held = rt.keys.store.session(digest(session_id))  # only the id's digest
            assert held is not None and held.digest != session_id
            assert _page(c, session_id) == 200
            assert _page(c, k) == 303  # the key itself is no session


@pytest.mark.slow
def test_revoking_the_key_ends_its_sessions(rt: Runtime) -> None:
    adv = rt.store.create_advertiser("a")
    issued = rt.keys.issue("advertiser", adv.id)
    with _client(rt) as c:
        sessions = [_log_in(c, issued.key).cookies[COOKIE] for _ in range(2)]
        other = _log_in(c, ADMIN_KEY).cookies[COOKIE]
        assert [_page(c, s) for s in sessions] == [200, 200]
        c.cookies.clear()
        r = c.delete(f"/v1/api-keys/{issued.record.prefix}",
                     headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert r.status_code == 204
        assert [_page(c, s) for s in sessions] == [303, 303]
        assert all(rt.keys.store.session(digest(s)) is None for s in sessions)
        assert _page(c, other) == 200  # another key's session lives on


@pytest.mark.slow
def test_a_session_expires_on_the_servers_clock(rt: Runtime) -> None:
    with _client(rt) as c:
        session_id = _log_in(c, ADMIN_KEY).cookies[COOKIE]
        rt.clock.advance(SESSION_TTL_S - 1)
        assert _page(c, session_id) == 200
        rt.clock.advance(1)
        assert _page(c, session_id) == 303
        _log_in(c, ADMIN_KEY)  # a new login drops the expired record
        assert rt.keys.store.session(digest(session_id)) is None


@pytest.mark.slow
def test_logout_ends_the_session_on_the_server(rt: Runtime) -> None:
    with _client(rt) as c:
        session_id = _log_in(c, ADMIN_KEY).cookies[COOKIE]
        c.cookies.set(COOKIE, session_id, path="/ui")
        assert c.post("/ui/logout").status_code == 303
        assert _page(c, session_id) == 303  # a copy of the cookie is worth nothing


@pytest.mark.slow
@pytest.mark.parametrize(("base", "peer", "proto", "secure"), [
    ("http://testserver", STRANGER, None, False),
    ("https://testserver", STRANGER, None, True),  # TLS to this server itself
    ("http://testserver", STRANGER, "https", False),  # anyone may claim https
    ("http://testserver", PROXY, "https", True),  # the trusted proxy says so
    ("http://testserver", PROXY, "http", False),
    ("http://testserver", PROXY, None, False),
    ("http://testserver", PROXY, "http, https", True),  # the nearest proxy's word
])
def test_secure_over_https_and_via_a_trusted_proxy_only(
        rt: Runtime, base: str, peer: tuple[str, int], proto: str | None,
        secure: bool) -> None:
    with _client(rt, base_url=base, client=peer) as c:
        headers = {"x-forwarded-proto": proto} if proto else {}
        cookie = _log_in(c, ADMIN_KEY, **headers).headers["set-cookie"]
    assert ("Secure" in cookie) is secure, cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie


@pytest.mark.slow
def test_sessions_live_in_the_sql_store(tmp_path) -> None:
    """Kept in the database: a second process on it knows the session (and its end)."""
    db = f"sqlite:///{tmp_path / 's.sqlite3'}"
    first, second = _runtime(db), _runtime(db)
    try:
        with _client(first) as a, _client(second) as b:
            session_id = _log_in(a, ADMIN_KEY).cookies[COOKIE]
            assert _page(b, session_id) == 200
            b.cookies.set(COOKIE, session_id, path="/ui")
            b.post("/ui/logout")
            assert _page(a, session_id) == 303
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("headers", [
    {"origin": "http://testserver:8081", "sec-fetch-site": "same-site"},  # another port
    {"origin": "http://blog.testserver"},  # a browser without Sec-Fetch-*: its Origin
    {"origin": "null"},  # a sandboxed frame
])
def test_another_origins_page_cannot_post_a_form(rt: Runtime,
                                                  headers: dict[str, str]) -> None:
    """SameSite=Strict keeps the cookie from other *sites*, but another origin of the
    same site (another port of the host, a sibling subdomain) still gets it sent (tried:
    a page on 127.0.0.1:18402 paused a campaign of the dashboard on 127.0.0.1:18401 with
    a self-submitting form). Breaks if a ``/ui`` form (logout and login included) is
    taken from a browser naming another origin."""
    adv = rt.store.create_advertiser("a")
    cid = rt.store.create_campaign(
        advertiser_id=adv.id, name="c", objective="clicks", bid_type="CPM",
        bid_micros=1_000_000, daily_budget_micros=5_000_000, time_zone="UTC",
        flight_start=START.date()).id
    with _client(rt) as c:
        session_id = _log_in(c, ADMIN_KEY).cookies[COOKIE]
        c.cookies.set(COOKIE, session_id, path="/ui")
        r = c.post(f"/ui/campaigns/{cid}/status", data={"action": "pause", "version": "1"},
                   headers=headers)
        assert r.status_code == 403 and rt.store.get_campaign(cid).status.value == "active"
        assert c.post("/ui/logout", headers=headers).status_code == 403
        r = c.post("/ui/login", data={"api_key": ADMIN_KEY}, headers=headers)
        assert r.status_code == 403 and COOKIE not in r.headers.get("set-cookie", "")
        assert _page(c, session_id) == 200  # the session lives on
        own = {"origin": "http://testserver", "sec-fetch-site": "same-origin"}
        c.cookies.set(COOKIE, session_id, path="/ui")
        r = c.post(f"/ui/campaigns/{cid}/status", data={"action": "pause", "version": "1"},
                   headers=own)
        assert r.status_code == 303 and rt.store.get_campaign(cid).status.value == "paused"
