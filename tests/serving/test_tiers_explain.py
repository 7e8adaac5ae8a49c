"""Reasons and explain with direct lines: ``goal_met``, ``ahead_of_plan`` and
``share_not_drawn`` counted per code on the columnar path and kept per candidate on the
explain (reference) path; the tier of each filled slot in the decision log's record and
an explain answer, and nothing new in an ordinary answer."""

from __future__ import annotations

import json
import random
from datetime import datetime

import msgspec
import numpy as np

from adfunnel.budget.gate import ASK
from adfunnel.campaigns.model import Campaign
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision_log import DecisionLog
from adfunnel.serving.request import SelectResponse, decode_request, encode
from adfunnel.serving.tiers import AHEAD_OF_PLAN, GOAL_MET, SHARE_NOT_DRAWN
from tests.serving.test_tiers_golden import NOW, ScriptedGate, world_of

CASE = {
    "campaigns": [
        {"key": "S", "priority": "sponsorship", "share": 0.5, "bid_type": "CPM",
         "bid_micros": 4000000},
        {"key": "G", "priority": "guaranteed", "bid_type": "CPM", "bid_micros": 1500000,
         "p": 0.0},
        {"key": "H", "priority": "guaranteed", "bid_type": "CPM", "bid_micros": 1200000,
         "spent": True},
        {"key": "K", "priority": "guaranteed", "bid_type": "CPM", "bid_micros": 1000000},
        {"key": "A", "bid_type": "CPM", "bid_micros": 3000000},
    ],
    "placement": {"house_ad": ["banner", 728, 90]},
}
BODY = {"user": {"key": "u1"}, "placement": {"id": "feed"},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250},
                  {"id": "s2", "position": 2, "width": 300, "height": 250},
                  {"id": "s3", "position": 3, "width": 728, "height": 90}]}


def _decider() -> ColumnarDecider:
    catalog, gate, _, _ = world_of(CASE)
    return ColumnarDecider(catalog, gate, SmoothedCtr(), ManualClock(NOW), b"k" * 32,
                           rng=random.Random(2))  # seed 2: S not drawn


def test_the_columnar_path_counts_the_tiers_reasons() -> None:
    d = _decider().decide(decode_request(msgspec.json.encode(BODY)), "r0",
                          monotonic_ms() + 60_000)
    assert d.reason_counts == {SHARE_NOT_DRAWN: 1, AHEAD_OF_PLAN: 1, GOAL_MET: 1}
    assert d.slot_tiers() == {"s1": "guaranteed", "s2": "auction", "s3": "house"}
    assert [(p.campaign.name, p.tier) for p in d.placed] == [("K", "guaranteed"),
                                                           ("A", "auction")]


def test_explain_keeps_each_candidates_reason_and_each_slots_tier() -> None:
    req = decode_request(msgspec.json.encode({**BODY, "explain": True}))
    d = _decider().decide(req, "r0", monotonic_ms() + 60_000)
    assert d.reason_counts is None  # the reference path: every candidate's reason
    assert {r.campaign_id: r.reason for r in d.rejections} == {
        1: SHARE_NOT_DRAWN, 2: AHEAD_OF_PLAN, 3: GOAL_MET}
    log = DecisionLog()
    log.append(d)
    record = log.explain("r0")
    assert record is not None
    assert record["tiers"] == {"s1": "guaranteed", "s2": "auction", "s3": "house"}
    assert [(p["campaign_id"], p["tier"], p["price_micros"]) for p in record["placed"]] == [
        (4, "guaranteed", 1_000_000), (5, "auction", 0)]
    assert {r["reason"] for r in record["rejections"]} == {SHARE_NOT_DRAWN, AHEAD_OF_PLAN,
                                                          GOAL_MET}
    json.dumps(record)  # JSON-ready


def test_an_ordinary_answer_does_not_change() -> None:
    """``tiers`` is only in explain answers: the wire form of an answer is as before."""
    body = json.loads(encode(SelectResponse("r", [], 3)))
    assert body == {"request_id": "r", "ads": [], "index_version": 3}
    with_tiers = json.loads(encode(SelectResponse("r", [], 3, tiers={"s1": "house"})))
    assert with_tiers["tiers"] == {"s1": "house"}



class _TogetherGate(ScriptedGate):
    """A bulk gate whose asks share one round (as the embedded service on the system
    clock): every campaign is ASK in bulk; auction campaigns wait until they can win
    (``ask_many``), direct lines are asked at once (``admit``)."""

    asks_together = True
    generation = 0

    def __init__(self) -> None:
        super().__init__(set(), {})
        self.admitted: list[int] = []
        self.asked_many: list[int] = []

    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        self.admitted.append(campaign.id)
        return None

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        return np.full(len(campaign_ids), ASK, dtype=np.int8)

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        return np.ones(len(campaign_ids))

    def ask_many(self, campaigns: list[Campaign], now: datetime,
                 charges: list[int]) -> list[str | None]:
        self.asked_many += [c.id for c in campaigns]
        return [None] * len(campaigns)


def test_direct_lines_are_asked_at_once_where_auction_campaigns_wait() -> None:
    case = {"campaigns": [
        {"key": "S", "priority": "sponsorship", "share": 1.0, "bid_type": "CPM",
         "bid_micros": 4000000},
        {"key": "A", "bid_type": "CPM", "bid_micros": 3000000}]}
    catalog, _, _, _ = world_of(case)
    gate = _TogetherGate()
    decider = ColumnarDecider(catalog, gate, SmoothedCtr(), ManualClock(NOW), b"k" * 32,
                              rng=random.Random(1))
    body = {**BODY, "slots": BODY["slots"][:2]}
    d = decider.decide(decode_request(msgspec.json.encode(body)), "r1",
                       monotonic_ms() + 60_000)
    assert [(p.campaign.id, p.tier) for p in d.placed] == [(1, "sponsorship"), (2, "auction")]
    assert gate.admitted == [1] and gate.asked_many == [2]
