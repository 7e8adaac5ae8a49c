"""The columnar decider against the reference path with the embedded budget service.

With the in-process service, asking for a slice mid-decision runs a report and a reply
at once, changing other campaigns' states and p while the decision goes on; the
columnar path must re-read them where the reference path would (the gate's
``generation``). Two identical runtimes, one per path, serve the same requests on the
same manual clock, committing every answer, until budgets meter and run out.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta

from adfunnel.budget.embedded import InProcessBudget
from adfunnel.campaigns.model import BidType, Objective
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.runtime.app import Runtime, build_runtime
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision import Decides, Decision
from adfunnel.serving.reference import ReferenceDecider
from adfunnel.serving.request import decode_request
from adfunnel.settings import load_settings

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
KEY = b"k" * 32


def _runtime(columnar: bool) -> tuple[Runtime, Decides]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="service")
    rt = build_runtime(settings, ManualClock(START), seed=1, feed=False)
    rng = random.Random(11)
    for k in range(24):
        adv = rt.store.create_advertiser(f"a{k % 9}")
        bid_type = BidType.CPM if k % 4 else BidType.CPC
        c = rt.store.create_campaign(
            advertiser_id=adv.id, name=f"c{k}", objective=Objective.IMPRESSIONS,
            bid_type=bid_type, bid_micros=rng.choice([800_000, 1_000_000, 1_300_000]),
            daily_budget_micros=rng.choice([3_000, 25_000, 40_000, 60_000]), time_zone="UTC",
            flight_start=date(2026, 7, 1),
        )
        for _ in range(1 + k % 2):
            rt.store.create_ad(campaign_id=c.id, landing_url="https://x.test/",
                               creative_ref="c", format="banner", width=300, height=250)
    gate = rt.gate
    assert isinstance(gate, InProcessBudget)
    cls = ColumnarDecider if columnar else ReferenceDecider
    decider = cls(rt.catalog, gate, rt.ctr, rt.clock, KEY, rng=random.Random(5),
                  eligible=gate.eligible)
    return rt, decider


def _outcome(d: Decision) -> list[tuple[object, ...]]:
    return [(p.win.slot_id, p.ad.id, p.campaign.id, p.win.price_micros,
             p.served.expected_micros) for p in d.placed]


def test_same_decisions_with_the_embedded_budget_service() -> None:
    (ref_rt, ref), (col_rt, col) = _runtime(False), _runtime(True)
    body = {"user": {"key": "u"}, "placement": {"id": "feed"},
            "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250},
                      {"id": "s2", "position": 2, "width": 300, "height": 250}]}
    req = decode_request(json.dumps(body).encode())
    filled = 0
    generations_moved = 0
    try:
        for i in range(500):
            for rt in (ref_rt, col_rt):
                assert isinstance(rt.clock, ManualClock)
                rt.clock.set(START + timedelta(seconds=2 * (i // 6)))  # spend piles up
            before = col_rt.gate.generation  # type: ignore[union-attr]
            a = ref.decide(req, f"r{i}", monotonic_ms() + 60_000)
            b = col.decide(req, f"r{i}", monotonic_ms() + 60_000)
            generations_moved += col_rt.gate.generation != before  # type: ignore[union-attr]
            assert _outcome(b) == _outcome(a), i
            ref.commit(a)
            col.commit(b)
            filled += len(a.placed)
        refusals = [rt.gate.client.refusals for rt in (ref_rt, col_rt)]  # type: ignore[union-attr]
    finally:
        ref_rt.close()
        col_rt.close()
    assert refusals[0] == refusals[1] and refusals[0]  # budgets bound, the same way
    assert filled > 100
    assert generations_moved > 0  # asks ran the service mid-decision
