"""Runs every funnel scenario in tests/serving/golden_placements/*.json (no code per case).

The auction goldens (tests/auction/golden) take the reserve as given; configured
reserves, allowed sizes and house ads are applied by the funnel, so these cases run a
real decider over a store on in-memory SQLite. A case::

    {"description": "...",
     "placement": {PlacementIn fields} or null,
     "campaigns": [{"key": "A", "bid_micros": 3000000, "quality_micros": 0,
                    "ad": {"format": "banner", "width": 300, "height": 250}}],   (CPM)
     "request": {an ad request body},
     "expect": {"wins": [{"slot_id": "s1", "campaign": "A", "price_micros": 2500000}],
                "house_slots": ["s2"], "rejections": {"B": "below_reserve"}}}

``price_micros`` is in the bid's unit (per mille for CPM).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from adfunnel.campaigns.model import BidType, Objective
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.serving.request import decode_request
from adfunnel.settings import load_settings

CASES = sorted((Path(__file__).parent / "golden_placements").glob("*.json"))
START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="service")
    rt = build_runtime(settings, ManualClock(START), seed=1, feed=False)
    yield rt
    rt.close()


def _setup(rt: Runtime, case: dict[str, Any]) -> dict[int, str]:
    """Store the case's placement and campaigns; returns campaign id -> key."""
    if case["placement"] is not None:
        rt.store.create_placement(**case["placement"])
    keys: dict[int, str] = {}
    for c in case["campaigns"]:
        adv = rt.store.create_advertiser(c["key"])
        camp = rt.store.create_campaign(
            advertiser_id=adv.id, name=c["key"], objective=Objective.IMPRESSIONS,
            bid_type=BidType.CPM, bid_micros=c["bid_micros"], daily_budget_micros=10**9,
            time_zone="UTC", flight_start=date(2026, 7, 1),
        )
        rt.store.create_ad(campaign_id=camp.id, landing_url="https://x.test/", creative_ref="c",
                           quality_micros=c.get("quality_micros", 0), **c["ad"])
        keys[camp.id] = c["key"]
    return keys


@pytest.mark.slow
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_funnel(runtime: Runtime, path: Path) -> None:
    case = json.loads(path.read_text())
    keys = _setup(runtime, case)
    expected = case["expect"]["rejections"]
    for explain in (False, True):  # the columnar path, then the reference path
        req = decode_request(json.dumps({**case["request"], "explain": explain}).encode())
        d = runtime.decider.decide(req, "golden", monotonic_ms() + 10_000)
        wins = [
            {"slot_id": p.win.slot_id, "campaign": keys[p.campaign.id],
             "price_micros": p.win.price_micros}
            for p in d.placed
        ]
        assert wins == case["expect"]["wins"]
        assert [h.slot_id for h in d.house] == case["expect"].get("house_slots", [])
        if explain:  # every candidate's reason
            assert {keys[r.campaign_id]: r.reason for r in d.rejections} == expected
        else:  # counted per reason
            assert d.rejection_counts() == dict(Counter(expected.values()))


def test_cases_exist() -> None:
    assert len(CASES) >= 5
