"""Shared test fixtures: where the test PostgreSQL is, and per-test isolated databases.

PostgreSQL: ``ADFUNNEL_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); tests that need it are
skipped when it is unreachable. Each test gets its own schema (``pg_schema_url``),
dropped afterwards, so no test depends on another's leftovers or on the order.

Redis: ``ADFUNNEL_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379``), skipped the
same way (``redis_url``); tests keep to keys of their own and delete them.

Every process and settings object of the tests gets ``ADFUNNEL_ADMIN_KEY`` =
``tests.api_keys.ADMIN_KEY``; clients of protected routes send ``ADMIN_HEADERS``.

NATS with JetStream: ``ADFUNNEL_TEST_NATS_URL`` (default ``nats://127.0.0.1:4222``),
skipped the same way (``nats_url``); tests use streams of their own and delete them.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
import redis
from sqlalchemy import Engine, create_engine, text

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pytest_configure(config: pytest.Config) -> None:
    """Every app, settings object and child server of the tests starts with the same
    bootstrap admin key (``tests.api_keys.ADMIN_KEY``), unless a test says otherwise."""
    from tests.api_keys import ADMIN_KEY

    os.environ.setdefault("ADFUNNEL_ADMIN_KEY", ADMIN_KEY)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start real server processes (``e2e``) count as ``slow``: the fast loop,
    ``pytest -m "not slow"``, leaves them out."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    items[:] = _heaviest_files_first(items)


def _heaviest_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """Items regrouped so the files holding ``e2e`` tests come first, then those holding
    other ``slow`` tests, then the rest, each group in collection order (a stable sort).

    The README's command runs ``--dist loadfile --no-loadscope-reorder``: workers take
    whole files in this order, so the few files of minutes (a full replay's fixture is
    ~4.5 min) start at once and the many short files fill the end, where xdist's own order
    (most tests first) starts them late. Measured on the quiet 2-core machine: 21 min 12 s
    against 21 min 15 s in xdist's order (no gain there; the tail cannot be longer than
    one short file)."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    weight: dict[str, int] = {}
    for item in items:
        w = 0 if item.get_closest_marker("e2e") else 1 if item.get_closest_marker("slow") else 2
        weight[file_of(item)] = min(w, weight.get(file_of(item), 2))
    return sorted(items, key=lambda item: weight[file_of(item)])


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels() -> None:
    """Compile (or load) the numba kernels once, before any test times itself."""
    from adfunnel.runtime.compiled import warm_up

    warm_up()


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The test PostgreSQL URL (``postgresql+psycopg://…``)."""
    url = os.environ.get("ADFUNNEL_TEST_PG_URL", DEFAULT_PG_URL)
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


@pytest.fixture(scope="session")
def pg_admin(pg_url: str) -> Iterator[Engine]:
    """An autocommit engine on the test PostgreSQL; skips the test when unreachable."""
    engine = create_engine(pg_url, isolation_level="AUTOCOMMIT", pool_size=2)
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:  # any connection failure means "no PostgreSQL here"
        engine.dispose()
        if os.environ.get("ADFUNNEL_REQUIRE_SERVICES"):
            pytest.fail(f"PostgreSQL not reachable at {pg_url}: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {pg_url}: {exc}")
    yield engine
    engine.dispose()


@pytest.fixture
def pg_schema_url(pg_url: str, pg_admin: Engine) -> Iterator[str]:
    """A URL whose connections use a fresh, empty schema (dropped after the test).

    The schema is set with ``options=-csearch_path=…`` in the URL's query, so
    ``make_engine(url)`` and Alembic both land in it.
    """
    schema = f"t_{uuid.uuid4().hex[:20]}"
    with pg_admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in pg_url else "?"
    try:
        yield f"{pg_url}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with pg_admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


@pytest.fixture
def sqlite_file_url(tmp_path: Path) -> str:
    """A URL of an SQLite file in the test's own temporary directory."""
    return f"sqlite:///{tmp_path / 'adfunnel.db'}"


DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis URL (``ADFUNNEL_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379``);
    skips the test when it does not answer a PING within a second."""
    url = os.environ.get("ADFUNNEL_TEST_REDIS_URL", DEFAULT_REDIS_URL)
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        if os.environ.get("ADFUNNEL_REQUIRE_SERVICES"):
            pytest.fail(f"Redis not reachable at {url}: {exc}")
        pytest.skip(f"Redis not reachable at {url}: {exc}")
    finally:
        client.close()
    return url


DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


@pytest.fixture(scope="session")
def nats_url() -> str:
    """The test NATS URL (``ADFUNNEL_TEST_NATS_URL``, default ``nats://127.0.0.1:4222``);
    skips the test when no NATS server greets (``INFO``) within a second."""
    url = os.environ.get("ADFUNNEL_TEST_NATS_URL", DEFAULT_NATS_URL)
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222),
                                      timeout=1) as conn:
            greeting = conn.recv(4)
        if greeting != b"INFO":
            raise OSError(f"not a NATS server (it said {greeting!r})")
    except OSError as exc:
        if os.environ.get("ADFUNNEL_REQUIRE_SERVICES"):
            pytest.fail(f"NATS not reachable at {url}: {exc}")
        pytest.skip(f"NATS not reachable at {url}: {exc}")
    return url
