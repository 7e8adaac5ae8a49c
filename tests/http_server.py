"""A real uvicorn server on a free loopback port, in a thread, for tests over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from adfunnel.sim.server_proc import free_port


@contextmanager
def serving(app: Any, health_path: str = "/healthz", port: int | None = None,
            **config: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn until the block ends (on ``port``, else a free one);
    yields its base URL once ``health_path`` answers 200. ``config`` goes to
    ``uvicorn.Config``."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client() as client:  # one TLS context, not one per poll
            for _ in range(200):
                try:
                    if client.get(url + health_path).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
