"""An OpenRTB ``test = 1`` request and frequency caps: the dry run is capped as a live
request is (it reads the counts), counts no capped decision for the dashboard, and a
winner it drops after the decision gives back no counts (it made none)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.openrtb.conftest import banner_campaign, banner_request

ONE_A_DAY = [{"level": "campaign", "count": 1, "window": "day"}]
TWO_A_DAY = [{"level": "campaign", "count": 2, "window": "day"}]


def _bid_imps(client: TestClient, body: dict[str, Any]) -> dict[str, str]:
    """imp id -> the ad id bid on it ({} for 204)."""
    r = client.post("/openrtb2/bid", json=body)
    assert r.status_code in (200, 204), r.text
    if r.status_code == 204:
        return {}
    return {b["impid"]: b["adid"] for s in r.json()["seatbid"] for b in s["bid"]}


def _caps(rt: Runtime) -> dict[str, Any]:
    """The in-memory cap store's records, as comparable values."""
    return copy.deepcopy({k: (r.values, r.expires_at) for k, r in rt.caps._users.items()})


@pytest.mark.slow
def test_a_test_request_is_capped_as_a_live_one_and_counts_no_capped_decision(
        client: TestClient, runtime: Runtime) -> None:
    """A user served the campaign's one ad a day gets no test bid either (a test request
    answers what a live one would), and the dashboard's capped-decision counter does not
    count the dry run. Breaks if the capped counter is left in place (tried:
    ``"capped"`` left out of ``dry_run._SWAPPED``: the dry run's refusal is counted).
    (``DryCaps.count`` answering None for every plan stays green here: in one process the
    screen's read refuses the capped campaign before the count; only another process's
    serve between the two could tell.)"""
    ad = str(banner_campaign(client, bid_micros=2_000_000,
                             frequency_caps=ONE_A_DAY)["ad"]["id"])
    assert _bid_imps(client, banner_request(id="live-1")) == {"imp-1": ad}
    capped = copy.deepcopy(runtime.decider.capped.peek())
    caps = _caps(runtime)
    for i in range(2):
        assert _bid_imps(client, banner_request(id=f"t{i}", test=1)) == {}
    assert runtime.decider.capped.peek() == capped
    assert _caps(runtime) == caps
    # the same request live is refused and counted (the check can see a count)
    assert _bid_imps(client, banner_request(id="live-2")) == {}
    assert runtime.decider.capped.peek() != capped


@pytest.mark.slow
def test_a_test_requests_dropped_winner_gives_back_no_counts(
        client: TestClient, runtime: Runtime) -> None:
    """A dry-run winner dropped after the decision (an http image on a secure imp:
    ``not_secure``) is abandoned like a live one, but a dry run counted nothing, so
    nothing may be given back: the live count of an earlier serve stays. Breaks if the
    dry run's decision keeps the counts its stand-in reported (tried:
    ``decision.cap_counts = None`` removed from ``decide_dry``: the abandon releases the
    live serve's count, and the user is served a third time on a cap of two)."""
    ad = str(banner_campaign(client, 728, 90, bid_micros=2_000_000,
                             frequency_caps=TWO_A_DAY,
                             ad={"creative_ref": "http://cdn.test/b.png"})["ad"]["id"])

    def body(id_: str, secure: int, **more: Any) -> dict[str, Any]:
        return banner_request(id=id_, imp=[{"id": "b", "banner": {"w": 728, "h": 90},
                                            "secure": secure}], **more)

    assert _bid_imps(client, body("live-1", 0)) == {"b": ad}  # counted: 1 of 2
    caps = _caps(runtime)
    assert _bid_imps(client, body("t1", 1, test=1)) == {}  # decided, dropped: not_secure
    assert _caps(runtime) == caps
    assert _bid_imps(client, body("live-2", 0)) == {"b": ad}  # 2 of 2
    assert _bid_imps(client, body("live-3", 0)) == {}
