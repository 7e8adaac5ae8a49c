"""An OpenRTB ``test = 1`` request is a dry run: it leaves every counter and state the
decision path writes exactly as it found them (pacing traffic, guaranteed supply, capped
decisions, the frequency-cap store, the budget client's demand and refusals, committed
spend, placement traffic, the served log, the forecast sample, the next draw); only the
decision log keeps it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from adfunnel.budget.embedded import InProcessBudget
from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.serving.dry_run import unobserved
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.openrtb.conftest import START, banner_campaign, banner_request
from tests.serving.helpers import SettlingClient

ONE_A_DAY = [{"level": "campaign", "count": 1, "window": "day"}]


@pytest.fixture
def service_runtime(tmp_path: Path) -> Iterator[Runtime]:
    """The embedded default: the budget service in process (pacing traffic, demand,
    slices), a served log, the in-memory cap store."""
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="service", admin_key=ADMIN_KEY,
                             derive_client_facts=False, public_base_url="https://ads.test",
                             served_log_dir=str(tmp_path / "served"))
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def service_client(service_runtime: Runtime) -> Iterator[TestClient]:
    with SettlingClient(build_app(service_runtime), service_runtime,
                        headers=ADMIN_HEADERS) as c:
        yield c


def _state(rt: Runtime) -> dict[str, Any]:
    """Everything a decision may write but the decision log, as comparable values."""
    gate = rt.gate
    assert isinstance(gate, InProcessBudget)
    client = gate.client
    decider = rt.decider
    supply = decider.supply
    demand = client._demand
    assert rt.placements is not None and rt.requests is not None
    return copy.deepcopy({
        "eligible": gate.eligible.peek(),
        "capped": decider.capped.peek(),
        "supply": (supply.counts, supply.requests, supply._sample),
        "caps": {k: (r.values, r.expires_at) for k, r in rt.caps._users.items()},
        "refusals": client.refusals, "stats": client.stats, "wants": client._wants,
        "asking": client._asking, "acc": client._acc,
        "demand": [np.nan_to_num(d.values, nan=-1).tolist()  # NaN: none held
                   for d in (demand._t, demand._charge, demand._day)],
        "generation": client.generation,
        "committed": {c.id: gate.client.state(c.id, START.date()) for c in
                      rt.catalog.campaigns.values()},
        "placements": rt.placements.counter._counts,
        "sample": {h: x.seen for h, x in rt.requests.sampler._hours.items()},
        "rng": decider.rng.getstate(),
    })


def _two_imps(**overrides: Any) -> dict[str, Any]:
    """A 300x250 imp (the capped auction campaign's) and a 728x90 one (the line's)."""
    body = banner_request(**overrides)
    body["imp"] = [body["imp"][0], {"id": "imp-2", "banner": {"w": 728, "h": 90}}]
    return body


def _recording(record: Callable[..., Any], into: list[Any]) -> Callable[..., Any]:
    def wrapped(source: Any) -> Any:
        into.append(source)
        return record(source)
    return wrapped


@pytest.mark.slow
def test_a_test_request_leaves_every_counter_as_it_found_it(
        service_client: TestClient, service_runtime: Runtime, monkeypatch: Any) -> None:
    """Breaks if the queue decides a dry run as a live one (tried: ``decide_dry`` replaced
    by ``decider.decide`` in ``DecisionQueue._run``: the first test request counts the
    cap, so the next gets one bid), or if any one writer is left in place (tried, one at
    a time in ``dry_run._stand_in``: ``eligible`` → the pacing counts differ; ``caps`` →
    the cap is counted and the next test request gets one bid; ``gate`` → the budget
    client's demand and ``asking`` differ; the rng's state not restored → the next draw
    differs). The served log is watched too (a dry run never reaches its ``record``; the
    shed and late runner paths: ``tests/serving/test_dry_run_runner.py``)."""
    rt = service_runtime
    capped = banner_campaign(service_client, bid_micros=2_500_000, frequency_caps=ONE_A_DAY,
                             )["campaign"]["id"]
    # an exchange's request counts no guaranteed supply (its direct lines are left out:
    # test_direct_lines.py), so the second imp goes to an auction campaign
    line = banner_campaign(service_client, 728, 90, bid_micros=1_000_000)["campaign"]["id"]
    assert capped != line
    recorded: list[Any] = []
    assert rt.served is not None
    monkeypatch.setattr(rt.served, "record", _recording(rt.served.record, recorded))
    before = _state(rt)
    for i in range(3):
        r = service_client.post("/openrtb2/bid", json=_two_imps(id=f"t{i}", test=1))
        assert r.status_code == 200, r.text
        assert len(r.json()["seatbid"][0]["bid"]) == 2  # both decided as live ones
    assert _state(rt) == before
    assert recorded == []
    assert rt.decisions.explain("ortb-t2") is not None  # the decision log keeps it
    # the same request live changes what the dry runs left alone (the check can see it)
    r = service_client.post("/openrtb2/bid", json=_two_imps(id="live"))
    assert r.status_code == 200, r.text
    assert len(r.json()["seatbid"][0]["bid"]) == 2
    after = _state(rt)
    for key in ("eligible", "caps", "placements", "sample", "rng"):
        assert after[key] != before[key], key
    assert len(recorded) == 1


def test_a_dry_runs_round_of_slice_asks_asks_nothing(service_client: TestClient,
                                                     service_runtime: Runtime) -> None:
    """On the system clock the funnel asks the pending campaigns' slices in one round
    (``ask_many``; the manual clock of the test above asks one at a time, ``admit``):
    under a dry run that round is :func:`dry_admit` for each campaign — a campaign never
    served (metered, no slice) is supposed granted, and nothing is asked or noted. Breaks
    if the round reaches the real gate (tried: ``DryGate.ask_many`` returning
    ``self._real.ask_many(...)``: the campaign's demand noted and a slice asked for)."""
    rt = service_runtime
    banner_campaign(service_client, bid_micros=2_500_000)
    campaigns = list(rt.catalog.campaigns.values())
    assert campaigns
    before = _state(rt)
    with unobserved(rt.decider):
        gate = rt.decider.gate
        assert gate.ask_many(campaigns, START, [2_500] * len(campaigns)) == [None] * len(
            campaigns)
    assert _state(rt) == before
