"""The HMAC-SHA256 signed tracking token carried by every served ad (DESIGN.md §The funnel, 7).

Wire format: two canonical base64url parts, the payload and its HMAC-SHA256
(:mod:`adfunnel.tracking.token_wire`, shared with click ids).

``payload`` is a compact JSON array (msgspec): ``[version, impression_id, ad_id,
campaign_id, price_micros, billing_type, placement, issued_at, expires_at,
expected_micros, billable_event]``. Version 4 adds ``billable_event``, the campaign's
``viewable`` or ``rendered`` at serve time: which beacon bills the impression (``/vi``
or ``/i``). Version 3 (ten fields, without it) still verifies and reads as
``rendered``: it was issued when every impression billed on render. Version 3 added
``expected_micros``, the serve's expected cost that
the budget counted in flight (its billable event settles exactly that); version 2
(eight claims, price in the bid's unit: CPM micros per thousand impressions, so the
ledger can bill it exactly) and version 1 (price per impression, whole micros, read as
that price × 1000 per mille) still verify during a deployment, with no expected cost.

``verify`` checks, in order: shape and size (``malformed``), the MAC in constant
time (``bad_signature``), the payload's fields (``malformed``), then expiry
(``expired``). Nothing but :class:`InvalidToken` ever escapes it. ``verify`` takes
the current key and, for rotation, earlier ones (``previous``): a token signed with
any of them verifies; new tokens are signed with the current one.

The claims and :class:`InvalidToken` are :mod:`adfunnel.tracking.token_claims` (imported
from here by most callers); click ids, which share the wire form,
:mod:`adfunnel.tracking.click_id`.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import replace

import msgspec

from adfunnel.tracking.token_claims import InvalidToken, TokenClaims
from adfunnel.tracking.token_wire import (
    MAX_TOKEN_CHARS,
    _b64encode,
    _check_key,
    _claim_fields,
    _decode_fields,
    _mac,
    _open,
)

_VERSION = 4
#: Version 3: as 4 without the billable event (reads as ``rendered``).
_VERSION_NO_BILLABLE_EVENT = 3
#: Version 2: as 3 without the expected cost.
_VERSION_NO_EXPECTED = 2
#: Version 1 priced a CPM impression in whole micros (price per impression).
_VERSION_PER_IMPRESSION = 1



def sign(claims: TokenClaims, key: bytes) -> str:
    """The signed, URL-safe token for ``claims`` under ``key``.

    Raises:
        ValueError: when ``key`` is empty, or the token would exceed
            :data:`MAX_TOKEN_CHARS` (a very long placement name).
    """
    _check_key(key)
    payload = msgspec.json.encode([_VERSION, *_claim_fields(claims), claims.billable_event])
    body = _b64encode(payload)
    token = f"{body}.{_b64encode(_mac(key, body))}"
    if len(token) > MAX_TOKEN_CHARS:
        raise ValueError(f"token would be {len(token)} characters, limit {MAX_TOKEN_CHARS}")
    return token


def verify(token: str, key: bytes, now_s: float,
           previous: Sequence[bytes] = ()) -> TokenClaims:
    """The claims of ``token`` if it was signed with ``key`` (or one of the ``previous``
    keys, for rotation) and is unexpired at ``now_s``.

    ``now_s`` is unix seconds. The MAC is compared in constant time.

    Raises:
        InvalidToken: ``malformed`` (not a string, over 1,024 characters, not two
            canonical base64url parts, a MAC of the wrong size, or a signed payload
            that is not a valid claims array), ``bad_signature`` (the MAC does not
            match), ``expired`` (``now_s >= expires_at``; the exception carries the
            claims).
        ValueError: when ``key`` is empty (a configuration error, not a bad token).
    """
    _check_key(key)
    body, payload, mac = _open(token)
    if not hmac.compare_digest(mac, _mac(key, body)) and not any(
            hmac.compare_digest(mac, _mac(k, body)) for k in previous):
        raise InvalidToken("bad_signature")
    claims = _decode_claims(payload)
    if now_s >= claims.expires_at:
        raise InvalidToken("expired", claims)
    return claims


def _decode_claims(payload: bytes) -> TokenClaims:
    fields = _decode_fields(payload)
    version = fields[0]
    want = {_VERSION: 11, _VERSION_NO_BILLABLE_EVENT: 10, _VERSION_NO_EXPECTED: 9,
            _VERSION_PER_IMPRESSION: 9}
    if type(version) is not int or want.get(version) != len(fields):
        raise InvalidToken("malformed")
    try:
        claims = TokenClaims(*fields[1:])
        if version == _VERSION_PER_IMPRESSION and claims.billing_type == "CPM":
            claims = replace(claims, price_micros=claims.price_micros * 1000)
        return claims
    except (ValueError, TypeError):
        raise InvalidToken("malformed") from None
