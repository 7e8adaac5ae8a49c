"""Block lists over HTTP on a real embedded app (#28): ``POST /v1/ads:select`` with
``blocked_categories``, ``blocked_domains`` or ``blocked_apps`` never serves an ad that
declares a blocked one (another ad fills the slot), explain and the decision log name
reason ``blocked`` with what blocked it, and a bad list is a 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.serving.helpers import ad_request, make_campaign


def _fields(r: Any) -> list[str]:
    return [f["field"] for f in r.json()["fields"]]


@pytest.fixture
def two(client: TestClient) -> tuple[int, int]:
    """(blockable ad id, plain ad id): the blockable one bids more, so it wins unblocked."""
    rich = make_campaign(client, bid_micros=5_000_000, ad={
        "categories": ["IAB7-39"], "adomain": ["www.ford.com"], "bundle": "com.foo.mygame"})
    plain = make_campaign(client, bid_micros=1_000_000)
    return rich["ad"]["id"], plain["ad"]["id"]


def _served(client: TestClient, **blocks: Any) -> list[int]:
    r = client.post("/v1/ads:select", json=ad_request(**blocks))
    assert r.status_code == 200, r.text
    return [a["ad_id"] for a in r.json()["ads"]]


@pytest.mark.parametrize("blocks", [
    {"blocked_categories": ["IAB7"]}, {"blocked_categories": ["iab7-39"]},
    {"blocked_domains": ["FORD.com"]}, {"blocked_domains": ["www.ford.com"]},
    {"blocked_apps": ["com.foo.mygame"]},
])
def test_a_blocked_ad_is_not_served_another_is(client: TestClient, two: tuple[int, int],
                                               blocks: dict[str, list[str]]) -> None:
    """Breaks if the fast path ignores the lists (tried: the ``drop_blocked`` call in
    ``FilterStage._mask_ads`` removed: the rich ad is served)."""
    rich, plain = two
    assert _served(client) == [rich]
    assert _served(client, **blocks) == [plain]


@pytest.mark.parametrize("blocks", [
    {"blocked_categories": ["IAB7-3"]}, {"blocked_categories": ["IAB7-39-1", "IAB1"]},
    {"blocked_domains": ["myford.com", "ford.co"]}, {"blocked_apps": ["com.foo"]},
])
def test_what_does_not_block_leaves_it_served(client: TestClient, two: tuple[int, int],
                                              blocks: dict[str, list[str]]) -> None:
    """Breaks if a rule matches a bare string prefix (tried: ``category_keys`` filing
    ``IAB7-3`` as a parent of ``IAB7-39``)."""
    assert _served(client, **blocks) == [two[0]]


def test_explain_and_the_decision_log_name_the_block(client: TestClient,
                                                     two: tuple[int, int]) -> None:
    """Breaks if the reference path drops the block's detail (tried: ``Rejection``
    built without ``detail``: null) or skips the check (tried: the ``BLOCKED`` line
    removed from ``ReferenceDecider._filter``: the rich ad wins under explain)."""
    rich, plain = two
    body = ad_request(explain=True, request_id="x", blocked_categories=["IAB7"])
    r = client.post("/v1/ads:select", json=body)
    assert r.status_code == 200, r.text
    assert [a["ad_id"] for a in r.json()["ads"]] == [plain]
    [rej] = [x for x in r.json()["rejections"] if x["ad_id"] == rich]
    assert (rej["reason"], rej["detail"]) == ("blocked", "category IAB7")
    logged = client.get("/v1/decisions/x").json()
    assert [(x["reason"], x["detail"]) for x in logged["rejections"] if x["ad_id"] == rich] == [
        ("blocked", "category IAB7")]
    r = client.post("/v1/ads:select", json=ad_request(
        explain=True, blocked_domains=["ford.com"], blocked_apps=["com.foo.mygame"]))
    [rej] = [x for x in r.json()["rejections"] if x["ad_id"] == rich]
    assert rej["detail"] == "domain ford.com"  # the first rule that blocks it is named


@pytest.mark.parametrize(("field", "value", "named"), [
    ("blocked_categories", "IAB7", "blocked_categories"),
    ("blocked_categories", [7], "blocked_categories"),
    ("blocked_domains", ["x"] * 2001, "blocked_domains"),
    ("blocked_domains", [""], "blocked_domains[0]"),
    ("blocked_apps", ["ok", "y" * 257], "blocked_apps[1]"),
])
def test_bad_lists_are_422_naming_the_field(client: TestClient, field: str, value: Any,
                                            named: str) -> None:
    """Breaks if a bound is dropped (tried: ``_block_list_problems`` returning []: the
    2,001 entries and the blank one are served)."""
    r = client.post("/v1/ads:select", json=ad_request(**{field: value}))
    assert r.status_code == 422, r.text
    assert any(f.startswith(named) for f in _fields(r)), r.json()
