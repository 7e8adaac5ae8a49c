"""Uploaded creative images: their records (:class:`UploadStore`, in memory and in SQL)
and their files (:class:`CreativeFiles`, a directory).

An upload belongs to one advertiser. Its record holds the SHA-256 digest of the stored
(re-encoded, :mod:`adfunnel.campaigns.image`) bytes, which also names the file
(``<digest>.<extension>``): one file serves every record of the same bytes, and an
advertiser who uploads the same image again gets its existing record back. The SQL
store's table ``creative_uploads`` (migration 0016) works on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    Integer,
    String,
    Table,
    UniqueConstraint,
    insert,
    select,
)
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import IntegrityError

from adfunnel.campaigns.creative import FILE_NAME
from adfunnel.campaigns.image import EXTENSIONS
from adfunnel.db import connection_guard, metadata
from adfunnel.secret_file import data_dir

creative_uploads = Table(
    "creative_uploads",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("advertiser_id", BigInteger, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("content_type", String(32), nullable=False),
    Column("width", Integer, nullable=False),
    Column("height", Integer, nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("advertiser_id", "digest", name="uq_creative_uploads_advertiser_digest"),
)

def new_upload_id() -> str:
    """A fresh upload id: 128 random bits in hex (ids reveal nothing, not even order)."""
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Upload:
    """One advertiser's uploaded image; ``bytes`` is the stored file's size,
    ``width`` x ``height`` its pixels."""

    id: str
    advertiser_id: int
    digest: str
    content_type: str
    width: int
    height: int
    bytes: int
    created_at: datetime

    @property
    def file_name(self) -> str:
        """The stored file's name (``<digest>.<extension>``)."""
        return f"{self.digest}.{EXTENSIONS[self.content_type]}"


class UploadStore(Protocol):
    """Upload records by id, one per advertiser and digest."""

    def add(self, upload: Upload) -> tuple[Upload, bool]:
        """Keep ``upload``; (the record kept, True when it is new). The advertiser's
        earlier record of the same digest is kept instead (False)."""
        ...

    def get(self, upload_id: str) -> Upload | None:
        """The upload with this id, or None."""
        ...


class MemoryUploadStore:
    """An :class:`UploadStore` in this process's memory (tests, throwaway servers)."""

    def __init__(self) -> None:
        self._by_id: dict[str, Upload] = {}
        self._lock = threading.Lock()

    def add(self, upload: Upload) -> tuple[Upload, bool]:
        with self._lock:
            for kept in self._by_id.values():
                if (kept.advertiser_id, kept.digest) == (upload.advertiser_id, upload.digest):
                    return kept, False
            self._by_id[upload.id] = upload
            return upload, True

    def get(self, upload_id: str) -> Upload | None:
        return self._by_id.get(upload_id)


class SqlUploadStore:
    """An :class:`UploadStore` in the ``creative_uploads`` table (migrated to head)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._guard = connection_guard(engine)  # in-memory SQLite: one shared connection

    def add(self, upload: Upload) -> tuple[Upload, bool]:
        row = {"id": upload.id, "advertiser_id": upload.advertiser_id,
               "digest": upload.digest, "content_type": upload.content_type,
               "width": upload.width, "height": upload.height, "bytes": upload.bytes,
               "created_at": upload.created_at}
        try:
            with self._guard, self.engine.begin() as conn:
                conn.execute(insert(creative_uploads).values(**row))
            return upload, True
        except IntegrityError:  # this advertiser uploaded these bytes before (or a race)
            query = select(creative_uploads).where(
                creative_uploads.c.advertiser_id == upload.advertiser_id,
                creative_uploads.c.digest == upload.digest)
            with self._guard, self.engine.connect() as conn:
                kept = conn.execute(query).mappings().first()
            if kept is None:  # the id itself collided (2^-128): not this advertiser's
                raise
            return _record(kept), False

    def get(self, upload_id: str) -> Upload | None:
        with self._guard, self.engine.connect() as conn:
            row = conn.execute(select(creative_uploads).where(
                creative_uploads.c.id == upload_id)).mappings().first()
        return None if row is None else _record(row)


def _record(row: RowMapping) -> Upload:
    created = row["created_at"]
    if created.tzinfo is None:  # SQLite keeps no zone: stored as UTC
        created = created.replace(tzinfo=UTC)
    return Upload(row["id"], int(row["advertiser_id"]), row["digest"], row["content_type"],
                  int(row["width"]), int(row["height"]), int(row["bytes"]), created)


class CreativeFiles:
    """Stored image files in ``directory`` (created on the first write), named
    ``<sha256>.<extension>``; the same bytes are written once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def put(self, name: str, data: bytes) -> Path:
        """Write ``data`` as ``name`` atomically (a private temporary file renamed into
        place), unless it is there already; its path."""
        if not FILE_NAME.match(name):
            raise ValueError(f"not a creative file name: {name!r}")
        path = self.directory / name
        if path.is_file():
            return path
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)  # readers see the whole file or none
        finally:
            tmp.unlink(missing_ok=True)
        return path

    def path(self, name: str) -> Path | None:
        """The stored file ``name``, or None for another name or a missing file."""
        if not FILE_NAME.match(name):
            return None
        path = self.directory / name
        return path if path.is_file() else None


#: The folder of uploads beside an SQLite database file (or in the working directory).
DEFAULT_FOLDER = "creatives"


def creative_directory(creative_dir: str | None, database_url: str) -> Path:
    """Where uploads are stored: ``creative_dir`` when set, else ``creatives`` beside
    the SQLite database file, else ``creatives`` in the working directory (in-memory
    SQLite, PostgreSQL: set ``ADFUNNEL_CREATIVE_DIR`` to a volume every server shares)."""
    if creative_dir:
        return Path(creative_dir).expanduser().resolve()
    return (data_dir(database_url) or Path.cwd().resolve()) / DEFAULT_FOLDER
