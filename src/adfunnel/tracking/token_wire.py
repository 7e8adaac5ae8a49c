"""The wire form shared by serve tokens and click ids: two canonical base64url parts.

Wire format (URL-safe, no padding, at most :data:`MAX_TOKEN_CHARS` characters)::

    base64url(payload) "." base64url(HMAC-SHA256(key, base64url(payload)))

The MAC covers the base64url text of the payload exactly as sent, and both parts must
be the canonical base64url encoding of their bytes, so no two different strings verify
as the same token. Anything that does not open is ``malformed``
(:class:`~adfunnel.tracking.token_claims.InvalidToken`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

import msgspec

from adfunnel.tracking.token_claims import InvalidToken, TokenClaims

#: Longest token accepted; anything longer is ``malformed`` before any decoding.
MAX_TOKEN_CHARS = 1_024
_MAC_BYTES = hashlib.sha256().digest_size
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
#: Each base64url character's 6-bit value.
_B64_VALUE = {c: i for i, c in enumerate(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def _open(token: object) -> tuple[str, bytes, bytes]:
    """(base64url body, payload bytes, MAC bytes) of a token's wire form, unverified.

    Raises:
        InvalidToken: ``malformed`` (not a string, too long, not two canonical
            base64url parts, a MAC of the wrong size).
    """
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken("malformed")
    body, sep, mac_text = token.partition(".")
    if not sep:
        raise InvalidToken("malformed")
    payload = _b64decode(body)
    mac = _b64decode(mac_text)
    if len(mac) != _MAC_BYTES:
        raise InvalidToken("malformed")
    return body, payload, mac


def _claim_fields(claims: TokenClaims) -> list[object]:
    """The nine claims a click id carries, in wire order (a serve token adds its
    billable event after them: a conversion does not depend on it)."""
    return [claims.impression_id, claims.ad_id, claims.campaign_id, claims.price_micros,
            claims.billing_type, claims.placement, claims.issued_at, claims.expires_at,
            claims.expected_micros]


def _check_key(key: bytes) -> None:
    if not isinstance(key, bytes | bytearray) or not key:
        raise ValueError("token key must be non-empty bytes")


def _mac(key: bytes, body: str) -> bytes:
    key = key if type(key) is bytes else bytes(key)  # a bytearray cannot be a dict key
    keyed = _KEYED.get(key)
    if keyed is None:
        if len(_KEYED) >= _KEYED_MAX:
            _KEYED.clear()
        keyed = _KEYED[key] = hmac.new(key, digestmod=hashlib.sha256)
    mac = keyed.copy()  # the key schedule once per key, not once per token: ~2x faster
    mac.update(body.encode("ascii"))
    return mac.digest()


#: HMAC-SHA256 states with only the key absorbed, by key (a process has one or two).
_KEYED: dict[bytes, hmac.HMAC] = {}
_KEYED_MAX = 16


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Bytes of canonical unpadded base64url ``text``; anything else is ``malformed``."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise InvalidToken("malformed")
    # Unused low bits of the last character are ignored by the decoder; reject
    # such non-canonical spellings so a token has exactly one valid form.
    unused = (6 * len(text)) % 8
    if unused and _B64_VALUE[text[-1]] & ((1 << unused) - 1):
        raise InvalidToken("malformed")
    try:  # the alphabet is checked above: translate and decode, no more checks
        return binascii.a2b_base64(text.encode("ascii").translate(_TO_STANDARD)
                                   + b"=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed") from None


_TO_STANDARD = bytes.maketrans(b"-_", b"+/")


def _decode_fields(payload: bytes) -> list[object]:
    """The signed payload's JSON array (non-empty), else ``malformed``."""
    try:
        fields = msgspec.json.decode(payload)
    except (msgspec.MsgspecError, ValueError, UnicodeDecodeError):
        raise InvalidToken("malformed") from None
    if not isinstance(fields, list) or not fields:
        raise InvalidToken("malformed")
    return fields
