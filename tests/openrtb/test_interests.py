"""OpenRTB interests and audiences: ``user.data`` segments become ``audiences``; user,
site, app and content keywords and categories become ``interests`` — only where consent
allows (no COPPA; GDPR with a consent string)."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
from fastapi.testclient import TestClient

from adfunnel.openrtb.interests import MAX_VALUE_CHARS
from adfunnel.openrtb.mapping import MappingConfig, map_request
from adfunnel.openrtb.request import decode_bid_request
from adfunnel.serving.request import MAX_VALUES
from tests.openrtb.conftest import banner_campaign, banner_request

#: A Prebid.js-like request (first-party data in ``site.content`` and ``user.data``,
#: an IAB Audience Taxonomy segment provider, a TCF consent string under GDPR).
PREBID_LIKE: dict[str, Any] = banner_request(
    id="8b5c1f3e-7f2a-4e0a-9d55-3d1f0c6a2b19",
    site={"id": "site-1", "domain": "sports.example", "page": "https://sports.example/nba",
          "cat": ["IAB17"], "sectioncat": ["IAB17-44"], "pagecat": ["IAB17-44", "IAB17-3"],
          "keywords": "basketball, nba ,playoffs",
          "publisher": {"id": "pub-9", "domain": "sports.example"},
          "content": {"cat": ["IAB17-44"], "keywords": "finals",
                      "kwarray": ["celtics", "nba"], "language": "en"}},
    user={"id": "u1", "consent": "CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA",
          "keywords": "sneakers,running", "kwarray": ["fitness"],
          "data": [{"id": "pubmatic.com", "name": "pubmatic.com", "ext": {"segtax": 4},
                    "segment": [{"id": "487"}, {"id": "101", "value": "1"}]},
                   {"name": "audience.example", "segment": [{"id": "in-market-shoes"},
                                                             {"name": "no id"}]}]},
    regs={"gdpr": 1, "ext": {"us_privacy": "1---"}},
)
INTERESTS = ["sneakers", "running", "fitness", "IAB17", "IAB17-44", "IAB17-3", "basketball",
             "nba", "playoffs", "finals", "celtics"]
AUDIENCES = ["487", "101", "in-market-shoes"]


def _attributes(body: dict[str, Any]) -> dict[str, Any]:
    mapped = map_request(decode_bid_request(msgspec.json.encode(body)), MappingConfig())
    assert mapped.select is not None
    return mapped.select.user.attributes


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    out = copy.deepcopy(body)
    at = out
    for key in path[:-1]:
        at = at[key]
    del at[path[-1]]
    return out


def test_segments_become_audiences_and_keywords_and_categories_interests() -> None:
    """Breaks if segments are not read (tried: the ``user.data`` loop removed: no
    ``audiences``), if keywords are not split and trimmed (tried: ``_words`` returning
    the text whole: ``"basketball, nba ,playoffs"``), if the site's categories or its
    content are skipped (tried: the ``content`` branch removed: no ``finals``,
    ``celtics``), or if words are kept untrimmed (tried: ``value`` for
    ``value.strip()``: ``" nba "`` beside ``nba``)."""
    attrs = _attributes(PREBID_LIKE)
    assert attrs["interests"] == INTERESTS
    assert attrs["audiences"] == AUDIENCES
    assert attrs["geo.country"] == "US"  # the rest of the mapping as before


def test_an_app_request_maps_its_own_categories_and_keywords() -> None:
    body = _without(PREBID_LIKE, "site")
    body["app"] = {"bundle": "com.example.scores", "cat": ["IAB17"], "keywords": "scores",
                   "content": {"kwarray": ["nba"]}}
    attrs = _attributes(body)
    assert attrs["interests"] == ["sneakers", "running", "fitness", "IAB17", "scores", "nba"]


@pytest.mark.parametrize(("regs", "user_changes", "kept"), [
    ({"gdpr": 1}, {"consent": None}, False),  # GDPR applies, no consent string
    ({"ext": {"gdpr": 1}}, {"consent": None}, False),  # 2.5's spelling
    ({"gdpr": 1, "coppa": 1}, {}, False),  # COPPA: never, consent or not
    ({"gdpr": 1}, {}, True),  # GDPR with consent
    ({"gdpr": 0}, {"consent": None}, True),  # GDPR does not apply
])
def test_interests_and_audiences_need_consent(regs: dict[str, Any],
                                              user_changes: dict[str, Any],
                                              kept: bool) -> None:
    """Breaks if they are mapped without consent (tried: ``interest_attributes`` merged
    before the privacy check in ``_user``: the GDPR-without-consent request carries
    both)."""
    body = copy.deepcopy(PREBID_LIKE)
    body["regs"] = regs
    body["user"].update(user_changes)
    body["user"] = {k: v for k, v in body["user"].items() if v is not None}
    attrs = _attributes(body)
    assert ("interests" in attrs, "audiences" in attrs) == (kept, kept)


def test_blank_long_and_too_many_values_are_left_out() -> None:
    """Breaks if the per-attribute limit is not kept (tried: the ``MAX_VALUES`` check in
    ``_keep`` removed: 1,005 interests, which the funnel's own check refuses)."""
    body = copy.deepcopy(PREBID_LIKE)
    body["user"]["keywords"] = " , ," + "x" * (MAX_VALUE_CHARS + 1)
    body["user"]["kwarray"] = [f"k{i}" for i in range(MAX_VALUES + 5)]
    body["site"] = {"domain": "sports.example"}
    body["user"]["data"] = [{"segment": [{"id": " "}]}]
    attrs = _attributes(body)
    assert attrs["interests"] == [f"k{i}" for i in range(MAX_VALUES)]
    assert "audiences" not in attrs


@pytest.mark.parametrize(("path", "value", "field"), [
    (("user", "keywords"), ["a", "b"], "user.keywords"),
    (("site", "cat"), "IAB17", "site.cat"),
    (("user", "data"), {"segment": []}, "user.data"),
    (("site", "content"), ["x"], "site.content"),
])
def test_a_wrong_type_is_refused_naming_the_field(client: TestClient, path: tuple[str, str],
                                                  value: object, field: str) -> None:
    body = copy.deepcopy(PREBID_LIKE)
    body[path[0]][path[1]] = value
    r = client.post("/openrtb2/bid", json=body)
    assert r.status_code == 400, r.text
    assert field in r.text


@pytest.mark.slow
def test_a_campaign_targeting_interests_or_audiences_bids_only_with_consent(
        client: TestClient) -> None:
    """End to end: a campaign targeting an interest (a content keyword) and one targeting
    an audience (a segment id) each bid on the Prebid-like request, and neither on the
    same request under GDPR without a consent string. Breaks if the mapping does not
    reach the funnel (tried: ``attrs.update(interest_attributes(req))`` removed: no bid)."""
    banner_campaign(client, bid_micros=3_000_000, name="finals",
                    targeting={"attr": "interests", "in": ["finals"]})
    banner_campaign(client, 728, 90, bid_micros=3_000_000, name="shoes",
                    targeting={"attr": "audiences", "in": ["in-market-shoes"]})
    body = copy.deepcopy(PREBID_LIKE)
    body["imp"].append({"id": "imp-2", "banner": {"w": 728, "h": 90}})
    r = client.post("/openrtb2/bid", json=body)
    assert r.status_code == 200, r.text
    assert sorted(b["impid"] for b in r.json()["seatbid"][0]["bid"]) == ["imp-1", "imp-2"]
    del body["user"]["consent"]
    body["id"] = "no-consent"
    r = client.post("/openrtb2/bid?nbr=1", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["ext"]["adfunnel"]["reasons"] == {"imp-1": "no_fill", "imp-2": "no_fill"}
