"""RequestLog: x-request-id on every answer (the bare hot routes included) and one
access line per request, as JSON."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.observability.logs import JsonLines
from adfunnel.observability.request_log import (
    ACCESS_LOGGER,
    BEACON_PATHS,
    REQUEST_ID_KEY,
    RequestLog,
    quiet_paths,
)
from tests.serving.helpers import ad_request, make_campaign

START = {"type": "http.response.start", "status": 204, "headers": []}


@pytest.fixture
def access_lines() -> Iterator[io.StringIO]:
    """The access logger's lines as JSON, in a buffer."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLines())
    log = logging.getLogger(ACCESS_LOGGER)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield out
    log.removeHandler(handler)
    log.setLevel(level)


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.getvalue().splitlines()]


async def bare_204(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send(START)  # a shared constant, as the hot routes send
    await send({"type": "http.response.body", "body": b""})


def call(app: Any, headers: list[tuple[bytes, bytes]] | None = None,
         path: str = "/i") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"t=secret",
             "headers": headers or []}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return scope, sent


def header(message: dict[str, Any], name: bytes) -> list[bytes]:
    return [v for k, v in message["headers"] if k == name]


def test_a_sane_incoming_id_is_echoed_and_logged(access_lines: io.StringIO) -> None:
    _, sent = call(RequestLog(bare_204), [(b"x-request-id", b"abc-123.x_y:z")])
    assert header(sent[0], b"x-request-id") == [b"abc-123.x_y:z"]
    assert START["headers"] == []  # the handler's constant message is left alone
    (line,) = lines(access_lines)
    assert line["method"] == "GET" and line["path"] == "/i" and line["status"] == 204
    assert line["request_id"] == "abc-123.x_y:z" and line["logger"] == ACCESS_LOGGER
    assert 0 <= line["latency_ms"] < 1_000 and line["time"].endswith("Z")
    assert "secret" not in access_lines.getvalue()  # the query string (a token) is not logged


@pytest.mark.parametrize("bad", [b"", b"a b", b"x" * 129, b"\xc3\xa9t\xc3\xa9", b"a\r\nb: c"])
def test_an_insane_incoming_id_is_replaced(bad: bytes) -> None:
    _, sent = call(RequestLog(bare_204, access_log=False), [(b"x-request-id", bad)])
    (rid,) = header(sent[0], b"x-request-id")
    assert rid != bad and rid.decode().isascii() and len(rid) < 40


def test_generated_ids_differ_between_requests_and_processes() -> None:
    a, b = RequestLog(bare_204, access_log=False), RequestLog(bare_204, access_log=False)
    ids = {header(call(app)[1][0], b"x-request-id")[0] for app in (a, a, b)}
    assert len(ids) == 3


