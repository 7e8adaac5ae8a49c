"""OpenRTB ``test = 1`` requests (no billing): answered with bids whose token never
bills, committing no spend and no frequency-cap count; their notices and beacons are
answered and never stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.budget.gate import LocalSpendGate
from adfunnel.runtime.embedded import Runtime
from adfunnel.tracking.token import verify
from tests.openrtb.conftest import START, banner_campaign, banner_request
from tests.openrtb.test_notices_e2e import _billed, _call

ONE_A_DAY = [{"level": "campaign", "count": 1, "window": "day"}]


def _recording(append: Callable[..., Any], into: list[Any]) -> Callable[..., Any]:
    """``append`` (a sink's, sync or async), noting each event it is given in ``into``."""
    def wrapped(event: Any, *args: Any, **kwargs: Any) -> Any:
        into.append(event)
        return append(event, *args, **kwargs)
    return wrapped


@pytest.mark.slow
@pytest.mark.parametrize("openrtb_settings", [{}, {"openrtb_bills_on": "beacon"}])
def test_a_test_request_is_bid_and_never_bills_or_counts(
        client: TestClient, runtime: Runtime, monkeypatch: Any) -> None:
    """Breaks if a test bid commits its worst cost (tried: ``dry_run`` not passed to the
    runner: 2,500 in flight, and the cap counted so the live request gets no bid), if
    its token bills like a live one (tried: the endpoint keeping ``self.billable_event``:
    the token's billable event is ``notice``), or if its notices
    or beacons are stored (tried: the notice desk's ``TEST_BID`` answer removed: the win
    notice appended; the tracker's ``TEST_BID`` answer removed: the markup's render
    beacon appended)."""
    cid = banner_campaign(client, bid_micros=2_500_000, frequency_caps=ONE_A_DAY,
                          )["campaign"]["id"]
    for _ in range(2):  # twice: the day's one impression is never taken
        r = client.post("/openrtb2/bid", json=banner_request(test=1))
        assert r.status_code == 200, r.text
    bid = r.json()["seatbid"][0]["bid"][0]
    token = bid["burl"].split("t=", 1)[1].split("&", 1)[0]
    assert verify(token, b"k" * 32, START.timestamp()).billable_event == "test"
    assert isinstance(runtime.gate, LocalSpendGate)
    assert runtime.gate.committed(cid, START.date()) == 0
    stored: list[Any] = []
    sink = runtime.tracker.sink
    for name in ("append", "append_async"):
        monkeypatch.setattr(sink, name, _recording(getattr(sink, name), stored))
    pixel = bid["adm"].split('src="')[-1].split('"')[0].replace("&amp;", "&")
    assert _call(client, runtime, bid["nurl"], "1.75") == 204
    assert _call(client, runtime, bid["burl"], "1.75") == 204
    assert _call(client, runtime, pixel, "1.75") in (200, 204)
    assert _billed(client, cid) == (0, 0)
    assert stored == []  # answered, never appended
    # the live request after them: bid (its cap untouched), and then capped
    r = client.post("/openrtb2/bid", json=banner_request())
    assert r.status_code == 200, r.text
    assert runtime.gate.committed(cid, START.date()) == 2_500
    assert client.post("/openrtb2/bid", json=banner_request()).status_code == 204
