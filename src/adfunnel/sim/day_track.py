"""What the day simulation records of one campaign (:class:`Track`), and the serving
assumptions its traffic and its report share: the render rate and a won request's
expected cost (:func:`mean_expected`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from adfunnel.campaigns.model import BidType, Campaign
from adfunnel.sim.scenarios import SimCampaign

#: Share of CPM serves whose impression renders (an unrendered one bills nothing).
RENDER_RATE = 0.97


@dataclass
class Track:
    """What the simulation observes of one campaign."""

    sc: SimCampaign
    campaign: Campaign
    minute_mult: list[float]  # 1440 multipliers (mean 1) by local minute
    rate_mean: float  # eligible requests per second at multiplier 1
    steps: list[tuple[float, float, str, float, int, int]] = field(default_factory=list)
    spend_events: list[tuple[float, int]] = field(default_factory=list)  # (occurred, billed)
    billed: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    # the charge the simulation sent of every event the ledger made billable, by local
    # day, whatever its budget cap billed of it: what would be billed without the cap
    charged: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    last_serve: dict[date, float] = field(default_factory=dict)
    serves: int = 0
    # eligible requests by local day (every request the campaign could take part in at
    # p = 1 on a server whose store has it active): the basis of potential_micros
    eligible: dict[date, int] = field(default_factory=lambda: defaultdict(int))
    # status of the campaign in each ad server's store (the serving path's filter)
    server_active: list[bool] = field(default_factory=list)
    paused_at: float | None = None
    # late-click scenarios, the simulation's own ledger: serves still able to bill,
    # imp -> (serve time, expected), the time each one's billable event reached the
    # ledger, what the events it sent had billed by local day at the last billed feed,
    # and the worst shortfall seen
    pending: dict[str, tuple[float, int]] | None = None
    settled_at: dict[str, float] = field(default_factory=dict)
    billed_at_feed: dict[date, int] = field(default_factory=dict)
    committed_shortfall: int = 0
    after_exhausted_s: float | None = None  # latest admit after the budget ran out
    after_pause_s: float | None = None  # latest admit after a pause
    # real-landscape campaigns: their own random source for requests, rows and clicks
    # (the same traffic in every run of a seed, whatever the controllers do), what the
    # requests would bill at the campaign's ceiling bid (λ = 1) by local day as
    # [billed, clicks], the λ its bids used (lowest, highest) and λ at each control step
    rng: np.random.Generator | None = None
    ceiling: dict[date, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    lam_used: list[float] = field(default_factory=list)
    lam_steps: list[tuple[float, float]] = field(default_factory=list)


def mean_expected(c: SimCampaign) -> float:
    """Expected cost of one won request as the serving path records it, micros."""
    price = c.bid_micros * (c.price_frac[0] + c.price_frac[1]) / 2.0
    if c.bid_type is BidType.CPM:
        return price / 1000.0
    if c.bid_type is BidType.CPC:
        return price * c.pctr
    return price * c.pctr * c.pcvr