def test_a_handler_may_name_its_request(access_lines: io.StringIO) -> None:
    async def naming(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope[REQUEST_ID_KEY] = "decision-7"
        await bare_204(scope, receive, send)

    _, sent = call(RequestLog(naming))
    assert header(sent[0], b"x-request-id") == [b"decision-7"]
    assert lines(access_lines)[0]["request_id"] == "decision-7"


def test_without_access_log_nothing_is_logged(access_lines: io.StringIO) -> None:
    call(RequestLog(bare_204, access_log=False))
    assert access_lines.getvalue() == ""


def test_a_client_gone_and_a_failure_are_logged(access_lines: io.StringIO) -> None:
    async def silent(scope: dict[str, Any], receive: Any, send: Any) -> None:
        return None

    async def broken(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    call(RequestLog(silent))
    with pytest.raises(RuntimeError):
        call(RequestLog(broken))
    assert [x["status"] for x in lines(access_lines)] == [499, 500]


@pytest.mark.slow
def test_every_route_of_the_server_carries_the_id(client: TestClient,
                                                   access_lines: io.StringIO) -> None:
    """The advertiser API, the bare select and beacon routes; a decision is explained by
    the id its answer carried."""
    made = make_campaign(client)
    slow_ok = 5_000  # deadline_ms: a loaded test machine must not turn an answer into a 204
    assert client.get("/healthz").headers["x-request-id"]
    assert client.get(f"/v1/campaigns/{made['campaign']['id']}").headers["x-request-id"]
    r = client.post("/v1/ads:select", json=ad_request(deadline_ms=slow_ok),
                    headers={"x-request-id": "req-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "req-1"
    assert r.json()["request_id"] == "req-1"
    assert client.get("/v1/decisions/req-1").status_code == 200
    named = client.post("/v1/ads:select",
                        json=ad_request(request_id="body-id", deadline_ms=slow_ok),
                        headers={"x-request-id": "header-id"})
    assert named.headers["x-request-id"] == "body-id"  # the decision's own name wins
    token = r.json()["ads"][0]["token"]
    imp = client.get(f"/i?t={token}")
    assert imp.status_code == 204 and imp.headers["x-request-id"]
    click = client.get(f"/c?t={token}", follow_redirects=False)
    assert click.status_code == 302 and click.headers["x-request-id"]
    none = client.post("/v1/ads:select", json=ad_request(slots=[
        {"id": "s1", "position": 1, "width": 728, "height": 90}]))
    assert none.status_code == 204 and none.headers["x-request-id"]
    logged = {(x["method"], x["path"], x["status"]) for x in lines(access_lines)}
    assert {("POST", "/v1/ads:select", 200), ("POST", "/v1/ads:select", 204)} <= logged
    assert not {path for _, path, _ in logged} & BEACON_PATHS  # the default: beacons quiet


@pytest.mark.nats
def test_the_tracker_process_carries_the_id_on_its_bare_routes(
        nats_url: str, tmp_path: Any, access_lines: io.StringIO) -> None:
    """``adfunnel tracker``'s app: /i and /c are served outside Starlette, and still
    answer with x-request-id; with ``access_log_beacons`` they get an access line."""
    import uuid

    from adfunnel.clock import SystemClock
    from adfunnel.runtime.event_plane import make_event_log
    from adfunnel.runtime.standalone import build_tracker_app
    from adfunnel.settings import load_settings

    settings = load_settings(database_url=f"sqlite:///{tmp_path / 't.sqlite3'}",
                             event_log_url=nats_url, token_secret="k" * 32, aggregate=False,
                             access_log_beacons=True,
                             event_stream=f"TEST_OPS_{uuid.uuid4().hex[:8]}")
    try:
        with TestClient(build_tracker_app(settings)) as tracker:
            for path in ("/i?t=not-a-token", "/c?t=not-a-token", "/healthz"):
                r = tracker.get(path, headers={"x-request-id": "trk-1"},
                                follow_redirects=False)
                assert r.headers["x-request-id"] == "trk-1", path
    finally:
        log = make_event_log(settings, SystemClock())
        log.delete_stream()  # type: ignore[attr-defined]
        log.close()
    paths = {x["path"] for x in lines(access_lines) if x["request_id"] == "trk-1"}
    assert paths == {"/i", "/c", "/healthz"}


@pytest.mark.parametrize("path", sorted(BEACON_PATHS))
def test_a_quiet_path_has_an_id_but_no_access_line(access_lines: io.StringIO, path: str) -> None:
    _, sent = call(RequestLog(bare_204, quiet_paths=quiet_paths(False)), path=path)
    assert header(sent[0], b"x-request-id")
    assert lines(access_lines) == []
    call(RequestLog(bare_204, quiet_paths=quiet_paths(True)), path=path)  # asked for
    (line,) = lines(access_lines)
    assert line["path"] == path


def test_other_paths_are_logged_beside_quiet_ones(access_lines: io.StringIO) -> None:
    call(RequestLog(bare_204, quiet_paths=BEACON_PATHS), path="/v1/campaigns")
    assert [x["path"] for x in lines(access_lines)] == ["/v1/campaigns"]


def test_a_path_cannot_forge_a_log_line() -> None:
    """A percent-encoded newline or NUL in the path is written escaped in the text log:
    ``/x%0a2026-12-03 ... ERROR ...`` forged a convincing line, a NUL made grep call the
    log binary. Mutation seen red: the path logged as decoded."""
    from adfunnel.observability.logs import TextLines

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(TextLines())
    log = logging.getLogger(ACCESS_LOGGER)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        call(RequestLog(bare_204), path="/nothing\n2026-12-03T12:00:00.000Z ERROR forged\x00")
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    text = out.getvalue()
    assert text.count("\n") == 1 and "\x00" not in text, text
    assert "/nothing\\x0a2026-12-03T12:00:00.000Z ERROR forged\\x00" in text
