"""The bare route ``adfunnel bench events`` compares the tracker with: the tracker's app
layered as it is (:func:`adfunnel.runtime.standalone.beacon_layers`) with ``GET /i`` a bare
ASGI 204 that does no work, served the tracker's way in a spawned process.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from adfunnel.sim.server_proc import free_port


async def _no_content(_: Request) -> Response:
    return Response(status_code=204)


_NO_CONTENT = {"type": "http.response.start", "status": 204, "headers": []}
_EMPTY_BODY = {"type": "http.response.body", "body": b""}


async def no_content_asgi(_scope: dict[str, Any], _receive: Any, send: Any) -> None:
    """The baseline's ``GET /i``: a bare ASGI 204, no work."""
    await send(_NO_CONTENT)
    await send(_EMPTY_BODY)


def baseline_app(access_log: bool = True, access_log_beacons: bool = False) -> Any:
    """The tracker's app with no work in it: the same layers
    (:func:`adfunnel.runtime.standalone.beacon_layers` — request log, arrival stamp, ``GET /i``
    a bare ASGI hot route outside Starlette) with ``/i`` a bare 204 and ``/healthz`` a
    Starlette route, as the tracker's are; only the handler differs."""
    from adfunnel.runtime.standalone import beacon_layers

    return beacon_layers(Starlette(routes=[Route("/healthz", _no_content)]),
                         {("GET", "/i"): no_content_asgi}, access_log, access_log_beacons)


def _serve_baseline(port: int, access_log: bool, access_log_beacons: bool) -> None:
    from adfunnel.runtime.server import serve_http

    serve_http(baseline_app(access_log, access_log_beacons), "127.0.0.1", port)


class BaselineServer:
    """:func:`baseline_app` served by :func:`adfunnel.runtime.server.serve_http` (as the tracker
    is) in a spawned process, started on construction (:meth:`wait_ready` waits for it),
    stopped on exit. ``access_log`` and ``access_log_beacons``: the tracker's settings,
    so that both log alike."""

    def __init__(self, access_log: bool = True, access_log_beacons: bool = False) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = mp.get_context("spawn").Process(
            target=_serve_baseline, args=(port, access_log, access_log_beacons),
            name="baseline-204", daemon=True)
        self.proc.start()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait until ``/healthz`` answers.

        Raises:
            RuntimeError: the server exited or did not answer within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0) as client:  # one TLS context, not one per poll
            while True:
                try:
                    if client.get(self.url + "/healthz").status_code == 204:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or not self.proc.is_alive():
                    raise RuntimeError("the baseline server did not start")
                time.sleep(0.05)

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc.pid is not None else []

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)

    def __enter__(self) -> BaselineServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
