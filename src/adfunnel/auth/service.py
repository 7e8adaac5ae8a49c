"""Issuing, resolving, listing and revoking API keys over a :class:`KeyStore`.

The bootstrap admin key (``ADFUNNEL_ADMIN_KEY``, or one generated at start) is held
only as its digest in this object, never stored: it works while the process runs
with it, and cannot be revoked through the API (change the setting instead).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import timedelta

from adfunnel.auth.keys import (
    ApiKey,
    Principal,
    Role,
    UiSession,
    digest,
    generate_key,
    prefix,
)
from adfunnel.auth.store import DuplicateKey, KeyStore
from adfunnel.clock import Clock


class KeyProblem(ValueError):
    """A key request that cannot be met: ``field`` names what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A new key: ``key`` is its only appearance in clear; ``record`` is what is kept."""

    key: str
    record: ApiKey


class ApiKeys:
    """The API keys of one deployment: a :class:`KeyStore` and the bootstrap admin key.

    ``bootstrap_key`` (None: no bootstrap key) resolves to an admin
    :class:`Principal` with its own prefix; ``clock`` stamps creations and revocations.
    """

    def __init__(self, store: KeyStore, clock: Clock, bootstrap_key: str | None = None) -> None:
        self.store = store
        self.clock = clock
        self._bootstrap = None if bootstrap_key is None else digest(bootstrap_key)
        self._bootstrap_prefix = None if bootstrap_key is None else prefix(bootstrap_key)

    @property
    def bootstrap_prefix(self) -> str | None:
        """The public prefix of the bootstrap admin key (None without one)."""
        return self._bootstrap_prefix

    def issue(self, role: Role | str, advertiser_id: int | None = None) -> IssuedKey:
        """A new key of ``role``; ``advertiser_id`` is required for (and only for)
        advertiser keys. Checking that the advertiser exists is the caller's job.

        Raises:
            KeyProblem: on ``role`` or ``advertiser_id``.
        """
        try:
            role = Role(role)
        except ValueError:
            raise KeyProblem("role", "must be one of admin, advertiser, reviewer") from None
        if role is Role.ADVERTISER and advertiser_id is None:
            raise KeyProblem("advertiser_id", "is required for an advertiser key")
        if role is not Role.ADVERTISER and advertiser_id is not None:
            raise KeyProblem("advertiser_id", f"only advertiser keys have one, not {role}")
        for _ in range(3):  # a prefix collision is a 2^-72 event; retry, do not fail
            key = generate_key()
            record = ApiKey(prefix(key), digest(key), role, advertiser_id, self.clock.now())
            try:
                self.store.add(record)
            except DuplicateKey:
                continue
            return IssuedKey(key, record)
        raise RuntimeError("could not draw an unused API key")  # pragma: no cover

    def resolve(self, key: str | None) -> Principal | None:
        """The principal ``key`` stands for; None for a missing, unknown or revoked key."""
        if not key:
            return None
        found = digest(key)
        if self._bootstrap is not None and hmac.compare_digest(found, self._bootstrap):
            return Principal(Role.ADMIN, None, self._bootstrap_prefix or "")
        # looked up by digest (an index lookup on a value an attacker cannot steer
        # towards a stored one), so no timing channel leaks a stored key
        record = self.store.by_digest(found)
        if record is None or record.revoked_at is not None:
            return None
        return record.principal

    def list(self) -> list[ApiKey]:
        """The live keys, by prefix (the bootstrap key is not among them)."""
        return self.store.list()

    def revoke(self, key_prefix: str) -> bool:
        """Revoke the key named ``key_prefix`` and end its dashboard sessions; False
        when no live key has it."""
        done = self.store.revoke(key_prefix, self.clock.now())
        if done:
            self.store.end_sessions(key_prefix)
        return done

    # -- dashboard sessions ---------------------------------------------------------------
    def open_session(self, key: str | None, ttl_s: float) -> str | None:
        """A new dashboard session acting for ``key``, for ``ttl_s`` seconds of the
        clock: its random id (shown only to the browser; the store keeps its digest),
        or None when ``key`` resolves to no one. Expired sessions are dropped here."""
        principal = self.resolve(key)
        if principal is None:
            return None
        now = self.clock.now()
        self.store.drop_expired_sessions(now)
        session_id = generate_key()
        self.store.add_session(UiSession(digest(session_id), principal.key_prefix, now,
                                         now + timedelta(seconds=ttl_s)))
        return session_id

    def resolve_session(self, session_id: str | None) -> Principal | None:
        """The principal a live session acts for; None for a missing, unknown or
        expired session, or one whose key is revoked (checked on every call)."""
        if not session_id:
            return None
        held = self.store.session(digest(session_id))
        if held is None or held.expires_at <= self.clock.now():
            return None
        if held.key_prefix == self._bootstrap_prefix:
            return Principal(Role.ADMIN, None, held.key_prefix)
        record = self.store.by_prefix(held.key_prefix)
        if record is None or record.revoked_at is not None:
            return None
        return record.principal

    def end_session(self, session_id: str | None) -> None:
        """Log a session out (nothing for an unknown one)."""
        if session_id:
            self.store.end_session(digest(session_id))
