"""The response validator finds each fault it is meant to (it guards every other test)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.openrtb.validator import response_problems

REQUEST = {"id": "r", "cur": ["USD"], "bcat": ["IAB7"], "badv": ["shop.test"],
           "imp": [{"id": "a", "bidfloor": 1.0,
                    "banner": {"w": 300, "h": 250, "format": [{"w": 728, "h": 90}]}}]}
GOOD = {"id": "r", "cur": "USD", "bidid": "b", "seatbid": [{"seat": "s", "bid": [
    {"id": "1", "impid": "a", "price": 1.5, "w": 728, "h": 90, "adid": "3", "crid": "3.1",
     "adm": "<a></a>", "nurl": "n?p=${AUCTION_PRICE}", "burl": "b?p=${AUCTION_PRICE}",
     "lurl": "l", "adomain": ["ok.test"], "cat": ["IAB1"]}]}]}


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(GOOD)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


BID = ["seatbid", 0, "bid", 0]


@pytest.mark.parametrize(("path", "value", "found"), [
    (["id"], "other", "id"),
    (["cur"], "EUR", "cur"),
    ([*BID, "impid"], "nope", "impid"),
    ([*BID, "price"], 0.99, "bidfloor"),
    ([*BID, "price"], "1.5", "price"),
    ([*BID, "w"], 90, "sizes"),
    ([*BID, "cat"], ["IAB7-39"], "bcat"),
    ([*BID, "adomain"], ["www.shop.test"], "badv"),
    ([*BID, "nurl"], "n", "AUCTION_PRICE"),
    (["seatbid", 0, "bid"], [], "non-empty"),
])
def test_each_fault_is_found(path: list[Any], value: Any, found: str) -> None:
    """Breaks if the validator stops checking one rule (tried: the subcategory rule
    dropped from ``_blocked``: ``IAB7-39`` under ``bcat`` ``IAB7`` passes)."""
    assert response_problems(GOOD, REQUEST) == []
    problems = response_problems(_with(path, value), REQUEST)
    assert any(found in p for p in problems), problems


def test_two_bids_for_one_imp_or_one_id_are_found() -> None:
    """Breaks if bids are not counted per imp (tried: ``seen_imps`` never added to)."""
    twice = copy.deepcopy(GOOD)
    twice["seatbid"][0]["bid"].append(dict(GOOD["seatbid"][0]["bid"][0]))
    problems = response_problems(twice, REQUEST)
    assert any("duplicate bid id" in p for p in problems)
    assert any("a second bid" in p for p in problems)
