"""The ad server's block book (:class:`adfunnel.serving.blocks.BlockBook`): the ids a
request's lists refuse follow every ad change, through the per-list cache."""

from __future__ import annotations

from dataclasses import replace

import msgspec

from adfunnel.campaigns.model import Ad, ReviewState
from adfunnel.serving.blocks import BlockBook, request_blocks
from adfunnel.serving.request import decode_request


def _ad(ad_id: int, **fields: object) -> Ad:
    return Ad(ad_id, 1, "https://x.test/", "c", "banner", 300, 250, ReviewState.APPROVED,
              **fields)  # type: ignore[arg-type]


def _blocks(**lists: list[str]) -> object:
    req = decode_request(msgspec.json.encode({
        "user": {}, "placement": {"id": "p"},
        "slots": [{"id": "s", "position": 1, "width": 300, "height": 250}], **lists}))
    return request_blocks(req)


def test_the_refused_ids_follow_ad_changes_through_the_cache() -> None:
    """Breaks if a cached answer outlives a change (tried: the cache hit ignoring the
    generation: the ad that dropped ``IAB7-39`` stays blocked) or a changed ad keeps its
    old keys (tried: the ``held - keys`` removal skipped)."""
    book = BlockBook()
    a, b = _ad(1, categories=("IAB7-39",)), _ad(2, adomain=("www.ford.com",), bundle="com.x")
    book.put([a, b, _ad(3)])
    cats, doms = _blocks(blocked_categories=["iab7"]), _blocks(blocked_domains=["Ford.com"])
    assert book.blocked_ids(cats).tolist() == [1]  # type: ignore[arg-type]
    assert book.blocked_ids(doms).tolist() == [2]  # type: ignore[arg-type]
    assert book.blocked_ids(_blocks(blocked_apps=["com.x"])).tolist() == [2]  # type: ignore[arg-type]
    book.put([replace(a, version=2, categories=("IAB1",))])
    assert book.blocked_ids(cats).tolist() == []  # type: ignore[arg-type]
    book.put([replace(b, version=2, adomain=()), _ad(4, adomain=("ford.com",))])
    assert book.blocked_ids(doms).tolist() == [4]  # type: ignore[arg-type]


def test_no_lists_is_none() -> None:
    """The decision's fast exit: a request without lists has no blocks at all."""
    assert _blocks() is None
    assert _blocks(blocked_categories=[], blocked_domains=[], blocked_apps=[]) is None
