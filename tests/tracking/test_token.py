"""The signed tracking token: round trip, tampering, expiry, and garbage in."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.tracking.token import InvalidToken, TokenClaims, sign, verify
from adfunnel.tracking.token_claims import new_impression_id
from adfunnel.tracking.token_wire import MAX_TOKEN_CHARS

KEY = b"k" * 32
NOW = 1_700_000_000


def claims(**overrides: object) -> TokenClaims:
    base = dict(
        impression_id=new_impression_id(),
        ad_id=42,
        campaign_id=7,
        price_micros=1_400_000,
        billing_type="CPC",
        placement="feed_top",
        issued_at=NOW,
        expires_at=NOW + 3_600,
    )
    base.update(overrides)
    return TokenClaims(**base)  # type: ignore[arg-type]


def reason(token: str, *, key: bytes = KEY, now: float = NOW + 1) -> str:
    with pytest.raises(InvalidToken) as info:
        verify(token, key, now)
    return info.value.reason


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_round_trip() -> None:
    c = claims(placement="home/feed:slot 1 ✓")
    token = sign(c, KEY)
    assert verify(token, KEY, NOW + 10) == c
    assert len(token) <= MAX_TOKEN_CHARS
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def test_wrong_key_is_bad_signature() -> None:
    assert reason(sign(claims(), KEY), key=b"other key") == "bad_signature"


def test_expired_at_and_after_expiry() -> None:
    token = sign(claims(expires_at=NOW + 60), KEY)
    assert verify(token, KEY, NOW + 59.999).ad_id == 42
    assert reason(token, now=NOW + 60) == "expired"
    assert reason(token, now=NOW + 86_400) == "expired"


def test_every_flipped_byte_is_rejected() -> None:
    token = sign(claims(), KEY)
    raw = token.encode("ascii")
    for i in range(len(raw)):
        for mask in (0x01, 0x02, 0x04, 0x20, 0x80):
            flipped = bytearray(raw)
            flipped[i] ^= mask
            with pytest.raises(InvalidToken):
                verify(flipped.decode("latin-1"), KEY, NOW + 1)


def test_non_canonical_mac_spelling_is_rejected() -> None:
    # The 43rd character of a 32-byte MAC carries 4 unused bits; another spelling of
    # the same bytes must not verify (one token, one valid form).
    token = sign(claims(), KEY)
    body, mac = token.split(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(mac[-1])
    sibling = alphabet[last ^ 0b0001]
    same_bytes = base64.urlsafe_b64decode(mac[:-1] + sibling + "=")
    assert same_bytes == base64.urlsafe_b64decode(mac + "=")
    assert reason(f"{body}.{mac[:-1]}{sibling}") == "malformed"


def test_tampered_price_is_rejected() -> None:
    token = sign(claims(price_micros=1_400_000), KEY)
    body, mac = token.split(".")
    fields = msgspec.json.decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    fields[4] = 1
    forged = f"{b64(msgspec.json.encode(fields))}.{mac}"
    assert reason(forged) == "bad_signature"


def test_signed_but_invalid_payload_is_malformed() -> None:
    def forge(fields: object) -> str:
        body = b64(msgspec.json.encode(fields))
        return f"{body}.{b64(hmac.new(KEY, body.encode(), hashlib.sha256).digest())}"

    good = [2, "abc", 1, 2, 3, "CPM", "p", NOW, NOW + 10]
    assert verify(forge(good), KEY, NOW).billing_type == "CPM"
    bad_cases = [
        {"not": "a list"},
        good[:-1],
        [5, *good[1:], 1, "viewable"],  # unknown version
        [3, *good[1:]],  # version 3 without its expected cost
        [4, *good[1:], 1],  # version 4 without its billable event
        [4, *good[1:], 1, "served"],  # an unknown billable event
        [4, *good[1:], 1, None],
        [4, *good[1:], 1, ["viewable"]],
        [3, *good[1:], 1, "viewable"],  # version 3 with an eleventh field
        [3, *good[1:], -1],  # negative expected cost
        [3, *good[1:], 1.5],
        [2, *good[1:], 5],  # version 2 with a tenth field
        [0, *good[1:]],
        [1, "abc", 1, 2, 2**62, *good[5:]],  # v1 CPM price per mille overflows int64
        [True, *good[1:]],
        [1.0, *good[1:]],
        [1, "", *good[2:]],
        [1, "a b", *good[2:]],
        [1, "abc", "1", *good[3:]],
        [1, "abc", 1, 2, -3, *good[5:]],
        [1, "abc", 1, 2, 3.5, *good[5:]],
        [1, "abc", 1, 2, True, *good[5:]],
        [1, "abc", 1, 2, 2**63, *good[5:]],
        [1, "abc", 1, 2, 3, "cpm", *good[6:]],
        [1, "abc", 1, 2, 3, ["CPM"], *good[6:]],
        [1, "abc", 1, 2, 3, "CPM", "", *good[7:]],
        [1, "abc", 1, 2, 3, "CPM", "p", NOW, NOW - 1],
        [1, "abc", 1, 2, 3, "CPM", "p", NOW, None],
    ]
    for fields in bad_cases:
        assert reason(forge(fields), now=NOW) == "malformed", fields
    body = b64(b"\xff\xfe not json")
    token = f"{body}.{b64(hmac.new(KEY, body.encode(), hashlib.sha256).digest())}"
    assert reason(token) == "malformed"


@pytest.mark.parametrize(
    "token",
    [
        "",
        ".",
        "abc",
        "abc.",
        ".abc",
        "a.b.c",
        "YWJj.YWJj",  # MAC of the wrong size
        "YWJj=.YWJj",
        "YW Jj.YWJj",
        "Y.YWJj",  # impossible base64 length
        "é.é",
        "x" * (MAX_TOKEN_CHARS + 1),
    ],
)
def test_malformed_strings(token: str) -> None:
    assert reason(token) == "malformed"


def test_too_long_is_malformed_even_if_signed() -> None:
    long_token = sign(claims(placement="p" * 200), KEY)
    assert len(long_token) <= MAX_TOKEN_CHARS
    assert reason(long_token + "A" * (MAX_TOKEN_CHARS + 1 - len(long_token))) == "malformed"


def test_a_padded_or_oversized_mac_is_malformed() -> None:
    """Only the canonical unpadded spelling of a 32-byte MAC opens: a valid token with
    '=' padding, or with a 33-byte MAC, is malformed (not a bad signature)."""
    token = sign(claims(), KEY)
    assert reason(token + "=") == "malformed"
    body = token.partition(".")[0]
    assert reason(f"{body}.{b64(bytes(33))}") == "malformed"


def test_non_string_token_is_malformed() -> None:
    assert reason(b"abc.def") == "malformed"  # type: ignore[arg-type]
    assert reason(None) == "malformed"  # type: ignore[arg-type]


def test_bad_claims_and_keys_are_refused_when_signing() -> None:
    with pytest.raises(ValueError):
        claims(billing_type="CPX")
    with pytest.raises(ValueError):
        claims(price_micros=-1)
    with pytest.raises(ValueError):
        claims(price_micros=1.5)
    with pytest.raises(ValueError):
        claims(impression_id="x" * 65)
    with pytest.raises(ValueError):
        claims(expires_at=NOW - 1)
    with pytest.raises(ValueError):
        sign(claims(), b"")
    with pytest.raises(ValueError):
        verify("a.b", b"", NOW)


def test_claims_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        claims().price_micros = 0  # type: ignore[misc]


def test_new_impression_ids_are_unique_and_valid() -> None:
    ids = {new_impression_id() for _ in range(1_000)}
    assert len(ids) == 1_000
    for i in list(ids)[:10]:
        assert claims(impression_id=i).impression_id == i


_token_chars = st.sampled_from(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ é\x00"
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.text(_token_chars), st.text(_token_chars, min_size=40)))
def test_arbitrary_strings_only_raise_invalid_token(text: str) -> None:
    with pytest.raises(InvalidToken) as info:
        verify(text, KEY, NOW)
    assert info.value.reason in ("malformed", "bad_signature", "expired")


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        TokenClaims,
        impression_id=st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
        ad_id=st.integers(0, 2**63 - 1),
        campaign_id=st.integers(0, 2**63 - 1),
        price_micros=st.integers(0, 2**63 - 1),
        billing_type=st.sampled_from(["CPM", "CPC", "CPA"]),
        placement=st.text(min_size=1, max_size=100),
        issued_at=st.just(NOW),
        expires_at=st.integers(NOW, NOW + 10**9),
        billable_event=st.sampled_from(["viewable", "rendered"]),
    ),
    st.integers(0, 10_000),
)
def test_any_claims_round_trip_and_any_edit_fails(c: TokenClaims, where: int) -> None:
    token = sign(c, KEY)
    if c.expires_at > NOW:
        assert verify(token, KEY, NOW) == c
    i = where % len(token)
    replacement = "A" if token[i] != "A" else "B"
    with pytest.raises(InvalidToken):
        verify(token[:i] + replacement + token[i + 1 :], KEY, NOW)


def test_price_travels_in_the_bids_unit() -> None:
    """A CPM price is per mille (1,500 µ stays 1,500, not a rounded 2 µ per impression)."""
    token = sign(claims(price_micros=1_500, billing_type="CPM"), KEY)
    assert verify(token, KEY, NOW).price_micros == 1_500


def test_version_1_tokens_bill_their_per_impression_price() -> None:
    """Tokens signed before the per-mille price (v1) still verify during a deployment:
    a CPM charge of 2 µ per impression reads as 2,000 µ per mille; CPC is unchanged."""

    def forge(fields: list[object]) -> str:
        body = b64(msgspec.json.encode(fields))
        return f"{body}.{b64(hmac.new(KEY, body.encode(), hashlib.sha256).digest())}"

    cpm = verify(forge([1, "abc", 1, 2, 2, "CPM", "p", NOW, NOW + 10]), KEY, NOW)
    assert cpm.price_micros == 2_000
    cpc = verify(forge([1, "abc", 1, 2, 7, "CPC", "p", NOW, NOW + 10]), KEY, NOW)
    assert cpc.price_micros == 7


def test_version_3_carries_the_expected_cost_and_version_2_has_none() -> None:
    token = sign(claims(price_micros=2_000_000, billing_type="CPC", expected_micros=1_234), KEY)
    assert verify(token, KEY, NOW).expected_micros == 1_234

    def forge(fields: list[object]) -> str:
        body = b64(msgspec.json.encode(fields))
        return f"{body}.{b64(hmac.new(KEY, body.encode(), hashlib.sha256).digest())}"

    v2 = verify(forge([2, "abc", 1, 2, 7, "CPC", "p", NOW, NOW + 10]), KEY, NOW)
    assert v2.expected_micros is None and v2.price_micros == 7


def test_version_4_carries_the_billable_event_and_version_3_reads_as_rendered() -> None:
    """A v4 token says which beacon bills its impression; a v3 token (issued when every
    impression billed on render) reads as ``rendered``."""
    for event in ("viewable", "rendered"):
        token = sign(claims(billing_type="CPM", billable_event=event), KEY)
        assert verify(token, KEY, NOW).billable_event == event

    def forge(fields: list[object]) -> str:
        body = b64(msgspec.json.encode(fields))
        return f"{body}.{b64(hmac.new(KEY, body.encode(), hashlib.sha256).digest())}"

    v3 = verify(forge([3, "abc", 1, 2, 7, "CPM", "p", NOW, NOW + 10, 7]), KEY, NOW)
    assert v3.billable_event == "rendered" and v3.expected_micros == 7
    with pytest.raises(ValueError, match="billable_event"):
        claims(billable_event="served")


def test_longest_placement_with_the_billable_event_fits_the_limit() -> None:
    """The 200-character placement of plain characters still signs within 1,024."""
    token = sign(claims(placement="p" * 200, billable_event="viewable",
                        expected_micros=2**63 - 1, price_micros=2**63 - 1), KEY)
    assert len(token) <= MAX_TOKEN_CHARS


@given(st.binary(max_size=80), st.integers(0, 63))
def test_exactly_the_canonical_spelling_of_any_bytes_decodes(data: bytes, other: int) -> None:
    """The decoder accepts a base64url text exactly when it is the canonical (unpadded,
    unused bits zero) spelling of some bytes, and gives those bytes back."""
    from adfunnel.tracking.token_wire import _b64decode, _b64encode

    text = _b64encode(data)
    assert _b64decode(text) == data if text else True
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    if text:
        spelled = text[:-1] + alphabet[other]
        canonical = _b64encode(base64.urlsafe_b64decode(spelled + "=" * (-len(spelled) % 4)))
        if canonical == spelled:
            assert _b64decode(spelled) is not None
        else:
            with pytest.raises(InvalidToken):
                _b64decode(spelled)
    with pytest.raises(InvalidToken):
        _b64decode(text + "A" if len(text) % 4 == 0 else text + "A" * (5 - len(text) % 4))
