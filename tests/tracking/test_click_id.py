"""Click ids (issue 22 §1): signed with a key derived for click ids only, so no serve
token verifies as one and none can be made from a serve token; they name the click."""

from __future__ import annotations

import base64

import msgspec
import pytest

from adfunnel.tracking.click_id import sign_click_id, verify_click_id
from adfunnel.tracking.token import InvalidToken, TokenClaims, sign, verify

KEY = b"k" * 32
OLD = b"o" * 32
CLAIMS = TokenClaims("imp1", 42, 7, 5_000_000, "CPA", "feed", 1_000, 4_600, 50)
CLICKED_MS = 1_005_000


def _fields(text: str) -> list:
    body = text.partition(".")[0]
    return msgspec.json.decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def test_a_click_id_names_the_serve_and_the_click_time() -> None:
    cid = sign_click_id(CLAIMS, CLICKED_MS, KEY)
    got = verify_click_id(cid, [KEY], 2_000.0, 86_400)
    assert got.serve == CLAIMS and got.clicked_at_ms == CLICKED_MS
    assert _fields(cid)[:2] == ["click", CLICKED_MS]


def test_a_serve_token_is_not_a_click_id_and_a_click_id_not_a_serve_token() -> None:
    token = sign(CLAIMS, KEY)
    with pytest.raises(InvalidToken) as err:
        verify_click_id(token, [KEY], 2_000.0, 86_400)
    assert err.value.reason == "serve_token"
    with pytest.raises(InvalidToken) as err:
        verify(sign_click_id(CLAIMS, CLICKED_MS, KEY), KEY, 2_000.0)
    assert err.value.reason == "bad_signature"


def test_the_serve_tokens_mac_does_not_make_a_click_id() -> None:
    """What a reader of the page could build: the click payload under the token's MAC
    key is refused (the click id's key is derived, never the token secret itself)."""
    token_mac_id = sign_click_id(CLAIMS, CLICKED_MS, KEY).partition(".")[0] + "." + (
        sign(CLAIMS, KEY).partition(".")[2])
    with pytest.raises(InvalidToken) as err:
        verify_click_id(token_mac_id, [KEY], 2_000.0, 86_400)
    assert err.value.reason == "bad_signature"


def test_an_invalid_traffic_clicks_id_is_refused_as_such() -> None:
    cid = sign_click_id(CLAIMS, CLICKED_MS, KEY, invalid=True)
    assert _fields(cid) == _fields(sign_click_id(CLAIMS, CLICKED_MS, KEY))  # looks alike
    with pytest.raises(InvalidToken) as err:
        verify_click_id(cid, [KEY], 2_000.0, 86_400)
    assert err.value.reason == "invalid_traffic"


def test_a_tampered_click_time_is_a_bad_signature() -> None:
    cid = sign_click_id(CLAIMS, CLICKED_MS, KEY)
    fields = _fields(cid)
    fields[1] += 1
    body = base64.urlsafe_b64encode(msgspec.json.encode(fields)).rstrip(b"=").decode()
    with pytest.raises(InvalidToken) as err:
        verify_click_id(f"{body}.{cid.partition('.')[2]}", [KEY], 2_000.0, 86_400)
    assert err.value.reason == "bad_signature"


def test_a_click_id_expires_its_max_age_after_the_click() -> None:
    cid = sign_click_id(CLAIMS, CLICKED_MS, KEY)
    verify_click_id(cid, [KEY], 1_005.0 + 99.999, 100)
    with pytest.raises(InvalidToken) as err:
        verify_click_id(cid, [KEY], 1_005.0 + 100, 100)
    assert err.value.reason == "expired"


def test_rotation_the_previous_key_still_verifies() -> None:
    old_id = sign_click_id(CLAIMS, CLICKED_MS, OLD)
    assert verify_click_id(old_id, [KEY, OLD], 2_000.0, 86_400).serve == CLAIMS
    with pytest.raises(InvalidToken):
        verify_click_id(old_id, [KEY], 2_000.0, 86_400)
    old_token = sign(CLAIMS, OLD)
    assert verify(old_token, KEY, 2_000.0, previous=[OLD]) == CLAIMS
    with pytest.raises(InvalidToken) as err:
        verify(old_token, KEY, 2_000.0)
    assert err.value.reason == "bad_signature"


def test_an_expired_token_carries_its_authentic_claims_only() -> None:
    with pytest.raises(InvalidToken) as err:
        verify(sign(CLAIMS, KEY), KEY, 5_000.0)
    assert err.value.reason == "expired" and err.value.claims == CLAIMS
    with pytest.raises(InvalidToken) as err:
        verify(sign(CLAIMS, OLD), KEY, 5_000.0)
    assert err.value.claims is None


def test_rotation_the_current_key_verifies_with_previous_keys_listed() -> None:
    new_id = sign_click_id(CLAIMS, CLICKED_MS, KEY)
    assert verify_click_id(new_id, [KEY, OLD], 2_000.0, 86_400).serve == CLAIMS


def test_a_click_time_is_an_int_from_0_to_int64_max() -> None:
    zero = sign_click_id(CLAIMS, 0, KEY)
    assert verify_click_id(zero, [KEY], 1.0, 86_400).clicked_at_ms == 0
    sign_click_id(CLAIMS, 2**63 - 1, KEY)
    for bad in (-1, 2**63, True, 1.5):
        with pytest.raises(ValueError, match="clicked_at_ms"):
            sign_click_id(CLAIMS, bad, KEY)  # type: ignore[arg-type]
