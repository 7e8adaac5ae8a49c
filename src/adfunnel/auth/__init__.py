"""Authentication and roles of the HTTP API: API keys, principals, and their checks.

Keys are 32 random bytes (URL-safe text), shown once when issued and stored only as a
SHA-256 digest with a short public prefix (:mod:`adfunnel.auth.keys`). Roles:

- ``admin``: everything;
- ``advertiser``: bound to one advertiser (``advertiser_id``); sees and changes only
  that advertiser, its campaigns, ads and reports — another advertiser's ids answer
  404; its new ads start ``pending_review``;
- ``reviewer``: reads advertisers, campaigns and ads, lists the review queue and
  approves or rejects ads; changes nothing else.

Public interface (what another part of the server, such as ``/ui``, calls):

- :class:`ApiKeys` — ``keys.resolve(key: str | None) -> Principal | None`` (None for a
  missing, unknown or revoked key), ``keys.issue(role, advertiser_id=None) ->
  IssuedKey`` (``.key`` the clear key, ``.record`` what is stored), ``keys.list()``,
  ``keys.revoke(prefix) -> bool``. The app's instance is ``app.state.api_keys`` (and
  ``Runtime.keys``).
- :class:`Principal` — ``role`` (:class:`Role`), ``advertiser_id`` (advertisers only),
  ``key_prefix``; ``principal.owns(advertiser_id)`` (may change it: admin, or that
  advertiser) and ``principal.sees(advertiser_id)`` (may read it: also reviewers).
- :class:`KeyStore` with :class:`MemoryKeyStore` and :class:`SqlKeyStore` (tables
  ``api_keys``, migration 0012, and ``ui_sessions``, migration 0013; SQLite and
  PostgreSQL).
- HTTP (:mod:`adfunnel.auth.http`): :func:`install_auth` puts the
  :class:`Authenticate` middleware on an app (401 without a valid ``Authorization:
  Bearer <key>`` on every path not open, 403 for a role outside its areas);
  :data:`Caller` (a route parameter type) and :func:`require_role` are the FastAPI
  dependencies. ``/ui`` is an open prefix: its pages resolve their own server-side
  sessions (``keys.open_session(key, ttl_s)``, ``keys.resolve_session(id)``,
  ``keys.end_session(id)``; revoking a key ends its sessions) and call the API in
  process as the session's principal (``IN_PROCESS_PRINCIPAL``).
- :func:`bootstrap_admin_key` — the admin key a server starts with
  (``ADFUNNEL_ADMIN_KEY``, else generated and printed once).
"""

from adfunnel.auth.bootstrap import bootstrap_admin_key
from adfunnel.auth.http import Authenticate, Caller, current_principal, install_auth, require_role
from adfunnel.auth.keys import ApiKey, Principal, Role, digest, generate_key, prefix
from adfunnel.auth.service import ApiKeys, IssuedKey, KeyProblem
from adfunnel.auth.store import KeyStore, MemoryKeyStore, SqlKeyStore

__all__ = [
    "ApiKey", "ApiKeys", "Authenticate", "Caller", "IssuedKey", "KeyProblem", "KeyStore",
    "MemoryKeyStore", "Principal", "Role", "SqlKeyStore", "bootstrap_admin_key",
    "current_principal", "digest", "generate_key", "install_auth", "prefix", "require_role",
]
