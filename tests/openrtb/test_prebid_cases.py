"""Prebid Server's own request test cases through ``POST /openrtb2/bid`` over HTTP.

``../shared/data/openrtb/prebid-server-sample-requests/`` (Apache-2.0, PROVENANCE.md):
one line per Prebid test file, ``mockBidRequest`` and the answer Prebid expects. The
catalogue has an image ad of every banner size the cases ask for. Every request:

- no 5xx;
- a valid one (and ``preferred-media-type-not-defined``, filed under invalid but expected
  200): 200 with a ``BidResponse`` the validator (:mod:`tests.openrtb.validator`) passes,
  or 204 — the sizeless ones (no banner size, no native main image size) get no bid,
  every other one a bid;
- an invalid one whose fault is in OpenRTB 2.6 itself: 400 naming the field
  (:data:`EXPECTED_FIELD`); the others are Prebid-only (:data:`PREBID_ONLY`, each with
  its reason) and are answered as a valid request would be (200 or 204).

Prebid's ``/openrtb2/video`` payloads (``requestPayload``) are not bid requests: skipped.
Tally (this catalogue): valid 51 × 200, 14 × 204; invalid 38 × 400, 68 Prebid-only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.openrtb.conftest import banner_campaign
from tests.openrtb.validator import response_problems

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "openrtb" / (
    "prebid-server-sample-requests")

#: invalid case (file name) -> the field our 400 names.
EXPECTED_FIELD = {
    "invalid-native/empty.json": "imp[0].native.request",
    "audio-maxbitrate-negative.json": "imp[0].audio.maxbitrate",
    "audio-maxseq-negative.json": "imp[0].audio.maxseq",
    "audio-mimes-empty.json": "imp[0].audio.mimes",
    "audio-minbitrate-negative.json": "imp[0].audio.minbitrate",
    "audio-sequence-negative.json": "imp[0].audio.sequence",
    "banner-h-negative.json": "imp[0].banner.h",
    "banner-w-negative.json": "imp[0].banner.w",
    "deal-no-id.json": "imp[0].pmp.deals[0].id",
    "device-geo-accuracy-negative.json": "device.geo.accuracy",
    "device-h-negative.json": "device.h",
    "device-ppi-negative.json": "device.ppi",
    "device-w-negative.json": "device.w",
    "invalid-whole/empty-object.json": "id",
    "format-h-negative.json": "imp[0].banner.format[0].h",
    "format-hratio-negative.json": "imp[0].banner.format[0].hratio",
    "format-w-negative.json": "imp[0].banner.format[0].w",
    "format-wmin-negative.json": "imp[0].banner.format[0].wmin",
    "format-wratio-negative.json": "imp[0].banner.format[0].wratio",
    "imp-empty-array.json": "imp",
    "imp-empty-object.json": "imp[0].id",
    "imp-id-duplicates.json": "imp[1].id",
    "malformed-bid-request.json": "body",
    "metric-empty-object.json": "imp[0].metric[0].type",
    "native-empty.json": "imp[0].native.request",
    "null.json": "body",
    "only-request-id.json": "imp",
    "regs-gdpr-invalid.json": "regs.gdpr",
    "site-app-both.json": "app",
    "site-dooh-both.json": "dooh",
    "tmax-negative.json": "tmax",
    "user-geo-accuracy-negative.json": "user.geo.accuracy",
    "video-empty.json": "imp[0].video.mimes",
    "video-h-negative.json": "imp[0].video.h",
    "video-maxbitrate-negative.json": "imp[0].video.maxbitrate",
    "video-mimes-empty.json": "imp[0].video.mimes",
    "video-minbitrate-negative.json": "imp[0].video.minbitrate",
    "video-w-negative.json": "imp[0].video.w",
}
_EXT = "a Prebid rule on an ext object (OpenRTB: ext is ignored)"
_NATIVE = ("a rule of the Native Ads request inside imp.native.request (a separate IAB "
           "spec we do not parse: native imps get no bid)")
_OPTIONAL_SIZE = ("OpenRTB 2.6 makes banner w/h and format optional (recommended): an imp "
                  "without a usable size gets no bid, not a refusal")
_RATIO = "Prebid's rule on Format (2.6: every Format field optional)"
#: invalid case -> why it is Prebid's rule, not OpenRTB's (answered 200 or 204).
PREBID_ONLY = {
    "alias-bidder-self.json": _EXT, "alias-unknown-core.json": _EXT,
    "bid-adj-factors-case-invalid-same-bidder-names.json": _EXT,
    "bid-adjustment-invalid-bidder.json": _EXT, "bid-adjustment-negative.json": _EXT,
    "cache-nothing.json": _EXT, "storedrequest-id-int.json": _EXT,
    "imp-ext-empty.json": _EXT, "imp-ext-invalid-params.json": _EXT,
    "imp-ext-prebid-bidder-empty.json": _EXT, "imp-ext-unknown-bidder.json": _EXT,
    "imp-no-ext.json": _EXT, "invalid-bidder-params.json": _EXT,
    "interstital-bad-perc.json": _EXT, "interstitial-empty.json": _EXT,
    "invalid-source.json": _EXT, "regs-ext-malformed.json": _EXT, "site-ext-amp.json": _EXT,
    "user-ext-consent-int.json": _EXT + "; a consent that is not a string is no consent",
    "user-gdpr-consent-invalid.json": _EXT + "; a consent that is not a string is no consent",
    "user-ext-prebid-buyeruids-empty.json": _EXT,
    "user-ext-prebid-buyeruids-unknown.json": _EXT, "user-ext-prebid-empty.json": _EXT,
    "banner-h-only.json": _OPTIONAL_SIZE, "banner-w-only.json": _OPTIONAL_SIZE,
    "banner-no-size.json": _OPTIONAL_SIZE, "format-empty-array.json": _OPTIONAL_SIZE,
    "banner-hmax.json": "hmax is deprecated in 2.6, not forbidden (Prebid refuses it)",
    "banner-hmin.json": "hmin is deprecated in 2.6, not forbidden (Prebid refuses it)",
    "banner-wmax.json": "wmax is deprecated in 2.6, not forbidden (Prebid refuses it)",
    "banner-wmin.json": "wmin is deprecated in 2.6, not forbidden (Prebid refuses it)",
    "format-empty-object.json": _RATIO, "format-no-height.json": _RATIO,
    "format-no-hratio.json": _RATIO, "format-two-widths.json": _RATIO,
    "imp-no-type.json": ("2.6 requires no media object in an imp (each is 'required if "
                         "offered as' that type): no media, no bid"),
    "no-site-or-app-or-dooh.json": "2.6 recommends, does not require, one of site/app/dooh",
    "site-empty.json": "2.6 recommends, does not require, site.id or site.page",
    **{name: _NATIVE for name in (
        "asset-data-invalid-type.json", "asset-data-no-type.json", "asset-empty.json",
        "asset-img-h-negative.json", "asset-img-hmin-negative.json",
        "asset-img-w-negative.json", "asset-img-wmin-negative.json", "asset-mixed-type.json",
        "asset-title-empty.json", "asset-video-mimes-empty.json",
        "asset-video-no-maxduration.json", "asset-video-no-mimes.json",
        "asset-video-no-minduration.json", "asset-video-no-protocols.json",
        "asset-video-protocols-empty.json", "asset-video-protocols-invalid.json",
        "assets-with-dup-ids.json", "assets-with-partial-ids.json",
        "context-type-content-incompatible-subtype.json",
        "context-type-product-incompatible-subtype.json",
        "context-type-social-incompatible-subtype.json", "contextsubtype-invalid.json",
        "contextsubtype-negative.json", "invalid-native/empty-object.json",
        "eventtracker-empty.json", "eventtracker-event-large.json",
        "eventtracker-methods-empty.json", "eventtracker-methods-large.json",
        "request-context-invalid.json", "request-plcmttype-invalid.json")},
}
#: valid cases answered 204: native ones whose request gives no main image size (a
#: native slot's size), or no banner size at all.
NO_BID_VALID = ("valid-native/", "interstitial-no-size.json", "imp-info-invalid.json")
SIZES = [(300, 250), (300, 600), (300, 300), (1920, 1080), (600, 500)]


def _cases(name: str) -> list[dict[str, Any]]:
    lines = (DATA / name).read_text().splitlines()
    return [c for c in map(json.loads, lines) if "mockBidRequest" in c]


def _key(case: dict[str, Any]) -> str:
    """The case's key in the tables: its file name, or folder/name where names repeat."""
    path = case["source_file"]
    short = path.rsplit("/", 1)[1]
    long = "/".join(path.split("/")[-2:])
    return long if long in EXPECTED_FIELD or long in PREBID_ONLY else short


