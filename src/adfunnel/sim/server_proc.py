"""Start and stop a real ``adfunnel serve`` process for the replay and end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A child ``python -m adfunnel serve`` on a free loopback port.

    Raises:
        RuntimeError: when the server does not answer ``/healthz`` within ``timeout_s``.
    """

    def __init__(self, database_url: str, *, clock: str = "manual", extra_env: dict[str, str]
                 | None = None, log_path: Path | None = None, timeout_s: float = 60.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **(extra_env or {})}
        cmd = [sys.executable, "-m", "adfunnel", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--database-url", database_url, "--clock", clock]
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait(timeout_s)

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become healthy in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if hasattr(self._log, "close"):
            self._log.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
