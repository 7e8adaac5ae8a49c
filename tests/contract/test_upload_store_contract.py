"""The UploadStore contract, run on memory, SQLite (a file, migrated to head) and
PostgreSQL (a schema of its own, migrated to head).

Rules under test: a record is found by its id with every field and its time zone; an
advertiser's second upload of the same bytes keeps the first record; another
advertiser's same bytes get a record of their own; a second store on the same database
sees the same records; unknown ids are None. The files: written once, by name only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine

from adfunnel.campaigns.migrate import upgrade
from adfunnel.campaigns.uploads import (
    CreativeFiles,
    MemoryUploadStore,
    SqlUploadStore,
    Upload,
    UploadStore,
    creative_directory,
    new_upload_id,
)
from adfunnel.db import make_engine

NOW = datetime(2026, 12, 3, 0, 30, tzinfo=UTC)
DIGEST = "ab" * 32


def _upload(advertiser_id: int = 7, digest: str = DIGEST) -> Upload:
    return Upload(new_upload_id(), advertiser_id, digest, "image/png", 600, 500, 1234, NOW)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def open_store(request: pytest.FixtureRequest,
               tmp_path: Path) -> Iterator[Callable[[], UploadStore]]:
    """A factory of stores over one fresh storage (each SQL store its own engine)."""
    if request.param == "memory":
        shared = MemoryUploadStore()
        yield lambda: shared
        return
    url = (f"sqlite:///{tmp_path / 'uploads.db'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_schema_url"))
    engines: list[Engine] = []

    def open_sql() -> UploadStore:
        engines.append(make_engine(url))
        return SqlUploadStore(engines[-1])

    upgrade(url)
    yield open_sql
    for engine in engines:
        engine.dispose()


def test_a_record_round_trips(open_store: Callable[[], UploadStore]) -> None:
    record = _upload()
    assert open_store().add(record) == (record, True)
    found = open_store().get(record.id)
    assert found == record and found is not None and found.created_at.tzinfo is not None
    assert found.file_name == f"{DIGEST}.png"
    assert open_store().get(new_upload_id()) is None


def test_the_same_bytes_keep_one_record_per_advertiser(
        open_store: Callable[[], UploadStore]) -> None:
    store = open_store()
    first = _upload()
    store.add(first)
    assert open_store().add(_upload()) == (first, False)  # the advertiser's kept record
    other = _upload(advertiser_id=8)
    assert store.add(other) == (other, True)
    assert open_store().get(other.id) == other


def test_files_are_written_once_and_read_by_name_only(tmp_path: Path) -> None:
    files = CreativeFiles(tmp_path / "c")
    name = f"{DIGEST}.png"
    path = files.put(name, b"first")
    assert files.put(name, b"second") == path and path.read_bytes() == b"first"
    assert files.path(name) == path
    assert files.path("../c/" + name) is None and files.path(f"{DIGEST}.svg") is None
    with pytest.raises(ValueError):
        files.put("../x.png", b"x")
    assert list((tmp_path / "c").iterdir()) == [path]  # no temporary file left


def test_the_default_directory_is_beside_the_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "db" / "a.sqlite3"
    assert creative_directory(None, f"sqlite:///{db}") == db.parent.resolve() / "creatives"
    assert creative_directory(str(tmp_path / "x"), "sqlite://") == (tmp_path / "x").resolve()
