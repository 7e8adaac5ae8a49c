"""The mapping of a BidRequest to our ad request (pure): privacy, currency, floors,
geography, deadline, placement."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
import pytest

from adfunnel.openrtb.mapping import (
    CURRENCY_NOT_ACCEPTED,
    UNKNOWN_CURRENCY,
    UNSUPPORTED_MEDIA,
    MappingConfig,
    floor_micros,
    map_request,
)
from adfunnel.openrtb.request import decode_bid_request
from adfunnel.openrtb.response import NBR_CODES
from tests.openrtb.conftest import banner_request

EUR = MappingConfig(rates={"EUR": Decimal("1.08")})


def _map(config: MappingConfig = EUR, **overrides: Any) -> Any:
    return map_request(decode_bid_request(msgspec.json.encode(banner_request(**overrides))),
                       config)


@pytest.mark.parametrize(("regs", "user", "keyed"), [
    ({}, {"id": "u1"}, True),
    ({"coppa": 1}, {"id": "u1"}, False),
    ({"gdpr": 1}, {"id": "u1"}, False),
    ({"gdpr": 1}, {"id": "u1", "consent": "CPXxRfAPXxRfA"}, True),
    ({"gdpr": 1}, {"id": "u1", "ext": {"consent": "CPXxRfAPXxRfA"}}, True),
    ({"ext": {"gdpr": 1}}, {"id": "u1"}, False),
    ({"gdpr": 1}, {"id": "u1", "ext": {"consent": 2}}, False),
    ({"gdpr": 0}, {"buyeruid": "b7"}, True),
])
def test_the_user_key_needs_consent_where_gdpr_or_coppa_apply(
        regs: dict[str, Any], user: dict[str, Any], keyed: bool) -> None:
    """Breaks if COPPA or GDPR without consent still keys the user (tried: ``_user``
    ignoring ``privacy_limited``: the coppa and gdpr cases keep ``u1``)."""
    select = _map(regs=regs, user=user).select
    assert (select.user.key is not None) is keyed
    if keyed:
        assert select.user.key == (user.get("id") or user.get("buyeruid"))


def test_floors_round_up_to_the_micro_and_convert_currencies() -> None:
    """Breaks if a floor rounds down (tried: ``ROUND_FLOOR``: 0.0000001 USD became 0 and
    1.2345671 became 1,234,567) or a currency is not converted (EUR read as USD)."""
    rates = {"EUR": Decimal("1.08")}
    assert floor_micros(0.0000001, "USD", "USD", rates) == 1
    assert floor_micros(1.1, "USD", "USD", rates) == 1_100_000
    assert floor_micros(1.2345671, "USD", "USD", rates) == 1_234_568
    assert floor_micros(1.0, "EUR", "USD", rates) == 1_080_000
    assert floor_micros(0.333333, "EUR", "USD", rates) == 360_000  # 359,999.64 up
    assert floor_micros(1.0, "GBP", "USD", rates) is None
    imp = {"id": "i", "banner": {"w": 300, "h": 250}, "bidfloor": 2, "bidfloorcur": "EUR"}
    [slot] = _map(imp=[imp]).select.slots
    assert slot.reserve_cpm_micros == 2_160_000


def test_what_cannot_bid_gets_a_reason() -> None:
    """Breaks if an unknown currency or a video imp becomes a slot, or our currency
    outside ``cur`` still bids (tried: the ``cur`` check removed: a slot is made)."""
    imps = [{"id": "v", "video": {"mimes": ["video/mp4"]}},
            {"id": "g", "banner": {"w": 300, "h": 250}, "bidfloor": 1, "bidfloorcur": "GBP"},
            {"id": "b", "banner": {"format": [{"w": 728, "h": 90}]}}]
    mapped = _map(imp=imps)
    assert mapped.no_bid == {"v": UNSUPPORTED_MEDIA, "g": UNKNOWN_CURRENCY}
    [slot] = mapped.select.slots
    assert (slot.id, slot.position, slot.width, slot.height) == ("b", 1, 728, 90)
    refused = _map(cur=["EUR"])
    assert refused.select is None and refused.no_bid == {"imp-1": CURRENCY_NOT_ACCEPTED}



def test_a_deals_only_imp_gets_no_slot() -> None:
    """``pmp.private_auction = 1``: bids are restricted to the imp's deals (OpenRTB 2.6
    §3.2.11), and we bid in none, so the imp gets no slot (``deals_only``, nbr 512); an
    open pmp still bids. Breaks if ``private_auction`` is ignored (tried: the check
    removed from ``_imp_terms``: a bid the exchange must discard, whose worst cost stays
    in flight and whose frequency-cap count stays spent until its token expires)."""
    deals = {"deals": [{"id": "d1", "bidfloor": 1.0}]}
    imps = [{"id": "p", "banner": {"w": 300, "h": 250}, "pmp": {"private_auction": 1, **deals}},
            {"id": "o", "banner": {"w": 300, "h": 250}, "pmp": {"private_auction": 0, **deals}}]
    mapped = _map(imp=imps)
    assert mapped.no_bid == {"p": "deals_only"}
    assert [s.id for s in mapped.select.slots] == ["o"]
    assert NBR_CODES["deals_only"] == 512

def test_geography_device_and_deadline() -> None:
    """Breaks if the alpha-3 country is passed through (tried: ``alpha2`` returning its
    input: ``USA`` reaches ``geo.country``), or ``tmax`` is not the deadline."""
    mapped = _map(tmax=250, device={"ua": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like "
                                           "Mac OS X)", "devicetype": 5, "language": "EN",
                                    "geo": {"country": "DEU", "region": "BE", "city": "B"}})
    attrs = mapped.select.user.attributes
    assert attrs["geo.country"] == "DE" and attrs["geo.region"] == "DE-BE"
    assert attrs["geo.city"] == "B" and attrs["language"] == ["en"]
    assert attrs["device_type"] == "tablet" and attrs["os"] == "ios"
    assert mapped.deadline_ms == 240 and mapped.select.deadline_ms == 240
    assert _map(tmax=None).deadline_ms == 90
    by_ip = _map(config=MappingConfig(country_of=lambda ip: "FR"), device={"ip": "192.0.2.1"})
    assert by_ip.select.user.attributes["geo.country"] == "FR"


def test_the_placement_is_the_operators_where_configured() -> None:
    """Breaks if a configured tagid loses to the site id (tried: names in the order site,
    tagid), or an unconfigured request has no placement."""
    imp = [{"id": "i", "tagid": "top-banner", "banner": {"w": 300, "h": 250}}]
    configured = MappingConfig(has_placement=lambda p: p in {"top-banner", "site-1"})
    assert _map(config=configured, imp=imp).select.placement.id == "top-banner"
    only_site = MappingConfig(has_placement=lambda p: p == "site-1")
    assert _map(config=only_site, imp=imp).select.placement.id == "site-1"
    assert _map(config=MappingConfig(), imp=imp).select.placement.id == "top-banner"
    bare = _map(config=MappingConfig(), site=None, app={"bundle": "com.x"})
    assert bare.select.placement.id == "com.x"
    assert _map(site={"page": "https://n.test/a"}).select.placement.domain == "n.test"
    assert map_request(decode_bid_request(b'{"id":"r","imp":[{"id":"i","banner":{"w":1,'
                                          b'"h":1}}]}'), EUR).select.placement.id == "openrtb"



def test_a_name_holding_nul_is_no_placement_domain_or_user_key() -> None:
    """A ``tagid`` (or site id, domain, user id) holding NUL is passed over as a too long
    one is: the placement rides in the bid's token into the ledger, and PostgreSQL refuses
    NUL in text (one billing notice of such a bid failed every aggregator batch it was in,
    retried forever: nothing billed after it). Breaks if ``_placement_id`` or ``_short``
    keep NUL (tried: the NUL test removed from ``_placement_id``: placement "a\x00b")."""
    imp = [{"id": "i", "tagid": "a\x00b", "banner": {"w": 300, "h": 250}}]
    mapped = _map(config=MappingConfig(), imp=imp, site={"id": "s\x00", "domain": "d\x00.test"},
                  user={"id": "u\x00"})
    assert mapped.select.placement.id == "openrtb"
    assert mapped.select.placement.domain is None and mapped.select.user.key is None
    assert _map(config=MappingConfig(), imp=imp, site={"id": "site-1"}
                ).select.placement.id == "site-1"

def test_slot_ids_stay_unique_and_short() -> None:
    """Breaks if a long imp id's slot id can meet another imp's (tried: ``f"#{i}"`` only
    for ids over 64 characters, without the ``#`` rule: "#1" twice)."""
    imps = [{"id": "#1", "banner": {"w": 300, "h": 250}},
            {"id": "x" * 65, "banner": {"w": 300, "h": 250}}]
    mapped = _map(imp=imps)
    assert [s.id for s in mapped.select.slots] == ["#0", "#1"]
    assert [t.imp_id for t in mapped.imps.values()] == ["#1", "x" * 65]


def test_block_lists_reach_the_request_and_an_overlong_one_bids_nothing() -> None:
    """Breaks if block lists are truncated rather than refused (tried: ``_refused``
    without the length check: a slot is made under a list of 2,001 domains)."""
    mapped = _map(bcat=["IAB7", " "], badv=["shop.test", "x" * 300], bapp=["com.a"])
    select = mapped.select
    assert (select.blocked_categories, select.blocked_domains, select.blocked_apps) == (
        ["IAB7"], ["shop.test"], ["com.a"])
    too_many = _map(badv=[f"d{i}.test" for i in range(2_001)])
    assert too_many.select is None and too_many.no_bid == {"imp-1": "too_many_blocks"}
