"""The serving process over HTTP: N workers on one port (SO_REUSEPORT), TCP_NODELAY on
every accepted connection, the bare no-op route, and why a select answered 204."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from adfunnel.bench.http_server import process_tree, wait_workers
from adfunnel.runtime.server import listening_socket, serve_workers, server_config
from adfunnel.sim.server_proc import ManagedProcess, free_port
from tests.api_keys import ADMIN_HEADERS


@pytest.mark.e2e
def test_two_workers_answer_on_one_port(tmp_path: Path) -> None:
    """``serve --workers 2``: two child processes, each ready, both reached on one port."""
    url = f"sqlite:///{tmp_path / 'workers.sqlite3'}"
    with ManagedProcess(["serve", "--database-url", url, "--workers", "2"],
                        health_path="/readyz", timeout_s=120.0) as server:
        pids = wait_workers(server.url, 2, timeout_s=120.0)
        root = server.proc.pid
        assert len(pids) == 2 and root not in pids
        assert pids <= set(process_tree(root))  # the supervisor's own children
        # each worker serves the hot routes and the advertiser API alike
        assert httpx.get(server.url + "/v1/bench/noop").status_code == 204
        assert httpx.get(server.url + "/v1/campaigns", headers=ADMIN_HEADERS).status_code == 200


def test_a_taken_port_is_refused_before_any_worker_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            serve_workers("127.0.0.1", taken.getsockname()[1], 2)


def test_several_workers_need_a_fixed_port() -> None:
    with pytest.raises(ValueError, match="fixed port"):
        serve_workers("127.0.0.1", 0, 2)


def test_reuse_port_sockets_share_a_port() -> None:
    port = free_port()
    a = listening_socket("127.0.0.1", port, reuse_port=True)
    b = listening_socket("127.0.0.1", port, reuse_port=True)
    try:
        for s in (a, b):
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        a.close()
        b.close()


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextmanager
def _served(app: Any) -> Iterator[tuple[uvicorn.Server, str]]:
    """``app`` served as a worker serves it (our socket and config), in a thread."""
    sock = listening_socket("127.0.0.1", 0, reuse_port=True)
    server = uvicorn.Server(server_config(app, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            time.sleep(0.01)
        yield server, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_every_accepted_connection_has_tcp_nodelay() -> None:
    """Read on the server side: the option of each connection's own socket."""
    with _served(_answer) as (server, url), httpx.Client(base_url=url) as a, \
            httpx.Client(base_url=url) as b:
        assert a.get("/").text == "ok" and b.get("/").text == "ok"
        conns = list(server.server_state.connections)
        assert len(conns) == 2
        for proto in conns:
            sock = proto.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_noop_route_is_a_bare_204(client: TestClient) -> None:
    r = client.get("/v1/bench/noop")
    assert r.status_code == 204 and r.content == b""
    assert client.post("/v1/bench/noop").status_code == 405  # GET only


def test_a_204_select_names_its_outcome(client: TestClient) -> None:
    body = {"user": {"key": "u1", "attributes": {"geo.country": "US"}},
            "placement": {"id": "feed"},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
            "request_id": "nothing-to-serve"}
    r = client.post("/v1/ads:select", json=body)  # no campaign at all
    assert r.status_code == 204
    assert r.headers["x-adfunnel-outcome"] == "no_fill"
    assert r.headers["x-request-id"] == "nothing-to-serve"


def test_a_select_through_the_framework_route_answers_alike(client: TestClient) -> None:
    """The Starlette endpoint (no ArrivalStamp in front) gives the same answer."""
    # the FastAPI app behind RequestLog and the stamp
    inner = client.app.app.app  # type: ignore[attr-defined]
    with TestClient(inner) as plain:
        r = plain.post("/v1/ads:select", json={
            "user": {"key": "u1"}, "placement": {"id": "feed"},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]})
    assert r.status_code == 204 and r.headers["x-adfunnel-outcome"] == "no_fill"


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Loop:
    def __init__(self) -> None:
        self.soon: list[Any] = []

    def call_soon(self, fn: Any) -> None:
        self.soon.append(fn)


def test_a_response_goes_out_in_one_write() -> None:
    from adfunnel.runtime.server import CoalescingTransport

    raw, loop = _Recorder(), _Loop()
    t = CoalescingTransport(raw, loop)
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
    t.write(head)
    assert raw.writes == []  # held for the body
    t.write(b"ok")
    assert raw.writes == [head + b"ok"]
    t.write(b"HTTP/1.1 204 No Content\r\n\r\n")  # no body comes: the loop's next turn
    assert len(raw.writes) == 1 and len(loop.soon) == 2
    for fn in loop.soon:
        fn()
    assert raw.writes[-1] == b"HTTP/1.1 204 No Content\r\n\r\n" and len(raw.writes) == 2
    t.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    t.close()  # a close never loses a held block
    assert raw.writes[-1].startswith(b"HTTP/1.1 400") and raw.closed
    assert t.is_closing()  # everything else is the transport's own
