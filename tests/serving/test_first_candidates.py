"""Retrieval in two steps: the first ``first_limit`` ads, the rest only when too few can
serve. With ads whose pCTR (and pCVR) is the prior, a total is the static score the
index ranks by — CPA included —, so the decisions equal those of one retrieval of
``candidate_limit``."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime

import pytest

from adfunnel.budget.gate import LocalSpendGate
from adfunnel.campaigns.model import (
    Ad,
    Advertiser,
    BidType,
    Campaign,
    CampaignStatus,
    Objective,
    Placement,
)
from adfunnel.clock import FixedClock, monotonic_ms
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.decision import Decision
from adfunnel.serving.request import PlacementIn, SelectRequest, SlotIn, UserIn

NOW = datetime(2026, 6, 10, 14, 30, tzinfo=UTC)


def _catalog(seed: int, n: int, paused_best: int) -> Catalog:
    """``n`` one-ad campaigns, CPM, CPC and CPA; the ``paused_best`` best-scored are
    paused."""
    rng = random.Random(seed)
    bids = sorted((rng.randint(100_000, 5_000_000) for _ in range(n)), reverse=True)
    campaigns, ads = [], []
    for i, bid in enumerate(bids, 1):
        kind = rng.choices([BidType.CPM, BidType.CPC, BidType.CPA], [6, 3, 1])[0]
        # the same expected value per impression at the priors (pCTR 0.001, pCVR 0.01)
        per = {BidType.CPM: bid, BidType.CPC: bid, BidType.CPA: bid * 100}[kind]
        campaigns.append(Campaign(
            i, 1 + i % 7, f"c{i}", Objective.CLICKS, kind, per, 10**12, "UTC", date(2026, 1, 1),
            status=CampaignStatus.PAUSED if i <= paused_best else CampaignStatus.ACTIVE))
        ads.append(Ad(i, i, "https://x.test/", f"cr/{i}", "banner", 300, 250,
                      quality_micros=rng.choice([0, 0, 40, -40])))
    catalog = Catalog.shaped()
    catalog.load(Snapshot([Advertiser(a, f"a{a}") for a in range(1, 8)], campaigns, ads, 0,
                          [Placement("feed", "feed", reserve_cpm_micros=100_000)]))
    return catalog


def _decide(catalog: Catalog, first: int, requests: int) -> tuple[list[object], list[float]]:
    decider = ColumnarDecider(catalog, LocalSpendGate(), SmoothedCtr(0.001, 1_000.0),
                              FixedClock(NOW), b"k" * 32, rng=random.Random(3), pcvr=0.01,
                              prerank_keep=20, candidate_limit=400, first_limit=first)
    decider.timings = []
    out = []
    for i in range(requests):
        req = SelectRequest(UserIn(f"u{i}", {}), PlacementIn("feed"),
                            [SlotIn("s1", 1, 300, 250), SlotIn("s2", 2, 300, 250)])
        d: Decision = decider.decide(req, f"r{i}", monotonic_ms() + 60_000)
        decider.commit(d)
        out.append([(p.win.slot_id, p.ad.id, p.win.price_micros) for p in d.placed])
    return out, [t["candidates"] for t in decider.timings]


@pytest.mark.parametrize("paused_best", [0, 30, 90])
def test_two_retrievals_decide_as_one(paused_best: int) -> None:
    catalog = _catalog(5, 1_000, paused_best)
    one, one_n = _decide(catalog, 400, 30)
    two, two_n = _decide(catalog, 50, 30)
    assert two == one
    assert all(w for w in one)  # every page filled: the comparison is not vacuous
    assert set(one_n) == {400}
    # 50 retrieved, 20 of them servable unless the best are paused: then the rest too
    assert set(two_n) == ({50} if 50 - paused_best >= 20 else {400})
