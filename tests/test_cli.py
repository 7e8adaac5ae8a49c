"""Start-up of the processes: an unreachable database or event log is one clear line on
stderr and exit code 2 (no traceback); a started server logs one start line and its
access log (JSON with ``--log-format json``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from adfunnel.cli.processes import hide_password
from adfunnel.sim.server_proc import ManagedProcess
from tests.internal_token import INTERNAL_TOKEN


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def adfunnel(*args: str, tmp_path: Path, env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    """Run ``python -m adfunnel ARGS`` the way a user would, in an empty directory
    (``env``: variables added to this process's environment)."""
    return subprocess.run([sys.executable, "-m", "adfunnel", *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, **(env or {})})


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_unreachable_postgres_is_one_line_without_password(tmp_path: Path, workers: str) -> None:
    port = closed_port()
    done = adfunnel("serve", "--port", "0", "--database-url",
                    f"postgresql://postgres:s3cret@127.0.0.1:{port}/x", "--workers", workers,
                    tmp_path=tmp_path)
    line = one_line(done)
    assert "s3cret" not in done.stderr + done.stdout
    assert f"postgresql://postgres:***@127.0.0.1:{port}/x" in line
    assert "Connection refused" in line


def test_unopenable_sqlite_file_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/dir/db.sqlite3"
    done = adfunnel("serve", "--port", "0", "--database-url", url, tmp_path=tmp_path)
    assert one_line(done) == f"adfunnel: cannot use the database {url}: " \
        "unable to open database file"


@pytest.mark.parametrize("command", [
    ["serve", "--port", "0"], ["serve", "--port", "0", "--workers", "2"],
    ["tracker", "--port", "0"], ["aggregator"]])
def test_unreachable_event_log_is_one_line(tmp_path: Path, command: list[str]) -> None:
    url = f"nats://127.0.0.1:{closed_port()}"
    db = f"sqlite:///{tmp_path}/db.sqlite3"
    line = one_line(adfunnel(*command, "--event-log", url, "--database-url", db,
                             tmp_path=tmp_path))
    assert line.startswith(f"adfunnel: cannot use the event log {url}: cannot connect: ")
    assert "ConnectionRefusedError" in line


def test_budget_service_with_unreachable_postgres(tmp_path: Path) -> None:
    port = closed_port()
    line = one_line(adfunnel("budget-service", "--port", "0", "--database-url",
                             f"postgresql://postgres@127.0.0.1:{port}/x", tmp_path=tmp_path,
                             env={"ADFUNNEL_INTERNAL_TOKEN": INTERNAL_TOKEN}))
    assert "cannot use the database" in line and "Connection refused" in line


def test_a_budget_service_needs_the_internal_token(tmp_path: Path) -> None:
    """Without ``ADFUNNEL_INTERNAL_TOKEN`` (or with a short one) the budget service does
    not start; the settings problem is named with the others, before any connection."""
    env = {k: v for k, v in os.environ.items() if k != "ADFUNNEL_INTERNAL_TOKEN"}
    for token, problem in ((None, "required"), ("short", "at least 32 characters")):
        extra = {"ADFUNNEL_INTERNAL_TOKEN": token} if token else {}
        done = subprocess.run([sys.executable, "-m", "adfunnel", "budget-service", "--port",
                               "0", "--database-url", "sqlite://"],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={**env, **extra, "ADFUNNEL_TOKEN_TTL_S": "0"})
        assert done.returncode == 2, done.stdout + done.stderr
        out = " ".join(done.stdout.split())
        assert "internal_token: " in out and problem in out, out
        assert "token_ttl_s" in out  # every problem at once


@pytest.mark.e2e
def test_a_server_logs_its_start_and_every_request_as_json(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    db = f"sqlite:///{tmp_path}/db.sqlite3"
    with ManagedProcess(["serve", "--database-url", db, "--log-format", "json",
                         "--clock", "manual"], log_path=log, timeout_s=120.0) as server:
        r = httpx.get(server.url + "/v1/bench/noop", headers={"x-request-id": "probe-1"})
        assert r.headers["x-request-id"] == "probe-1"
    records = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    starts = [x for x in records if x["logger"] == "adfunnel.start"]
    assert len(starts) == 1
    (start,) = starts
    assert start["listen"] == server.url and start["clock"] == "manual"
    assert start["store"] == db and start["event_log"] == "memory"
    assert start["served_log"] == "none" and start["version"]
    access = [x for x in records if x["logger"] == "adfunnel.access"]
    probe = [x for x in access if x["request_id"] == "probe-1"]
    assert len(probe) == 1
    assert probe[0]["path"] == "/v1/bench/noop" and probe[0]["status"] == 204
    assert probe[0]["method"] == "GET" and isinstance(probe[0]["latency_ms"], float)
    assert {"time", "level", "message"} <= set(probe[0])


def test_hide_password() -> None:
    assert hide_password("postgresql://u:p%40ss@h:5432/d") == "postgresql://u:***@h:5432/d"
    assert hide_password("sqlite:///x.db") == "sqlite:///x.db"
