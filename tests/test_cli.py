"""``adfunnel serve`` start-up failures: one clear line on stderr, no traceback, exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from adfunnel.cli import hide_password


def serve(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m adfunnel serve ARGS`` the way a user would, in an empty directory."""
    return subprocess.run(
        [sys.executable, "-m", "adfunnel", "serve", "--port", "0", *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )


@pytest.mark.parametrize("workers", ["1", "2"])
def test_unreachable_postgres_is_one_line_without_password(tmp_path: Path, workers: str) -> None:
    done = serve("--database-url", "postgresql://postgres:s3cret@127.0.0.1:1/x",
                 "--workers", workers, tmp_path=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr + done.stdout
    assert "postgresql://postgres:***@127.0.0.1:1/x" in line
    assert "Connection refused" in line


def test_unopenable_sqlite_file_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/dir/db.sqlite3"
    done = serve("--database-url", url, tmp_path=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == f"adfunnel: cannot use the database {url}: " \
        "unable to open database file"


def test_hide_password() -> None:
    assert hide_password("postgresql://u:p%40ss@h:5432/d") == "postgresql://u:***@h:5432/d"
    assert hide_password("sqlite:///x.db") == "sqlite:///x.db"
