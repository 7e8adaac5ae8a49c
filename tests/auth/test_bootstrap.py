"""The bootstrap admin key: ``ADFUNNEL_ADMIN_KEY`` (>= 32 characters, checked with the
other settings), or one generated and printed once by ``adfunnel serve``."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from adfunnel.auth import bootstrap_admin_key
from adfunnel.settings import SettingsError, load_settings
from adfunnel.sim.server_proc import free_port


def test_a_given_admin_key_is_kept_and_nothing_printed() -> None:
    out = io.StringIO()
    settings = load_settings(admin_key="k" * 32)
    assert bootstrap_admin_key(settings, out) is settings
    assert out.getvalue() == ""


def test_without_one_a_key_is_generated_and_printed_once() -> None:
    out = io.StringIO()
    settings = bootstrap_admin_key(load_settings(admin_key=None).model_copy(
        update={"admin_key": None}), out)
    assert settings.admin_key is not None and len(settings.admin_key) == 43
    assert out.getvalue().count(settings.admin_key) == 1


def test_a_short_admin_key_is_reported_with_the_other_problems() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(admin_key="short", token_ttl_s=0)
    fields = sorted(p.split(":")[0] for p in err.value.problems)
    assert fields == ["admin_key", "token_ttl_s"]


def test_the_admin_key_never_shows_in_the_settings_repr() -> None:
    assert "k" * 32 not in repr(load_settings(admin_key="k" * 32))


@pytest.mark.e2e
def test_serve_prints_a_working_admin_key_once_when_none_is_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ADFUNNEL_ADMIN_KEY"}
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "adfunnel", "serve", "--port", str(port),
             "--database-url", f"sqlite:///{tmp_path / 'db.sqlite3'}"],
            env=env, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        keys = re.findall(r"admin API key .*: (\S+)", log.read_text())
        assert len(keys) == 1
        key = keys[0]
        assert len(key) == 43
        ok = httpx.get(url + "/v1/advertisers", headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200
        assert httpx.get(url + "/v1/advertisers").status_code == 401
        assert httpx.get(url + "/metrics",
                         headers={"Authorization": f"Bearer {key[:-1]}x"}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert log.read_text().count(key) == 1


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=1.0) as client:  # one TLS context, not one per poll
        while time.monotonic() < deadline:
            assert proc.poll() is None, "serve exited"
            try:
                if client.get(url + "/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise AssertionError("serve did not become healthy")
