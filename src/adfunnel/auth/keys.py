"""API keys and the principal a key stands for: pure values, no I/O.

A key is 32 random bytes as URL-safe base64 text (43 characters). It is shown once,
when issued (a dashboard session id, :class:`UiSession`, is made and kept the same
way); the server keeps only its SHA-256 hex digest (a key this random needs no slow
hash: nobody can guess one to compare against the digest) and a short public
:func:`prefix` that lists and revokes it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

#: Random bytes in a key.
KEY_BYTES = 32
#: Characters of a key kept in clear as its public name (72 random bits: unique).
PREFIX_LENGTH = 12


class Role(StrEnum):
    """What a key may do: ``admin`` everything; ``advertiser`` only its own advertiser's
    records; ``reviewer`` reads ads and approves or rejects them."""

    ADMIN = "admin"
    ADVERTISER = "advertiser"
    REVIEWER = "reviewer"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: the key's ``role``, its ``advertiser_id`` (advertiser
    keys only, else None) and its public ``key_prefix``."""

    role: Role
    advertiser_id: int | None
    key_prefix: str

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def sees(self, advertiser_id: int) -> bool:
        """True when the caller may read ``advertiser_id``'s records: an admin or a
        reviewer, or an advertiser key bound to it."""
        return self.role is not Role.ADVERTISER or self.advertiser_id == advertiser_id

    def owns(self, advertiser_id: int) -> bool:
        """True for an admin, or an advertiser key bound to ``advertiser_id``."""
        return self.is_admin or (self.role is Role.ADVERTISER
                                 and self.advertiser_id == advertiser_id)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key: never the key itself, only its digest and public prefix."""

    prefix: str
    digest: str
    role: Role
    advertiser_id: int | None
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def principal(self) -> Principal:
        return Principal(self.role, self.advertiser_id, self.prefix)


@dataclass(frozen=True, slots=True)
class UiSession:
    """A dashboard session: the digest of its id (the id itself lives only in the
    browser's cookie), the public prefix of the API key it acts for, and its life."""

    digest: str
    key_prefix: str
    created_at: datetime
    expires_at: datetime


def generate_key() -> str:
    """A new key: :data:`KEY_BYTES` random bytes, URL-safe base64 without padding."""
    return secrets.token_urlsafe(KEY_BYTES)


def digest(key: str) -> str:
    """The stored form of ``key``: its SHA-256, 64 hex characters."""
    return hashlib.sha256(key.encode()).hexdigest()


def prefix(key: str) -> str:
    """The public name of ``key``: its first :data:`PREFIX_LENGTH` characters."""
    return key[:PREFIX_LENGTH]
