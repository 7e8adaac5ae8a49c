"""The shared data directory: one lookup (``adfunnel.data.data_dir``) for every reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from adfunnel.data import data_dir


def test_data_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.setenv("ADFUNNEL_DATA_DIR", str(tmp_path))
    assert data_dir("ivt") == tmp_path
    monkeypatch.delenv("ADFUNNEL_DATA_DIR")
    assert (data_dir("ivt") / "ivt" / "datacenter_ips").is_dir()


def test_a_missing_folder_names_the_environment_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADFUNNEL_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="ADFUNNEL_DATA_DIR"):
        data_dir("no-such-folder-anywhere")
