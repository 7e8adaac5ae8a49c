"""The decider without HTTP: deadlines and rejection reasons are data."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import monotonic_ms
from adfunnel.runtime.embedded import Runtime
from adfunnel.serving.request import decode_request
from tests.serving.helpers import ad_request, make_campaign


def _req(**kw):
    import json

    return decode_request(json.dumps(ad_request(**kw)).encode())


def test_past_deadline_returns_nothing_and_is_flagged(client: TestClient, runtime: Runtime) -> None:
    make_campaign(client)
    d = runtime.decider.decide(_req(), "r", monotonic_ms() - 1)
    assert d.late and d.placed == []
    d = runtime.decider.decide(_req(), "r2", monotonic_ms() + 1000)
    assert not d.late and len(d.placed) == 1


@pytest.mark.slow
def test_out_of_flight_and_daypart(client: TestClient, runtime: Runtime) -> None:
    make_campaign(client, flight_start="2026-07-16")
    make_campaign(client, dayparts=[{"weekdays": [0, 1, 2, 3, 4, 5, 6], "start_hour": 0,
                                     "end_hour": 6}])
    d = runtime.decider.decide(_req(), "r", monotonic_ms() + 1000)
    assert d.rejection_counts() == {"out_of_flight": 1, "outside_daypart": 1}


def test_size_mismatch_rejected(client: TestClient, runtime: Runtime) -> None:
    make_campaign(client)
    slots = [{"id": "s", "position": 1, "width": 728, "height": 90}]
    d = runtime.decider.decide(_req(slots=slots), "r", monotonic_ms() + 1000)
    assert d.placed == [] and d.rejection_counts() == {}  # the index holds it apart
    d = runtime.decider.decide(_req(slots=slots, explain=True), "r", monotonic_ms() + 1000)
    assert d.rejection_counts() == {"no_fitting_slot": 1}  # explain: every shape
