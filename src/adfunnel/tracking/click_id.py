"""Click ids: what the click redirect alone reveals, and the only thing that attributes
a conversion.

A click id has the serve token's wire form (:mod:`adfunnel.tracking.token_wire`); its
payload is ``["click", clicked_at_ms, <the serve token's nine claims>]``, and its MAC is
keyed with ``HMAC(secret, "adfunnel/click-id/v1")``, a key derived for this purpose
only: no serve token verifies as a click id, and nobody without the secret can derive a
click id from a serve token. A click the tracker found invalid traffic gets a click id
keyed for that purpose (``…/click-id/ivt/v1``): it looks the same to the clicker, and it
never attributes a conversion.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from adfunnel.tracking.token_claims import _INT64_MAX, InvalidToken, TokenClaims
from adfunnel.tracking.token_wire import (
    _KEYED_MAX,
    _b64encode,
    _check_key,
    _claim_fields,
    _decode_fields,
    _mac,
    _open,
)


@dataclass(frozen=True, slots=True)
class ClickClaims:
    """What a click id vouches for: the serve's claims and when the click happened
    (``clicked_at_ms``, unix milliseconds, the tracker's clock)."""

    serve: TokenClaims
    clicked_at_ms: int


def sign_click_id(claims: TokenClaims, clicked_at_ms: int, key: bytes, *,
                  invalid: bool = False) -> str:
    """The click id of a click on the ad ``claims`` describes, at ``clicked_at_ms``
    (unix ms), keyed for click ids (``invalid``: for the ids of invalid-traffic clicks).

    Raises:
        ValueError: when ``key`` is empty or ``clicked_at_ms`` is not an int ≥ 0.
    """
    _check_key(key)
    if type(clicked_at_ms) is not int or not 0 <= clicked_at_ms <= _INT64_MAX:
        raise ValueError(f"clicked_at_ms: an int in [0, 2**63 - 1], got {clicked_at_ms!r}")
    payload = msgspec.json.encode([_CLICK, clicked_at_ms, *_claim_fields(claims)])
    body = _b64encode(payload)
    purpose = _IVT_CLICK_PURPOSE if invalid else _CLICK_PURPOSE
    return f"{body}.{_b64encode(_mac(_derived(key, purpose), body))}"


def verify_click_id(click_id: str, keys: Sequence[bytes], now_s: float,
                    max_age_s: float) -> ClickClaims:
    """The claims of ``click_id`` if one of ``keys`` (current first, then previous ones)
    signed it as a valid click's id no more than ``max_age_s`` before ``now_s`` (unix s).

    Raises:
        InvalidToken: ``malformed``; ``serve_token`` (a serve token, not a click id);
            ``invalid_traffic`` (the id of a click found invalid traffic);
            ``bad_signature``; ``expired`` (clicked ``max_age_s`` or more ago).
        ValueError: when ``keys`` is empty or holds an empty key.
    """
    if not keys:
        raise ValueError("click ids need at least one key")
    for key in keys:
        _check_key(key)
    body, payload, mac = _open(click_id)
    if not _signed_by(mac, body, [_derived(k, _CLICK_PURPOSE) for k in keys]):
        if _signed_by(mac, body, [_derived(k, _IVT_CLICK_PURPOSE) for k in keys]):
            raise InvalidToken("invalid_traffic")
        if _signed_by(mac, body, keys):
            raise InvalidToken("serve_token")
        raise InvalidToken("bad_signature")
    fields = _decode_fields(payload)
    if len(fields) != 11 or fields[0] != _CLICK or type(fields[1]) is not int or fields[1] < 0:
        raise InvalidToken("malformed")
    claims = _claims(fields[2:])
    if now_s * 1000 >= fields[1] + max_age_s * 1000:
        raise InvalidToken("expired")
    return ClickClaims(claims, fields[1])


def _signed_by(mac: bytes, body: str, keys: Sequence[bytes]) -> bool:
    """True when ``mac`` is ``body``'s MAC under one of ``keys`` (each compared in
    constant time)."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(mac, _mac(key, body))
    return found


def _derived(key: bytes, purpose: bytes) -> bytes:
    """HMAC-SHA256(``key``, ``purpose``): a key for one purpose only (domain separation)."""
    key = key if type(key) is bytes else bytes(key)  # a bytearray cannot be a dict key
    found = _DERIVED.get((key, purpose))
    if found is None:
        if len(_DERIVED) >= _KEYED_MAX:
            _DERIVED.clear()
        found = _DERIVED[(key, purpose)] = hmac.new(key, purpose, hashlib.sha256).digest()
    return found


#: First field of a click id's payload (a serve token's is its integer version).
_CLICK = "click"
_CLICK_PURPOSE = b"adfunnel/click-id/v1"
_IVT_CLICK_PURPOSE = b"adfunnel/click-id/ivt/v1"
_DERIVED: dict[tuple[bytes, bytes], bytes] = {}


def _claims(fields: Sequence[object]) -> TokenClaims:
    """Claims from their nine wire fields (a click id's), else ``malformed``."""
    try:
        return TokenClaims(*fields)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise InvalidToken("malformed") from None
