"""Start and stop real ``adfunnel`` processes for the replay, the fleet and end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from adfunnel.auth.keys import generate_key


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The ``Authorization: Bearer`` header of ``api_key`` (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class ManagedProcess:
    """A child ``python -m adfunnel <args> --port P`` on a free loopback port, waited for
    until ``health_path`` answers 200.

    The child's bootstrap admin key is ``ADFUNNEL_ADMIN_KEY`` of ``extra_env`` or of this
    process, else one drawn here; :attr:`admin_key` and :attr:`headers` carry it.

    Raises:
        RuntimeError: when the process does not become healthy within ``timeout_s``.
    """

    def __init__(self, args: list[str], *, health_path: str = "/healthz",
                 extra_env: dict[str, str] | None = None, log_path: Path | None = None,
                 timeout_s: float = 60.0, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **(extra_env or {})}
        env.setdefault("ADFUNNEL_ADMIN_KEY", generate_key())
        self.admin_key = env["ADFUNNEL_ADMIN_KEY"]
        #: what a client of the child's protected routes sends
        self.headers = auth_headers(self.admin_key)
        cmd = [sys.executable, "-m", "adfunnel", *args, "--host", "127.0.0.1",
               "--port", str(self.port)]
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait(health_path, timeout_s)

    def _wait(self, health_path: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        # one client for every poll: a new one per poll builds a TLS context each time
        # (about 20 ms of CPU), taken from the child starting up beside it
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"process exited with {self.proc.returncode}")
                try:
                    if client.get(self.url + health_path).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("process did not become healthy in time")

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # a child slow to shut down on a loaded machine: killed and reaped (a
                # Popen dropped while its child runs warns, and the suite fails on it)
                self.proc.kill()
                self.proc.wait(timeout=10)
        if hasattr(self._log, "close"):
            self._log.close()

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class ServerProcess(ManagedProcess):
    """A child ``adfunnel serve`` (every plane in one process) on ``database_url``."""

    def __init__(self, database_url: str, *, clock: str = "manual",
                 extra_env: dict[str, str] | None = None, log_path: Path | None = None,
                 timeout_s: float = 60.0) -> None:
        super().__init__(["serve", "--database-url", database_url, "--clock", clock],
                         extra_env=extra_env, log_path=log_path, timeout_s=timeout_s)
