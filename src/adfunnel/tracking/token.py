"""The HMAC-SHA256 signed tracking token carried by every served ad (DESIGN.md §The funnel, 7).

Wire format (URL-safe, no padding, at most :data:`MAX_TOKEN_CHARS` characters)::

    base64url(payload) "." base64url(HMAC-SHA256(key, base64url(payload)))

``payload`` is a compact JSON array (msgspec): ``[version, impression_id, ad_id,
campaign_id, price_micros, billing_type, placement, issued_at, expires_at,
expected_micros]``. Version 3 adds ``expected_micros``, the serve's expected cost that
the budget counted in flight (its billable event settles exactly that); version 2
(eight claims, price in the bid's unit: CPM micros per thousand impressions, so the
ledger can bill it exactly) and version 1 (price per impression, whole micros, read as
that price × 1000 per mille) still verify during a deployment, with no expected cost.
The MAC covers the base64url text of the payload exactly as sent, and both parts
must be the canonical base64url encoding of their bytes, so no two different
strings verify as the same token.

``verify`` checks, in order: shape and size (``malformed``), the MAC in constant
time (``bad_signature``), the payload's fields (``malformed``), then expiry
(``expired``). Nothing but :class:`InvalidToken` ever escapes it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from dataclasses import dataclass, replace
from typing import Literal

import msgspec

#: Longest token accepted; anything longer is ``malformed`` before any decoding.
MAX_TOKEN_CHARS = 1_024
#: Billing types a token may carry.
BILLING_TYPES = frozenset({"CPM", "CPC", "CPA"})
#: Longest impression id (the ledger column is 64 characters).
MAX_IMPRESSION_ID_CHARS = 64
#: Longest placement name (the ledger column is 200 characters).
MAX_PLACEMENT_CHARS = 200

_VERSION = 3
#: Version 2: as 3 without the expected cost.
_VERSION_NO_EXPECTED = 2
#: Version 1 priced a CPM impression in whole micros (price per impression).
_VERSION_PER_IMPRESSION = 1
_MAC_BYTES = hashlib.sha256().digest_size
_INT64_MAX = 2**63 - 1
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
#: Each base64url character's 6-bit value.
_B64_VALUE = {c: i for i, c in enumerate(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}
_IMPRESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

Reason = Literal["malformed", "bad_signature", "expired"]


class InvalidToken(Exception):
    """A token that must not be trusted; ``reason`` is ``malformed``, ``bad_signature``
    or ``expired`` (tier-1 invalid traffic counts these)."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason: Reason = reason


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What the ad server vouches for when it serves one ad.

    ``price_micros`` is the auction price in the bid's unit, integer micros: per
    thousand impressions for CPM (one impression bills it ÷ 1000 with the fraction
    carried by the ledger), per click for CPC, per conversion for CPA.
    ``issued_at`` and ``expires_at`` are unix seconds; the token is valid while
    ``now < expires_at``. ``expected_micros`` is the serve's expected cost in micros as
    the budget counted it (DESIGN.md §The funnel, step 7); None in older tokens.

    Raises:
        ValueError: on construction, for a field outside its domain: impression id
            not 1-64 of ``[A-Za-z0-9_-]``, ids or price negative or above int64,
            unknown billing type, placement empty or over 200 characters, negative
            times or ``expires_at < issued_at``.
    """

    impression_id: str
    ad_id: int
    campaign_id: int
    price_micros: int
    billing_type: str
    placement: str
    issued_at: int
    expires_at: int
    expected_micros: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.impression_id, str) or not _IMPRESSION_ID.fullmatch(
            self.impression_id
        ):
            raise ValueError(f"impression_id: 1-64 of [A-Za-z0-9_-], got {self.impression_id!r}")
        ints = (self.ad_id, self.campaign_id, self.price_micros, self.issued_at,
                self.expires_at)
        if not all(type(v) is int and 0 <= v <= _INT64_MAX for v in ints):  # not bool
            for name in ("ad_id", "campaign_id", "price_micros", "issued_at", "expires_at"):
                value = getattr(self, name)
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{name}: must be an int, got {value!r}")
                if not 0 <= value <= _INT64_MAX:
                    raise ValueError(f"{name}: must be in [0, 2**63 - 1], got {value}")
        if self.billing_type not in BILLING_TYPES:
            raise ValueError(f"billing_type: CPM, CPC or CPA, got {self.billing_type!r}")
        if (
            not isinstance(self.placement, str)
            or not self.placement
            or len(self.placement) > MAX_PLACEMENT_CHARS
        ):
            raise ValueError(
                f"placement: 1-{MAX_PLACEMENT_CHARS} characters, got {self.placement!r:.80}"
            )
        if self.expires_at < self.issued_at:
            raise ValueError(f"expires_at {self.expires_at} is before issued_at {self.issued_at}")
        e = self.expected_micros
        if e is not None and (isinstance(e, bool) or not isinstance(e, int)
                              or not 0 <= e <= _INT64_MAX):
            raise ValueError(f"expected_micros: an int in [0, 2**63 - 1] or None, got {e!r}")


def new_impression_id() -> str:
    """A fresh random impression id: 32 lowercase hex characters (128 random bits)."""
    return os.urandom(16).hex()


def sign(claims: TokenClaims, key: bytes) -> str:
    """The signed, URL-safe token for ``claims`` under ``key``.

    Raises:
        ValueError: when ``key`` is empty, or the token would exceed
            :data:`MAX_TOKEN_CHARS` (a very long placement name).
    """
    _check_key(key)
    payload = msgspec.json.encode(
        [
            _VERSION,
            claims.impression_id,
            claims.ad_id,
            claims.campaign_id,
            claims.price_micros,
            claims.billing_type,
            claims.placement,
            claims.issued_at,
            claims.expires_at,
            claims.expected_micros,
        ]
    )
    body = _b64encode(payload)
    token = f"{body}.{_b64encode(_mac(key, body))}"
    if len(token) > MAX_TOKEN_CHARS:
        raise ValueError(f"token would be {len(token)} characters, limit {MAX_TOKEN_CHARS}")
    return token


def verify(token: str, key: bytes, now_s: float) -> TokenClaims:
    """The claims of ``token`` if it was signed with ``key`` and is unexpired at ``now_s``.

    ``now_s`` is unix seconds. The MAC is compared in constant time.

    Raises:
        InvalidToken: ``malformed`` (not a string, over 1,024 characters, not two
            canonical base64url parts, a MAC of the wrong size, or a signed payload
            that is not a valid claims array), ``bad_signature`` (the MAC does not
            match), ``expired`` (``now_s >= expires_at``).
        ValueError: when ``key`` is empty (a configuration error, not a bad token).
    """
    _check_key(key)
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken("malformed")
    body, sep, mac_text = token.partition(".")
    if not sep:
        raise InvalidToken("malformed")
    payload = _b64decode(body)
    mac = _b64decode(mac_text)
    if len(mac) != _MAC_BYTES:
        raise InvalidToken("malformed")
    if not hmac.compare_digest(mac, _mac(key, body)):
        raise InvalidToken("bad_signature")
    claims = _decode_claims(payload)
    if now_s >= claims.expires_at:
        raise InvalidToken("expired")
    return claims


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


def _decode_claims(payload: bytes) -> TokenClaims:
    try:
        fields = msgspec.json.decode(payload)
    except (msgspec.MsgspecError, ValueError, UnicodeDecodeError):
        raise InvalidToken("malformed") from None
    if not isinstance(fields, list) or not fields:
        raise InvalidToken("malformed")
    version = fields[0]
    want = {_VERSION: 10, _VERSION_NO_EXPECTED: 9, _VERSION_PER_IMPRESSION: 9}
    if type(version) is not int or want.get(version) != len(fields):
        raise InvalidToken("malformed")
    try:
        claims = TokenClaims(*fields[1:])
        if version == _VERSION_PER_IMPRESSION and claims.billing_type == "CPM":
            claims = replace(claims, price_micros=claims.price_micros * 1000)
        return claims
    except (ValueError, TypeError):
        raise InvalidToken("malformed") from None
