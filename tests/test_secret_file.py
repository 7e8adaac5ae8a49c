"""The embedded default's token secret survives a restart (issue 22 §9): generated once
beside the SQLite store, mode 0600, never printed; a set secret wins; rotation keeps the
previous secret verifying."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from adfunnel.observability.logs import log_start
from adfunnel.secret_file import SECRET_SUFFIX, secret_path
from adfunnel.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def _no_secret_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADFUNNEL_TOKEN_SECRET", raising=False)
    monkeypatch.delenv("ADFUNNEL_TOKEN_SECRET_PREVIOUS", raising=False)


def test_the_secret_is_generated_once_and_kept_with_mode_0600(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'adfunnel.sqlite3'}"
    first = load_settings(database_url=url)
    path = tmp_path / f"adfunnel.sqlite3{SECRET_SUFFIX}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first.token_secret and len(first.token_secret) >= 32
    assert first.token_secret_note.startswith("token secret: generated and kept")
    restarted = load_settings(database_url=url)
    assert restarted.token_secret == first.token_secret
    assert restarted.token_secret_note.startswith("token secret: kept in")
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_a_set_secret_wins_and_no_file_is_written(tmp_path: Path) -> None:
    s = load_settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}",
                      token_secret="s" * 32)
    assert s.token_secret == "s" * 32 and list(tmp_path.iterdir()) == []


def test_without_a_data_directory_the_secret_is_per_process() -> None:
    assert secret_path("sqlite://") is None and secret_path("postgresql://u@h/db") is None
    a, b = load_settings(database_url="sqlite://"), load_settings(database_url="sqlite://")
    assert a.token_secret != b.token_secret
    assert "this process only" in a.token_secret_note


def test_a_short_kept_secret_is_a_settings_problem(tmp_path: Path) -> None:
    path = tmp_path / f"db.sqlite3{SECRET_SUFFIX}"
    path.write_text("tiny-secret-xyz\n")
    with pytest.raises(SettingsError) as err:
        load_settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert "tiny-secret-xyz" not in str(err.value) and str(path) in str(err.value)


def test_start_up_says_where_the_secret_is_never_what(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = load_settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    with caplog.at_level(logging.INFO, logger="adfunnel.start"):
        log_start(s, "http://127.0.0.1:1")
    text = caplog.text
    assert str(tmp_path / f"db.sqlite3{SECRET_SUFFIX}") in text and s.token_secret not in text
    assert s.token_secret not in repr(s)


def test_two_databases_in_one_directory_keep_two_secrets(tmp_path: Path) -> None:
    """Two stores beside each other are two deployments: a token one signed must not
    verify (and bill) at the other. Red when the secret file is shared per directory.
    Processes of one store share its secret, whichever URL form names the file."""
    a = load_settings(database_url=f"sqlite:///{tmp_path / 'a.sqlite3'}")
    b = load_settings(database_url=f"sqlite:///{tmp_path / 'b.sqlite3'}")
    again = load_settings(database_url=f"sqlite:///file:{tmp_path / 'a.sqlite3'}?uri=true")
    assert a.token_secret != b.token_secret and again.token_secret == a.token_secret
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"a.sqlite3{SECRET_SUFFIX}", f"b.sqlite3{SECRET_SUFFIX}"]


def test_the_previous_secret_is_a_key_that_still_verifies() -> None:
    s = load_settings(database_url="sqlite://", token_secret="n" * 32,
                      token_secret_previous="o" * 32)
    assert s.previous_token_keys() == (b"o" * 32,)
    assert "o" * 32 not in repr(s)
    with pytest.raises(SettingsError):
        load_settings(database_url="sqlite://", token_secret_previous="short")
