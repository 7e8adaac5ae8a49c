"""The OpenRTB settings: exchange keys from a file, never shown; rates checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adfunnel.settings import SettingsError, load_settings


def test_exchange_keys_come_from_a_file_and_never_show(tmp_path: Path) -> None:
    """Breaks if the file is not read (tried: ``_keys_from_file`` returning at once: no
    ``ex2``), or a key reaches a repr or an error (tried: ``repr=True`` on the field)."""
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"ex2": "s" * 24}))
    s = load_settings(database_url="sqlite://", openrtb_exchange_keys={"ex1": "t" * 24},
                      openrtb_exchange_keys_file=str(path))
    assert s.openrtb_exchange_keys == {"ex1": "t" * 24, "ex2": "s" * 24}
    assert "s" * 24 not in repr(s) and "t" * 24 not in repr(s)
    path.write_text(json.dumps({"ex3": "short-secret"}))
    with pytest.raises(SettingsError) as err:
        load_settings(database_url="sqlite://", openrtb_exchange_keys_file=str(path))
    assert "ex3" in str(err.value) and "short-secret" not in str(err.value)


def test_exchange_rates_must_be_positive_iso_codes() -> None:
    """Breaks if rates are not checked (tried: ``_rates`` returning ``v`` at once)."""
    with pytest.raises(SettingsError, match="openrtb_exchange_rates"):
        load_settings(database_url="sqlite://", openrtb_exchange_rates={"eur": "1.1"})
    with pytest.raises(SettingsError, match="positive"):
        load_settings(database_url="sqlite://", openrtb_exchange_rates={"EUR": "0"})
    s = load_settings(database_url="sqlite://", openrtb_exchange_rates={"EUR": "1.08"})
    assert str(s.openrtb_exchange_rates["EUR"]) == "1.08"


def test_one_key_names_one_exchange(tmp_path: Path) -> None:
    """Two exchanges given the same key could not be told apart (the last one would be
    named for both: ``exchange`` targeting and reports misattributed), so the start is
    refused naming them, never the key; across the file and the setting too. Breaks if
    keys are not checked for repeats (tried: the ``seen`` check removed from
    ``check_exchange_keys``: both settings load)."""
    with pytest.raises(SettingsError) as err:
        load_settings(database_url="sqlite://",
                      openrtb_exchange_keys={"exA": "k" * 20, "exB": "k" * 20})
    assert "exA" in str(err.value) and "exB" in str(err.value)
    assert "k" * 20 not in str(err.value)
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"exC": "k" * 20}))
    with pytest.raises(SettingsError, match="exC"):
        load_settings(database_url="sqlite://", openrtb_exchange_keys={"exA": "k" * 20},
                      openrtb_exchange_keys_file=str(path))


def test_a_malformed_json_setting_is_an_invalid_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON-valued setting from the environment that is not JSON (a trailing comma)
    is reported as the other invalid settings are (``adfunnel serve`` prints them and
    exits 2), naming the key, never the value. Breaks if pydantic-settings' own error
    escapes ``load_settings`` (found by a trial: ``adfunnel serve`` printed a 150-line
    traceback and exited 1)."""
    monkeypatch.setenv("ADFUNNEL_OPENRTB_EXCHANGE_KEYS", '{"ex1": "env-secret-0123456789",}')
    with pytest.raises(SettingsError) as err:
        load_settings(database_url="sqlite://")
    assert "openrtb_exchange_keys" in str(err.value)
    assert "env-secret" not in str(err.value)
