"""The campaign store keeps an ad's creative with content on every backend (SQLite in
memory and on file, PostgreSQL): each type round-trips through the row, the change log
and a second store; invalid ones are refused naming the field, without a write."""

from __future__ import annotations

import pytest

from adfunnel.campaigns import codec
from adfunnel.campaigns.creative import HtmlCreative, ImageCreative, NativeCreative
from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.sql_store import SqlCampaignStore

from .test_campaign_store_contract import (  # noqa: F401
    StoreBackend,
    backend,
    log_count,
    new_campaign,
    store,
)

CREATIVES = [
    ImageCreative("https://cdn.test/ä.png", 600, 500, "Ünïcode alt", upload_id="ab12"),
    NativeCreative("<script>alert(1)</script>", "body\nline", "Acme", "Go",
                   icon_url="https://cdn.test/i.png"),
    HtmlCreative("<p onclick='x()'>hi</p>"),
]


@pytest.mark.parametrize("creative", CREATIVES, ids=lambda c: c.type)
def test_each_creative_round_trips(backend: StoreBackend,  # noqa: F811
                                   creative: object) -> None:
    first = backend.open()
    camp = new_campaign(first, first.create_advertiser("a").id)
    fmt = "html" if isinstance(creative, HtmlCreative) else "banner"
    ad = first.create_ad(campaign_id=camp.id, landing_url="https://x.test/", format=fmt,
                         width=300, height=250, creative=creative)  # type: ignore[arg-type]
    assert ad.creative == creative and ad.creative_ref == ""
    assert backend.open().get_ad(ad.id) == ad  # another process reads the same
    logged = first.changes_since(0)[-1].record
    assert logged == ad
    assert codec.from_payload("ad", codec.dumps_payload(ad)) == ad
    _, _, ads, _ = backend.open().snapshot()
    assert ads == [ad]


def test_update_sets_replaces_and_clears(store: SqlCampaignStore) -> None:  # noqa: F811
    camp = new_campaign(store, store.create_advertiser("a").id)
    ad = store.create_ad(campaign_id=camp.id, landing_url="https://x.test/",
                         creative_ref="cr/1", format="banner", width=300, height=250)
    assert ad.creative is None
    image = CREATIVES[0]
    assert store.update_ad(ad.id, {"creative": image}).creative == image
    native = store.update_ad(ad.id, {"creative": {"type": "native", "title": "t", "body": "b",
                                                  "sponsor": "s", "cta": "c"}})
    assert native.creative == NativeCreative("t", "b", "s", "c")
    assert store.update_ad(ad.id, {"creative": None}).creative is None
    assert store.get_ad(ad.id).version == 4


@pytest.mark.parametrize(("changes", "field"), [
    ({"creative": NativeCreative("t" * 91, "b", "s", "c")}, "creative.title"),
    ({"creative": {"type": "native", "title": "t", "sponsor": "s", "cta": "c"}},
     "creative.body"),
    ({"creative": {"type": "gif"}}, "creative.type"),
    ({"creative": ImageCreative("data:x", 1, 1, "a")}, "creative.url"),
    ({"creative": HtmlCreative("<p>")}, "format"),  # html only in format html
    ({"creative_ref": ""}, "creative_ref"),  # without a creative it is still required
])
def test_invalid_creatives_are_refused_without_a_write(
        store: SqlCampaignStore, changes: dict[str, object], field: str) -> None:  # noqa: F811
    camp = new_campaign(store, store.create_advertiser("a").id)
    ad = store.create_ad(campaign_id=camp.id, landing_url="https://x.test/",
                         creative_ref="cr/1", format="banner", width=300, height=250)
    before = log_count(store)
    with pytest.raises(InvalidChange) as refused:
        store.update_ad(ad.id, changes)
    assert refused.value.field == field
    assert log_count(store) == before and store.get_ad(ad.id) == ad
