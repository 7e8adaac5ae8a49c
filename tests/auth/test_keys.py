"""Keys, digests, prefixes and what a principal may see (pure values)."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime

import pytest

from adfunnel.auth import ApiKeys, KeyProblem, MemoryKeyStore, Principal, Role
from adfunnel.auth.keys import digest, generate_key, prefix
from adfunnel.clock import FixedClock

NOW = datetime(2026, 11, 3, 15, 0, tzinfo=UTC)


def test_a_key_is_32_random_url_safe_bytes() -> None:
    keys = {generate_key() for _ in range(200)}
    assert len(keys) == 200 and len({prefix(k) for k in keys}) == 200
    for key in keys:
        assert len(base64.urlsafe_b64decode(key + "=")) == 32
        assert key.isascii() and "=" not in key and "/" not in key and "+" not in key
    key = next(iter(keys))
    assert digest(key) == hashlib.sha256(key.encode()).hexdigest()
    assert prefix(key) == key[:12]


def test_what_each_role_sees_and_owns() -> None:
    admin = Principal(Role.ADMIN, None, "a")
    advertiser = Principal(Role.ADVERTISER, 7, "b")
    reviewer = Principal(Role.REVIEWER, None, "c")
    assert admin.sees(7) and admin.owns(7) and admin.owns(8)
    assert advertiser.sees(7) and advertiser.owns(7)
    assert not advertiser.sees(8) and not advertiser.owns(8)
    assert reviewer.sees(7) and not reviewer.owns(7)


def test_the_bootstrap_key_is_an_admin_that_is_never_stored() -> None:
    store = MemoryKeyStore()
    keys = ApiKeys(store, FixedClock(NOW), "b" * 40)
    who = keys.resolve("b" * 40)
    assert who == Principal(Role.ADMIN, None, "b" * 12)
    assert store.list() == [] and keys.bootstrap_prefix == "b" * 12
    assert keys.resolve("b" * 39) is None and keys.resolve(None) is None
    assert keys.resolve("") is None
    assert ApiKeys(store, FixedClock(NOW)).resolve("b" * 40) is None


def test_issue_resolve_revoke() -> None:
    keys = ApiKeys(MemoryKeyStore(), FixedClock(NOW))
    issued = keys.issue("advertiser", 3)
    assert issued.record.created_at == NOW
    assert keys.resolve(issued.key) == Principal(Role.ADVERTISER, 3, issued.key[:12])
    assert keys.revoke(issued.record.prefix)
    assert keys.resolve(issued.key) is None
    assert not keys.revoke(issued.record.prefix)
    with pytest.raises(KeyProblem) as problem:
        keys.issue(Role.ADVERTISER)
    assert problem.value.field == "advertiser_id"
    with pytest.raises(KeyProblem):
        keys.issue(Role.ADMIN, 3)
    with pytest.raises(KeyProblem) as problem:
        keys.issue("root")
    assert problem.value.field == "role"
