"""Case normalisation of coded attribute values, on the campaign side and the request side.

A campaign targeting ``us`` matches a request from ``US`` and the other way round —
in the brute-force evaluator, the scan index and the conjunction index alike — while
the stored targeting JSON keeps the advertiser's spelling.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.index import ConjunctionIndex, ScanIndex
from adfunnel.serving.request import decode_request, request_attributes
from adfunnel.targeting import In, NotIn, dump_expr, matches, parse_expr
from adfunnel.targeting.attributes import ATTRIBUTES, VALUE_CASE, Case, normalise_value


def request_of(attributes: dict[str, Any], domain: str | None = None) -> dict[str, frozenset[str]]:
    """The targeting view of a real decoded ad request."""
    body = {"user": {"key": "u", "attributes": attributes},
            "placement": {"id": "feed", **({"domain": domain} if domain else {})},
            "slots": [{"id": "s", "position": 1, "width": 300, "height": 250}]}
    return request_attributes(decode_request(msgspec.json.encode(body)))


def every_way(raw: dict[str, Any], request: dict[str, frozenset[str]]) -> list[bool]:
    """Match results of the evaluator, the scan index and the conjunction index."""
    expr = parse_expr(raw)
    found = []
    for index in (ScanIndex(), ConjunctionIndex()):
        index.build([(1, expr, 1.0), (2, In("placement", frozenset({"other"})), 1.0)])
        found.append(index.query(request).ad_ids == [1])
    return [matches(expr, request), *found]


def test_the_table_names_every_attribute_once() -> None:
    assert set(VALUE_CASE) == ATTRIBUTES
    assert VALUE_CASE["geo.country"] is Case.UPPER and VALUE_CASE["geo.region"] is Case.UPPER
    for name in ("os", "browser", "device_type", "domain", "language"):
        assert VALUE_CASE[name] is Case.LOWER
    for name in ("interests", "audiences", "geo.city", "placement", "exchange"):
        assert VALUE_CASE[name] is Case.AS_GIVEN


@pytest.mark.parametrize(
    ("attr", "campaign", "request_value"),
    [
        ("geo.country", "us", "US"),
        ("geo.country", "US", "us"),
        ("geo.region", "us-fl", "US-FL"),
        ("geo.region", "US-FL", "Us-Fl"),
        ("os", "iOS", "IOS"),
        ("os", "android", "Android"),
        ("browser", "Chrome", "chrome"),
        ("device_type", "MOBILE", "mobile"),
        ("language", "en-US", "EN-us"),
    ],
)
def test_in_matches_across_case(attr: str, campaign: str, request_value: str) -> None:
    request = request_of({attr: request_value})
    assert every_way({"attr": attr, "in": [campaign]}, request) == [True, True, True]
    assert every_way({"attr": attr, "not_in": [campaign]}, request) == [False, False, False]


def test_domain_matches_across_case() -> None:
    request = request_of({}, domain="News.Example.COM")
    assert every_way({"attr": "domain", "in": ["news.example.com"]}, request) == [True] * 3


@pytest.mark.parametrize(
    ("attr", "campaign", "request_value"),
    [("interests", "Cars", "cars"), ("geo.city", "US-TX-Austin", "us-tx-austin"),
     ("audiences", "A1", "a1")],
)
def test_ids_are_compared_as_given(attr: str, campaign: str, request_value: str) -> None:
    request = request_of({attr: [request_value] if attr != "geo.city" else request_value})
    assert every_way({"attr": attr, "in": [campaign]}, request) == [False, False, False]


def test_parsed_tree_holds_normalised_values() -> None:
    expr = parse_expr({"attr": "geo.country", "in": ["us", "Ca", "US"]})
    assert expr == In("geo.country", frozenset({"US", "CA"}))
    assert parse_expr({"attr": "os", "not_in": ["iOS"]}) == NotIn("os", frozenset({"ios"}))


def test_stored_text_keeps_the_advertisers_spelling() -> None:
    raw = {"all": [{"attr": "geo.country", "in": ["us", "Ca"]}, {"attr": "os", "in": ["iOS"]}]}
    text = dump_expr(raw)
    assert text == '{"all":[{"attr":"geo.country","in":["us","Ca"]},{"attr":"os","in":["iOS"]}]}'
    assert dump_expr(json.loads(text)) == text


# --- property: case never changes a match -------------------------------------------

CODED = {"geo.country": ["us", "ca", "de"], "geo.region": ["us-fl", "us-ny"],
         "os": ["ios", "android"], "browser": ["chrome", "safari"], "language": ["en", "de-at"]}


def recase(text: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(text), max_size=len(text)).map(
        lambda ups: "".join(c.upper() if u else c.lower() for c, u in zip(text, ups, strict=True))
    )


@st.composite
def leaves(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(canonical leaf, the same leaf with randomly cased values)."""
    attr = draw(st.sampled_from(sorted(CODED)))
    values = draw(st.lists(st.sampled_from(CODED[attr]), min_size=1, max_size=2, unique=True))
    op = draw(st.sampled_from(["in", "not_in"]))
    cased = [draw(recase(v)) for v in values]
    return {"attr": attr, op: values}, {"attr": attr, op: cased}


@st.composite
def requests(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(canonical request attributes, the same with randomly cased values)."""
    attrs = draw(st.lists(st.sampled_from(sorted(CODED)), max_size=5, unique=True))
    plain: dict[str, Any] = {}
    cased: dict[str, Any] = {}
    for a in attrs:
        v = draw(st.sampled_from(CODED[a]))
        plain[a] = [v] if a == "language" else v
        c = draw(recase(v))
        cased[a] = [c] if a == "language" else c
    return plain, cased


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(leaves(), min_size=1, max_size=3), st.sampled_from(["all", "any"]), requests())
def test_case_never_changes_a_match(leaf_pairs, op: str, req_pair) -> None:
    plain_tree = {op: [p for p, _ in leaf_pairs]}
    cased_tree = {op: [c for _, c in leaf_pairs]}
    expected = every_way(plain_tree, request_of(req_pair[0]))
    assert len(set(expected)) == 1  # the three matchers agree
    assert every_way(cased_tree, request_of(req_pair[1])) == expected
    assert every_way(cased_tree, request_of(req_pair[0])) == expected
    assert every_way(plain_tree, request_of(req_pair[1])) == expected


def test_normalise_value_leaves_unknown_attributes_alone() -> None:
    assert normalise_value("x.any_name", "MiXeD") == "MiXeD"
