"""The iPinYou auctions of Cai et al. (WSDM 2017) and the linear bidding they measure against.

Cai, Ren, Zhang, Malialis, Wang, Yu, Guo, "Real-Time Bidding by Reinforcement Learning in
Display Advertising", WSDM 2017 (data and code: github.com/han-cai/rlb-dp). Per advertiser:
``<adv>.validation.txt`` holds a header ``N T`` then 100 episodes, each its number and T
lines ``click market_price pCTR``; ``<adv>.train-info.txt`` the CPM and average CTR. Prices
are integers in the data's unit (CPM, so one auction's price ≤ 300). An auction is won
when the bid is at least the market price.

Linear bidding ("Lin"), exactly as the study defines it: bid = min(⌊pCTR × b0 ÷ average
CTR⌋, 300, remaining budget), b0 ∈ {2, 4, …, 300} chosen for the most clicks on the
training episodes; the episode budget is ⌊CPM ÷ 1000 × c0 × T⌋.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ADVERTISERS = ("1458", "2259", "2261", "2821", "2997", "3358", "3386", "3427", "3476")
C0S = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
#: Lin's highest bid and its b0 grid (the study's).
LIN_MAX_BID = 300
LIN_B0 = np.arange(2, 301, 2)
FOLDER = "ipinyou/rlbdp_click_marketprice_pctr"


@dataclass(frozen=True, slots=True)
class Episodes:
    """Episodes of one advertiser as (T, episodes) arrays (time first: a replay steps
    through t): ``price`` int64, ``pctr`` float64, ``click`` bool."""

    price: np.ndarray
    pctr: np.ndarray
    click: np.ndarray

    @property
    def count(self) -> int:
        return self.price.shape[1]

    @property
    def length(self) -> int:
        return self.price.shape[0]

    def select(self, sl: slice) -> Episodes:
        """Some of the episodes (e.g. ``slice(0, 50)``: the training half)."""
        return Episodes(self.price[:, sl], self.pctr[:, sl], self.click[:, sl])


@dataclass(frozen=True, slots=True)
class Advertiser:
    """One advertiser's episodes and its training figures (CPM in price units, CTR)."""

    name: str
    cpm: float
    avg_ctr: float
    episodes: Episodes

    def budget(self, c0: float) -> int:
        """The episode budget ⌊CPM ÷ 1000 × c0 × T⌋, price units."""
        return math.floor(self.cpm / 1000 * c0 * self.episodes.length)


def load(folder: Path, name: str) -> Advertiser:
    """Read one advertiser's validation episodes and training figures.

    Raises:
        ValueError: the file is not N T, then episodes of T lines of three fields.
    """
    info = {}
    for line in (folder / f"{name}.train-info.txt").read_text().splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    tokens = (folder / f"{name}.validation.txt").read_text().split()
    t = int(tokens[1])
    body = np.array(tokens[2:], dtype=object)
    if len(body) % (1 + 3 * t):
        raise ValueError(f"{name}.validation.txt: not episodes of {t} auctions")
    rows = body.reshape(-1, 1 + 3 * t)
    if [int(x) for x in rows[:, 0]] != list(range(1, len(rows) + 1)):
        raise ValueError(f"{name}.validation.txt: episodes not numbered 1..n")
    fields = rows[:, 1:].reshape(len(rows), t, 3)
    episodes = Episodes(fields[:, :, 1].astype(np.int64).T.copy(),
                        fields[:, :, 2].astype(np.float64).T.copy(),
                        fields[:, :, 0].astype(np.int64).T.copy() > 0)
    return Advertiser(name, float(info["CPM"]), float(info["avg ctr"]), episodes)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Totals per lane (one lane = one episode under one setting): ``clicks``,
    ``impressions``, ``spend`` (price units) as int64 arrays; ``expected_clicks`` the sum
    of the pCTR of the impressions won (float64; None where not kept)."""

    clicks: np.ndarray
    impressions: np.ndarray
    spend: np.ndarray
    expected_clicks: np.ndarray | None = None


def lin_replay(ep: Episodes, avg_ctr: float, budget: int, b0: np.ndarray) -> Outcome:
    """Lin over every episode for every b0 (lanes: b0-major, episode-minor)."""
    n_b0, e = len(b0), ep.count
    b0_lane = np.repeat(np.asarray(b0, dtype=np.float64), e)
    idx = np.tile(np.arange(e), n_b0)
    spent = np.zeros(len(idx), np.int64)
    clicks = np.zeros(len(idx), np.int64)
    imps = np.zeros(len(idx), np.int64)
    for t in range(ep.length):
        price, click = ep.price[t][idx], ep.click[t][idx]
        bid = np.floor(ep.pctr[t][idx] * b0_lane / avg_ctr).astype(np.int64)
        bid = np.minimum(np.minimum(bid, LIN_MAX_BID), budget - spent)
        win = bid >= price
        spent += np.where(win, price, 0)
        imps += win
        clicks += win & click
    return Outcome(clicks, imps, spent)


def best_lin_b0(ep: Episodes, avg_ctr: float, budget: int) -> int:
    """The b0 of the grid with the most clicks on ``ep`` (the lowest among ties)."""
    out = lin_replay(ep, avg_ctr, budget, LIN_B0)
    per_b0 = out.clicks.reshape(len(LIN_B0), ep.count).sum(axis=1)
    return int(LIN_B0[int(np.argmax(per_b0))])


def spend_matching_scale(ep: Episodes, budget: int) -> float:
    """The bid landscape's feed-forward: the smallest scale s for which bidding pCTR × s
    (second price, no budget) spends the budget per episode on average over ``ep``.

    An auction is won at scale s iff pCTR × s ≥ price, i.e. s ≥ price ÷ pCTR; the mean
    spend is a step function of s, read off the sorted thresholds."""
    pctr = np.maximum(ep.pctr.ravel(), 1e-12)
    price = ep.price.ravel().astype(np.float64)
    order = np.argsort(price / pctr, kind="stable")
    thresholds = (price / pctr)[order]
    mean_spend = np.cumsum(price[order]) / ep.count
    i = int(np.searchsorted(mean_spend, budget))
    return float(thresholds[min(i, len(thresholds) - 1)])
