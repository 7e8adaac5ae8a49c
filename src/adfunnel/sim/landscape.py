"""A real bid landscape for the day simulation (issue #27): each eligible request draws a
pCTR and a competing price from the iPinYou RTB data, and a campaign bidding pCTR × its
bid per click wins when that reaches the competing price, paying it (second price)
per click.

Source: ``shared/data/ipinyou/rlbdp_click_marketprice_pctr/<advertiser>.validation.txt``
(Cai et al., "Real-time bidding by reinforcement learning in display advertising",
WSDM 2017: one line ``click market_price pCTR`` per impression, the market price the
winning price of the auction in fen per thousand impressions, the pCTR their model's;
a header line and episode-number lines in between). Rows are drawn whole, so a
request's pCTR and its market price keep their real joint distribution.

Scaling (the day simulation's volumes are scaled, :mod:`adfunnel.sim.scenarios`): the
market price is real, converted exactly from fen per mille to micros per impression
(``fen × 10_000 ÷ 1000 = 10 × fen``); the pCTR is the row's × ``pctr_scale`` (capped at
1), so that a day's clicks are counted in thousands rather than tens. Clicks happen with
that pCTR (the simulation's own draw): pCTR is calibrated by construction.

The auction is pure (:func:`auction`): no I/O, integer micros.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from adfunnel.data import data_dir
from adfunnel.money import MICROS_PER_FEN

#: Micros per impression of one fen per thousand impressions (exact).
MICROS_PER_FEN_CPM = MICROS_PER_FEN // 1000
#: The advertiser whose landscape the ``auto-bidding`` scenario draws from: its market
#: price and pCTR are nearly independent (correlation 0.005), its pCTRs spread over two
#: decades (10th percentile 7e-5, 99th 1.2e-3).
DEFAULT_ADVERTISER = "1458"


@dataclass(frozen=True)
class Landscape:
    """Rows of the data: ``market_micros`` (int64, micros per impression, the competing
    price) and ``pctr`` (float64, probability of a click, scaled)."""

    market_micros: np.ndarray
    pctr: np.ndarray

    def __len__(self) -> int:
        return len(self.pctr)

    def draw(self, rng: np.random.Generator, n: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` requests: (pCTR, competing price in micros per impression, clicked),
        rows drawn whole with replacement, clicked with probability pCTR."""
        idx = rng.integers(0, len(self.pctr), size=n)
        pctr = self.pctr[idx]
        return pctr, self.market_micros[idx], rng.random(n) < pctr


def parse_rows(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``(market price in fen per mille, raw pCTR)`` of every ``click price pCTR`` line of
    a validation file; the header and the episode-number lines are skipped."""
    prices, pctrs = [], []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        prices.append(int(parts[1]))
        pctrs.append(float(parts[2]))
    return np.array(prices, dtype=np.int64), np.array(pctrs, dtype=np.float64)


@cache
def load_landscape(advertiser: str = DEFAULT_ADVERTISER, pctr_scale: float = 50.0,
                   root: Path | None = None) -> Landscape:
    """The landscape of ``advertiser`` (module docstring for the units and the scaling).

    Raises:
        FileNotFoundError: the data is not there.
    """
    path = (root or data_dir()) / "ipinyou" / "rlbdp_click_marketprice_pctr" / (
        f"{advertiser}.validation.txt")
    fen, pctr = parse_rows(path.read_text())
    return Landscape(fen * MICROS_PER_FEN_CPM, np.minimum(1.0, pctr * pctr_scale))


def auction(pctr: np.ndarray, market_micros: np.ndarray, bid_per_click_micros: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Second-price auctions of one campaign bidding pCTR × ``bid_per_click_micros`` per
    impression against competing prices ``market_micros`` (micros per impression).

    Returns ``(won, price_per_click)``: ``won`` where the bid per impression is ≥ the
    competing price; the price per click (int64 micros) is the competing price in the
    bid's unit, ⌈market ÷ pCTR⌉, capped at the bid (as the GSP's CPC path,
    :mod:`adfunnel.auction.gsp`). A pCTR of 0 never wins.

    Invariants (property-tested): 0 ≤ price ≤ bid; a won price × pCTR ≥ market − 1
    micro (the cap only trims the rounding); ``won`` is non-decreasing in the bid.
    """
    bid = int(bid_per_click_micros)
    p = np.asarray(pctr, dtype=np.float64)
    m = np.asarray(market_micros, dtype=np.int64)
    won = (p > 0) & (p * bid >= m) & (bid > 0)
    raw = np.zeros(len(p))
    np.divide(m, p, out=raw, where=won)  # won: m ÷ pCTR ≤ bid, no overflow
    price = np.minimum(bid, np.maximum(0.0, np.ceil(raw - 1e-9))).astype(np.int64)
    return won, np.where(won, price, 0)


def ceiling_charges(pctr: np.ndarray, market_micros: np.ndarray, clicked: np.ndarray,
                    bid_per_click_micros: int) -> tuple[int, int]:
    """``(billed micros, clicks)`` these requests would bring a campaign bidding
    ``bid_per_click_micros`` in every one of them (no pacing, no budget): for an
    automatic campaign its value v, i.e. λ = 1. From the simulation's own draws."""
    won, price = auction(pctr, market_micros, bid_per_click_micros)
    hit = won & clicked
    return int(price[hit].sum()), int(hit.sum())