def _post(client: TestClient, mock: Any) -> Any:
    """The answer to the case as Prebid wrote it. A 204 for time (``late`` or ``shed``:
    many cases carry no ``tmax``, so 100 ms) is the machine's load, not the case's
    answer: it is asked again, up to three times, rather than the case changed."""
    body = mock.encode() if isinstance(mock, str) else json.dumps(mock).encode()
    for _ in range(3):
        r = client.post("/openrtb2/bid", content=body,
                        headers={"content-type": "application/json"})
        if r.headers.get("x-adfunnel-outcome") not in ("late", "shed"):
            break
    return r


@pytest.fixture
def catalogue(client: TestClient) -> TestClient:
    for w, h in SIZES:
        banner_campaign(client, w, h)
    return client


def _answered_as_valid(r: Any, case: dict[str, Any], must_bid: bool) -> str | None:
    """None when ``r`` is a well-formed answer to a valid request, else the problem."""
    if r.status_code == 204:
        return "204 where a bid was expected" if must_bid else None
    if r.status_code != 200:
        return f"{r.status_code}: {r.text[:200]}"
    problems = response_problems(r.json(), case["mockBidRequest"])
    return "; ".join(problems) or None


@pytest.mark.slow
def test_valid_requests_get_a_bid_or_204(catalogue: TestClient) -> None:
    """Breaks if a valid field is refused (tried: ``SupplyChainNode.hp`` made required:
    ``source-schain.json`` answers 400), or a bid breaks the object model (tried: the
    bid's ``w`` and ``h`` swapped: the validator finds 250x300 none of the imp's sizes)."""
    cases = _cases("valid-requests.jsonl") + [
        c for c in _cases("invalid-requests.jsonl") if c["expectedReturnCode"] == 200]
    failures, tally = {}, {200: 0, 204: 0}
    for case in cases:
        r = _post(catalogue, case["mockBidRequest"])
        must_bid = not any(part in case["source_file"] for part in NO_BID_VALID)
        problem = _answered_as_valid(r, case, must_bid)
        if problem:
            failures[case["source_file"]] = problem
        tally[r.status_code] = tally.get(r.status_code, 0) + 1
    assert not failures, failures
    assert tally == {200: 52, 204: 14}, tally


