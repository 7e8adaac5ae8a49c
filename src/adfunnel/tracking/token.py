"""The HMAC-SHA256 signed tracking token carried by every served ad (DESIGN.md §The funnel, 7).

Wire format (URL-safe, no padding, at most :data:`MAX_TOKEN_CHARS` characters)::

    base64url(payload) "." base64url(HMAC-SHA256(key, base64url(payload)))

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
The MAC covers the base64url text of the payload exactly as sent, and both parts
must be the canonical base64url encoding of their bytes, so no two different
strings verify as the same token.

``verify`` checks, in order: shape and size (``malformed``), the MAC in constant
time (``bad_signature``), the payload's fields (``malformed``), then expiry
(``expired``). Nothing but :class:`InvalidToken` ever escapes it. ``verify`` takes
the current key and, for rotation, earlier ones (``previous``): a token signed with
any of them verifies; new tokens are signed with the current one.

The **click id** (:func:`sign_click_id`, :func:`verify_click_id`) is what the click
redirect alone reveals, and the only thing that attributes a conversion. It has the
same wire form; its payload is ``["click", clicked_at_ms, <the serve token's nine
claims>]``, and its MAC is keyed with ``HMAC(secret, "adfunnel/click-id/v1")``, a key
derived for this purpose only: no serve token verifies as a click id, and nobody
without the secret can derive a click id from a serve token. A click the tracker found
invalid traffic gets a click id keyed for that purpose (``…/click-id/ivt/v1``): it
looks the same to the clicker, and it never attributes a conversion.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Sequence
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
#: What bills a CPM impression: the ``/vi`` beacon (viewable), the ``/i`` beacon
#: (rendered), for an OpenRTB bid its billing notice (``notice``: ``/rtb/bill``; neither
#: beacon bills then) or its markup's ``/i`` at the clearing price ``p`` it carries
#: (``exchange_beacon``), :mod:`adfunnel.tracking.notices`; for an OpenRTB bid of a
#: test request (``test = 1``) nothing (``test``: :data:`TEST_BID`).
BILLABLE_EVENTS = frozenset({"viewable", "rendered", "notice", "exchange_beacon", "test"})
#: The billable event of an OpenRTB test bid: no beacon or notice of it bills, and none
#: is stored (answered as a house ad's: counted only).
TEST_BID = "test"
#: The billable event of an OpenRTB bid billed on its markup's ``/i``: only such a token
#: bills the clearing price ``p`` the beacon carries (any other bills its own price).
EXCHANGE_BEACON = "exchange_beacon"
#: What a token from before version 4 bills on (every impression billed on render then).
LEGACY_BILLABLE_EVENT = "rendered"

_VERSION = 4
#: Version 3: as 4 without the billable event (reads as ``rendered``).
_VERSION_NO_BILLABLE_EVENT = 3
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

Reason = Literal["malformed", "bad_signature", "expired", "serve_token", "invalid_traffic"]


class InvalidToken(Exception):
    """A token that must not be trusted; ``reason`` is ``malformed``, ``bad_signature``
    or ``expired`` (tier-1 invalid traffic counts these), and for a click id also
    ``serve_token`` (a serve token where a click id belongs) or ``invalid_traffic``
    (the id of a click the tracker flagged). ``claims``: for ``expired`` only, the
    authentic claims of the expired token (a late click still finds its landing page)."""

    def __init__(self, reason: Reason, claims: TokenClaims | None = None) -> None:
        super().__init__(reason)
        self.reason: Reason = reason
        self.claims = claims


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What the ad server vouches for when it serves one ad.

    ``price_micros`` is the auction price in the bid's unit, integer micros: per
    thousand impressions for CPM (one impression bills it ÷ 1000 with the fraction
    carried by the ledger), per click for CPC, per conversion for CPA.
    ``issued_at`` and ``expires_at`` are unix seconds; the token is valid while
    ``now < expires_at``. ``expected_micros`` is the serve's expected cost in micros as
    the budget counted it (DESIGN.md §The funnel, step 7); None in older tokens.
    ``billable_event``: ``viewable`` or ``rendered``, the beacon that bills the
    impression (the campaign's setting when it was served; ``rendered`` in tokens from
    before version 4); for an OpenRTB bid ``notice`` (its billing notice bills it) or
    ``exchange_beacon`` (its markup's ``/i`` bills the clearing price it carries).

    Raises:
        ValueError: on construction, for a field outside its domain: impression id
            not 1-64 of ``[A-Za-z0-9_-]``, ids or price negative or above int64,
            unknown billing type, placement empty or over 200 characters, negative
            times or ``expires_at < issued_at``, a billable event other than
            ``viewable``, ``rendered``, ``notice`` or ``exchange_beacon``.
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
    billable_event: str = LEGACY_BILLABLE_EVENT

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
        if not isinstance(self.billable_event, str) or self.billable_event not in BILLABLE_EVENTS:
            raise ValueError("billable_event: viewable, rendered, notice, exchange_beacon or "
                             f"test, got {self.billable_event!r:.40}")


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


def _claims(fields: Sequence[object]) -> TokenClaims:
    """Claims from their nine wire fields (a click id's), else ``malformed``."""
    try:
        return TokenClaims(*fields)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise InvalidToken("malformed") from None


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
