"""Runs every tier scenario in tests/serving/golden_tiers/*.json through both deciders (no
code per case): the per-candidate reference path, whose explain keeps every candidate's
reason, and the columnar path, which must agree with it (winners, tiers, prices, reason
counts). A case::

    {"description": "...", "seed": 1, "request_id": "r1",
     "placement": {"reserve_cpm_micros": 0, "house_ad": [format, width, height]},
     "campaigns": [{"key": "S", "priority": "sponsorship", "share": 0.5,
                    "bid_type": "CPM", "bid_micros": 4000000, "advertiser": "x",
                    "ads": [["banner", 300, 250, quality_micros]], "p": 1.0,
                    "spent": false}],
     "supply": {"G1": 10},               (guaranteed lines' eligible requests seen before)
     "request": {an ad request body},
     "expect": {"wins": [{"slot_id": "s1", "campaign": "S", "tier": "sponsorship",
                          "price_micros": 4000000}],
                "tiers": {"s1": "sponsorship", "s2": "house"},
                "rejections": {"A": "outranked"}}}

Campaign ``key``s name rejections (an ad past a campaign's first is ``KEY#k``);
``priority`` defaults to auction, ``advertiser`` to the key, ``ads`` to one 300x250
banner, ``p`` (the pacing rate the gate reports) to 1, ``spent`` (the gate refuses for
budget) to false. ``price_micros`` is in the bid's unit (per mille for CPM). ``seed``
(default 1) seeds the deciders' source, whose draw for the decision fixes its sponsorship
share draws, pacing coins and tie-breaks; ``request_id`` (default ``r1``) only names it.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from adfunnel.budget.gate import BUDGET_EXHAUSTED, Served
from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    BidType,
    Campaign,
    CampaignStatus,
    Goal,
    GoalMetric,
    HouseAd,
    Objective,
    Placement,
    Priority,
    ReviewState,
)
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.index import ScanIndex
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.reference import ReferenceDecider
from adfunnel.serving.request import decode_request

CASES = sorted((Path(__file__).parent / "golden_tiers").glob("*.json"))
NOW = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)


class ScriptedGate:
    """A spend gate whose answers the case gives: campaigns refused for budget, and each
    campaign's pacing rate."""

    def __init__(self, spent: set[int], p: dict[int, float]) -> None:
        self.spent, self.p = spent, p

    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        return BUDGET_EXHAUSTED if campaign.id in self.spent else None

    def pacing_rate(self, campaign_id: int) -> float:
        return self.p.get(campaign_id, 1.0)

    def record_served(self, served: Served) -> None:
        return None

    def record_billed(self, campaign_id: int, day: date, billed_micros: int,
                      impression_id: str, settles: bool) -> None:
        return None


def _campaign(cid: int, adv: int, raw: dict[str, Any]) -> Campaign:
    priority = Priority(raw.get("priority", "auction"))
    goal = None
    if priority is Priority.SPONSORSHIP:
        goal = Goal(GoalMetric.SHARE, share=raw.get("share", 1.0))
    elif priority is Priority.GUARANTEED:
        goal = Goal(GoalMetric(raw.get("metric", "impressions")), total=raw.get("total", 1000))
    return Campaign(cid, adv, raw["key"], Objective.IMPRESSIONS, BidType(raw["bid_type"]),
                    raw["bid_micros"], 10**9, "UTC", date(2026, 7, 1),
                    flight_end=date(2026, 7, 31) if priority is Priority.GUARANTEED else None,
                    priority=priority, goal=goal,
                    status=CampaignStatus(raw.get("status", "active")))


def world_of(case: dict[str, Any]) -> tuple[Catalog, ScriptedGate, dict[int, str], dict[str, int]]:
    """The case's catalogue and gate; ad id -> its name in ``rejections``; key -> id."""
    advertisers: dict[str, int] = {}
    campaigns, ads, names, ids = [], [], {}, {}
    spent, p = set(), {}
    for i, raw in enumerate(case["campaigns"]):
        cid = i + 1
        adv = advertisers.setdefault(raw.get("advertiser", raw["key"]), len(advertisers) + 1)
        campaigns.append(_campaign(cid, adv, raw))
        ids[raw["key"]] = cid
        for k, (fmt, w, h, *quality) in enumerate(raw.get("ads", [["banner", 300, 250]])):
            aid = cid * 10 + k
            ads.append(Ad(aid, cid, "https://x.test/", f"cr/{aid}", fmt, w, h,
                          ReviewState.APPROVED, quality_micros=quality[0] if quality else 0))
            names[aid] = raw["key"] if k == 0 else f"{raw['key']}#{k}"
        if raw.get("spent"):
            spent.add(cid)
        if "p" in raw:
            p[cid] = raw["p"]
    pl = case.get("placement", {})
    house = pl.get("house_ad")
    placement = Placement("feed", "feed", reserve_cpm_micros=pl.get("reserve_cpm_micros", 0),
                          house_ad=HouseAd("h.png", "https://h.test/", *house) if house else None)
    catalog = Catalog(ScanIndex())
    catalog.load(Snapshot([Advertiser(a, n) for n, a in advertisers.items()], campaigns, ads,
                          0, [placement]))
    return catalog, ScriptedGate(spent, p), names, ids


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_tiers(path: Path) -> None:
    case = json.loads(path.read_text())
    req = decode_request(msgspec.json.encode(case["request"]))
    decisions = []
    for columnar in (False, True):
        catalog, gate, names, ids = world_of(case)
        kwargs = {"rng": random.Random(case.get("seed", 1))}
        clock = ManualClock(NOW)
        decider = (ColumnarDecider if columnar else ReferenceDecider)(
            catalog, gate, SmoothedCtr(), clock, b"k" * 32, **kwargs)
        for key, n in case.get("supply", {}).items():
            for _ in range(n):
                decider.supply.observe([ids[key]])
        decisions.append(decider.decide(req, case.get("request_id", "r1"),
                                        monotonic_ms() + 60_000))
    ref, col = decisions
    by_id = {v: k for k, v in ids.items()}
    wins = [{"slot_id": p.win.slot_id, "campaign": by_id[p.campaign.id], "tier": p.tier,
             "price_micros": p.win.price_micros} for p in ref.placed]
    expect = case["expect"]
    assert wins == expect["wins"]
    assert ref.slot_tiers() == expect["tiers"]
    assert {names[r.ad_id]: r.reason for r in ref.rejections} == expect["rejections"]
    # the columnar path: the same answer, and the same reasons counted
    assert [(p.win.slot_id, p.ad.id, p.tier, p.win.price_micros) for p in col.placed] == [
        (p.win.slot_id, p.ad.id, p.tier, p.win.price_micros) for p in ref.placed]
    assert col.slot_tiers() == ref.slot_tiers()
    assert col.reason_counts == dict(Counter(r.reason for r in ref.rejections))


def test_cases_exist() -> None:
    assert len(CASES) >= 6
