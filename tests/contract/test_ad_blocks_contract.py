"""The campaign store keeps an ad's block fields (``categories``, ``adomain``, ``bundle``;
#28) on every backend (SQLite in memory and on file, PostgreSQL): canonical and
deduplicated, round-tripping through the row, the change log, a payload and a second
store; invalid values are refused naming the field, without a write."""

from __future__ import annotations

import pytest

from adfunnel.campaigns import codec
from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.sql_store import SqlCampaignStore

from .test_campaign_store_contract import (  # noqa: F401
    StoreBackend,
    backend,
    log_count,
    new_ad,
    new_campaign,
    store,
)


def test_block_fields_round_trip_canonical(backend: StoreBackend) -> None:  # noqa: F811
    """Breaks if the table lacks a column or the codec leaves a field out of the row or
    the payload (tried: ``categories`` dropped from ``_JSON_COLUMNS``: the row holds the
    tuple's repr, so SQLite fails the insert; ``normalise_blocks`` not called from
    ``coerce_values``: ``iab7-39`` is kept as given)."""
    first = backend.open()
    camp = new_campaign(first, first.create_advertiser("a").id)
    ad = first.create_ad(campaign_id=camp.id, landing_url="https://x.test/", format="banner",
                         width=300, height=250, creative_ref="c",
                         categories=["iab7-39", "IAB7-39", " IAB1 "],
                         adomain=["WWW.Ford.com.", "bücher.example"], bundle=" com.foo.game ")
    assert ad.categories == ("IAB7-39", "IAB1")
    assert ad.adomain == ("www.ford.com", "xn--bcher-kva.example")
    assert ad.bundle == "com.foo.game"
    assert backend.open().get_ad(ad.id) == ad  # another process reads the same
    assert first.changes_since(0)[-1].record == ad  # what ad servers follow
    assert codec.from_payload("ad", codec.dumps_payload(ad)) == ad
    assert first.snapshot()[2] == [ad]
    cleared = first.update_ad(ad.id, {"categories": [], "adomain": ["ford.com"],
                                      "bundle": None}, expected_version=1)
    assert (cleared.categories, cleared.adomain, cleared.bundle) == ((), ("ford.com",), None)
    assert backend.open().get_ad(ad.id) == cleared == first.changes_since(0)[-1].record


def test_an_ad_without_block_fields_declares_none(store: SqlCampaignStore) -> None:  # noqa: F811
    """An ad made without them (and a payload written before they existed) declares
    nothing. Breaks if the payload decoder requires the new keys (tried: dropping the
    dataclass defaults: ``from_payload`` raises TypeError)."""
    ad = new_ad(store, new_campaign(store, store.create_advertiser("a").id).id)
    assert (ad.categories, ad.adomain, ad.bundle) == ((), (), None)
    old = codec.to_payload(ad)
    for name in ("categories", "adomain", "bundle"):
        del old[name]
    assert codec.from_payload("ad", old) == ad


@pytest.mark.parametrize(("field", "bad"), [
    ("categories", ["IAB0"]), ("categories", ["food"]), ("categories", "IAB1"),
    ("categories", [f"IAB{i}" for i in range(1, 12)]), ("categories", [7]),
    ("adomain", ["https://ford.com/x"]), ("adomain", ["ford"]), ("adomain", ["10.0.0.1"]),
    ("adomain", ["a_b.com"]), ("adomain", [f"d{i}.com" for i in range(6)]),
    ("bundle", ""), ("bundle", "com foo"), ("bundle", 5), ("bundle", "x" * 256),
])
def test_invalid_block_fields_are_refused_naming_the_field(
        store: SqlCampaignStore, field: str, bad: object) -> None:  # noqa: F811
    """Breaks if a rule is dropped (tried: ``MAX_CATEGORIES`` check removed from
    ``normalise_list``: eleven categories stored)."""
    camp = new_campaign(store, store.create_advertiser("a").id)
    ad = new_ad(store, camp.id)
    before = log_count(store)
    with pytest.raises(InvalidChange) as err:
        store.update_ad(ad.id, {field: bad})
    assert err.value.field == field
    with pytest.raises(InvalidChange) as err:
        store.create_ad(campaign_id=camp.id, landing_url="https://x.test/", format="banner",
                        width=1, height=1, creative_ref="c", **{field: bad})
    assert err.value.field == field
    assert log_count(store) == before and store.get_ad(ad.id) == ad
