"""The embedded default's token secret, kept in its data directory across restarts.

Tracking tokens and click ids are HMAC-signed with ``token_secret``. A fleet sets
``ADFUNNEL_TOKEN_SECRET``; when it is unset and the campaign store is an SQLite file,
the secret is generated once and kept beside that file (``<database file
name>.token_secret`` in the database's directory, mode 0600), so a restart does not
invalidate every beacon and click still outstanding. The name is per database file:
two stores in one directory (two deployments) never share a secret, so a token one of
them signed cannot bill the other's campaigns. With an in-memory or PostgreSQL store
and no secret set, a random secret serves this process only (and the start-up log says
so).

The file is created atomically (written under a private temporary name, then linked
into place, never replacing an existing file), so two processes starting together on
one data directory agree on one secret.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

#: The file's name ends so, after the database file's name.
SECRET_SUFFIX = ".token_secret"
#: Shortest secret accepted (characters), as for ``ADFUNNEL_TOKEN_SECRET``.
MIN_SECRET_CHARS = 32


def secret_path(database_url: str) -> Path | None:
    """Where the token secret of an SQLite database file is kept (beside it, named after
    it), or None (in-memory SQLite, PostgreSQL)."""
    database = _database_file(database_url)
    return None if database is None else database.with_name(database.name + SECRET_SUFFIX)


def data_dir(database_url: str) -> Path | None:
    """The directory of an SQLite database file, or None (in-memory SQLite, PostgreSQL)."""
    database = _database_file(database_url)
    return None if database is None else database.parent


def _database_file(database_url: str) -> Path | None:
    """The resolved path of an SQLite database file, or None."""
    if not database_url.startswith("sqlite"):
        return None
    try:
        database = make_url(database_url).database
    except ArgumentError:
        return None
    if not database or database == ":memory:" or "mode=memory" in database_url:
        return None
    if database.startswith("file:"):  # an SQLite URI filename
        database = database[len("file:"):].partition("?")[0]
    return Path(database).expanduser().resolve()


def load_or_create(path: Path) -> tuple[str, Path, bool]:
    """(secret, ``path``, True when it was generated now): the secret kept in ``path``
    (:func:`secret_path`), generated there when absent.

    Raises:
        ValueError: the file exists but holds fewer than 32 characters, or its
            directory cannot hold it (the message names the path, never the secret).
    """
    directory = path.parent
    try:
        return _read(path), path, False
    except FileNotFoundError:
        pass
    secret = secrets.token_hex(32)
    tmp = directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # never replaces: a secret another process kept wins
        except FileExistsError:
            return _read(path), path, False
        return secret, path, True
    except OSError as exc:
        raise ValueError(f"cannot keep the token secret in {path}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _read(path: Path) -> str:
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if len(text) < MIN_SECRET_CHARS:
        raise ValueError(f"{path}: holds fewer than {MIN_SECRET_CHARS} characters; delete it "
                         f"to generate a new token secret, or set ADFUNNEL_TOKEN_SECRET")
    return text
