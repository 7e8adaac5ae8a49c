"""The bootstrap admin key that test servers start with, and its request headers."""

from __future__ import annotations

#: ``ADFUNNEL_ADMIN_KEY`` of the test apps and servers (>= 32 characters).
ADMIN_KEY = "test-admin-key-0123456789abcdefghijklmnop"
#: What a test client of protected routes sends.
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}


def install_test_auth(app: object, clock: object | None = None) -> object:
    """Put the auth middleware on a bare test ``app`` (keys in memory, ``ADMIN_KEY`` the
    bootstrap admin key); returns its :class:`~adfunnel.auth.ApiKeys`."""
    from adfunnel.auth import ApiKeys, MemoryKeyStore, install_auth
    from adfunnel.clock import SystemClock

    keys = ApiKeys(MemoryKeyStore(), clock or SystemClock(), ADMIN_KEY)  # type: ignore[arg-type]
    install_auth(app, keys)  # type: ignore[arg-type]
    return keys
