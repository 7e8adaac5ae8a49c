"""Run-of-network campaigns for the replay: ``adfunnel replay --catalogue N``.

The nine iPinYou advertisers give a request at most nine candidates, fewer than the
pre-rank keeps (200), so the pre-rank's recall cannot be measured on them: every
candidate is kept. ``--catalogue N`` adds N CPC campaigns of one banner each, in the
sizes the log's slots have (as often as they occur), most untargeted and the others
targeting a few of the log's regions, bidding around the real CPC advertisers' bid
(log-normal, σ 0.5). Their budgets do not bind. They compete with the nine in every
auction, so a request meets hundreds of candidates and the pre-rank cuts.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from adfunnel.sim.ipinyou import LogRow

#: Campaigns per catalogue advertiser.
CAMPAIGNS_PER_ADVERTISER = 20
#: Share of catalogue campaigns that target some of the log's regions (the rest: all).
REGION_TARGETED = 0.4
#: Daily budget of a catalogue campaign, micros (¥100: never binds at this traffic).
DAILY_BUDGET_MICROS = 100_000_000


@dataclass(frozen=True)
class CatalogueCampaign:
    """One catalogue campaign: its index, CPC bid (micros per click), targeting (None:
    everyone) and its one banner's size."""

    index: int
    bid_micros: int
    targeting: dict[str, Any] | None
    width: int
    height: int

    def campaign_body(self, advertiser_id: int, flight_start: str) -> dict[str, Any]:
        """The ``POST /v1/campaigns`` body."""
        body: dict[str, Any] = {
            "advertiser_id": advertiser_id, "name": f"catalogue-{self.index}",
            "objective": "clicks", "bid_type": "CPC", "bid_micros": self.bid_micros,
            "daily_budget_micros": DAILY_BUDGET_MICROS, "time_zone": "Asia/Shanghai",
            "flight_start": flight_start, "pacing_mode": "accelerated",
            # the replay fires only /i (iPinYou records no viewability): bill on render
            "billable_event": "rendered",
        }
        if self.targeting is not None:
            body["targeting"] = self.targeting
        return body

    def ad_body(self) -> dict[str, Any]:
        """The ``POST /v1/campaigns/{id}/ads`` body."""
        return {"landing_url": f"https://catalogue{self.index}.example/landing",
                "creative_ref": f"catalogue/{self.index}.png", "format": "banner",
                "width": self.width, "height": self.height}


def catalogue(n: int, rows: list[LogRow], cpc_bid_micros: int, seed: int
              ) -> list[CatalogueCampaign]:
    """``n`` catalogue campaigns drawn from ``rows``' slot sizes and regions, bidding
    log-normally around ``cpc_bid_micros`` (module docstring). Deterministic in ``seed``.

    Raises:
        ValueError: ``n`` < 0, ``cpc_bid_micros`` < 1, or ``n`` > 0 without rows.
    """
    if n < 0 or cpc_bid_micros < 1:
        raise ValueError("n must be >= 0 and cpc_bid_micros >= 1")
    if n and not rows:
        raise ValueError("a catalogue is drawn from log rows: none given")
    rng = random.Random(seed)
    sizes = Counter((r.width, r.height) for r in rows)
    size_list = sorted(sizes)
    size_weights = [sizes[s] for s in size_list]
    regions = sorted({f"CN-{r.region}" for r in rows})
    out = []
    for i in range(n):
        width, height = rng.choices(size_list, size_weights)[0]
        targeting = None
        if rng.random() < REGION_TARGETED:
            chosen = sorted(rng.sample(regions, min(len(regions), rng.randint(3, 12))))
            targeting = {"attr": "geo.region", "in": chosen}
        bid = max(1, round(cpc_bid_micros * math.exp(rng.gauss(0.0, 0.5))))
        out.append(CatalogueCampaign(i + 1, bid, targeting, width, height))
    return out
