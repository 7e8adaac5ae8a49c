"""A direct line is retrieved ahead of every auction ad. Retrieval stops after the best
``first_limit`` ads by static score (800), so a takeover sold at a CPM of 1.00 among 900
auction ads bidding 5.00 was never retrieved by the columnar decider: the auction took
every request the sponsorship had bought (0 of 20 served; the reference path, which
retrieves 10,000, served it 20 of 20). Mutation seen red: the direct lines' retrieval
offset removed from ``Catalog._entries``."""

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
    Goal,
    GoalMetric,
    Objective,
    Placement,
    Priority,
)
from adfunnel.clock import FixedClock, monotonic_ms
from adfunnel.prediction.smoothed import SmoothedCtr
from adfunnel.serving.catalog import Catalog, Snapshot
from adfunnel.serving.decider import FIRST_LIMIT, ColumnarDecider
from adfunnel.serving.request import PlacementIn, SelectRequest, SlotIn, UserIn

NOW = datetime(2026, 6, 10, 14, 30, tzinfo=UTC)


@pytest.mark.parametrize("tier", ["sponsorship", "guaranteed"])
def test_a_takeover_is_served_among_more_auction_ads_than_retrieval_keeps(tier: str) -> None:
    if tier == "sponsorship":
        takeover = Campaign(1, 1, "takeover", Objective.IMPRESSIONS, BidType.CPM, 1_000_000,
                            10**12, "UTC", date(2026, 1, 1), priority=Priority.SPONSORSHIP,
                            goal=Goal(GoalMetric.SHARE, share=1.0))
    else:  # a guaranteed line is retrieved ahead of the auction too
        takeover = Campaign(1, 1, "line", Objective.IMPRESSIONS, BidType.CPM, 1_000_000,
                            10**12, "UTC", date(2026, 1, 1), date(2026, 12, 31),
                            priority=Priority.GUARANTEED,
                            goal=Goal(GoalMetric.IMPRESSIONS, total=10**9))
    campaigns, ads = [takeover], [Ad(1, 1, "https://x.test/", "cr/1", "banner", 300, 250)]
    for i in range(2, FIRST_LIMIT + 102):  # more auction ads, all bidding higher
        campaigns.append(Campaign(i, 2 + i % 50, f"c{i}", Objective.IMPRESSIONS, BidType.CPM,
                                  5_000_000, 10**12, "UTC", date(2026, 1, 1)))
        ads.append(Ad(i, i, "https://x.test/", f"cr/{i}", "banner", 300, 250))
    catalog = Catalog.shaped()
    catalog.load(Snapshot([Advertiser(a, f"a{a}") for a in range(1, 52)], campaigns, ads, 0,
                          [Placement("feed", "feed")]))
    decider = ColumnarDecider(catalog, LocalSpendGate(), SmoothedCtr(0.001, 1000.0),
                              FixedClock(NOW), b"k" * 32, rng=random.Random(3))
    req = SelectRequest(user=UserIn(key="u1"), placement=PlacementIn(id="feed"),
                        slots=[SlotIn(id="s1", position=1, width=300, height=250)])
    for k in range(20):
        placed = decider.decide(req, f"r{k}", monotonic_ms() + 60_000).placed
        assert [(p.campaign.id, p.tier) for p in placed] == [(1, tier)]