@pytest.mark.slow
def test_invalid_requests_are_refused_naming_the_field(catalogue: TestClient) -> None:
    """Breaks if a required field is not enforced (tried: ``Imp.id`` given a default:
    ``imp-empty-object.json`` answers 204), a negative size passes (tried: ``Banner.w``
    typed ``int``: ``banner-w-negative.json`` answers 204), or a Prebid-only case is
    refused (tried: ``User.ext`` typed ``dict[str, str]``: ``user-ext-consent-int.json``
    answers 400)."""
    failures: dict[str, str] = {}
    counts = {"400": 0, "prebid_only": 0}
    for case in _cases("invalid-requests.jsonl"):
        if case["expectedReturnCode"] == 200:
            continue  # answered as a valid one (the test above)
        key = _key(case)
        r = _post(catalogue, case["mockBidRequest"])
        assert r.status_code < 500, (key, r.status_code)
        if key in PREBID_ONLY:
            counts["prebid_only"] += 1
            if r.status_code == 400:
                failures[key] = f"refused a Prebid-only case: {r.text[:200]}"
            elif r.status_code == 200:
                problems = response_problems(r.json(), case["mockBidRequest"])
                if problems:
                    failures[key] = "; ".join(problems)
            continue
        counts["400"] += 1
        fields = r.json().get("fields", []) if r.status_code == 400 else []
        if r.status_code != 400 or fields[0]["field"] != EXPECTED_FIELD.get(key):
            failures[key] = f"{r.status_code} {fields}, expected {EXPECTED_FIELD.get(key)}"
    assert not failures, failures
    assert counts == {"400": len(EXPECTED_FIELD), "prebid_only": len(PREBID_ONLY)}, counts
