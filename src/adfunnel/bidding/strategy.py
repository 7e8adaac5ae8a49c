"""The bid of automatic strategies per auction: the impression's value divided by λ. Pure.

DESIGN.md §How ads are sold, *Automatic bidding*: bid = value × pCTR (× pCVR) ÷ λ, λ ≥ 1
controlled per campaign toward the spend plan (:mod:`adfunnel.pacing.bid_multiplier`).
In a second-price auction the value of an impression to the advertiser is its
expected value, pCTR × the value of a click (× pCVR for a conversion), and the
optimal bid under a budget is linear in it: value ÷ λ with λ the budget constraint's
dual multiplier (Zhang, Yuan, Wang, "Optimal real-time bidding for display
advertising", KDD 2014, §4 with a linear winning function; Balseiro & Gur, "Learning
in repeated auctions with budgets: regret minimization and equilibrium", Management
Science 2019: bid = v ÷ (1 + μ), μ ≥ 0 the dual variable, λ = 1 + μ here).

Money is integer micros; probabilities are floats in [0, 1].
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Action = Literal["click", "conversion"]

#: The smallest bid an automatic strategy makes, micros: a bid of 0 would be no bid.
MIN_BID_MICROS = 1


def value_per_impression_micros(
    pctr: float, pcvr: float, value_per_action_micros: int, action: Action
) -> float:
    """Expected value of one impression to the advertiser, micros (a float: it is a
    probability times money, and is rounded only once, in the bid).

    ``action == "click"``: pCTR × v; ``"conversion"``: pCTR × pCVR × v (v the value of
    one click or conversion, micros). Probabilities outside [0, 1] are clamped.

    Raises:
        ValueError: an unknown action or a negative value.
    """
    if value_per_action_micros < 0:
        raise ValueError("value_per_action_micros must be >= 0")
    p = min(1.0, max(0.0, pctr))
    if action == "click":
        return p * value_per_action_micros
    if action == "conversion":
        return p * min(1.0, max(0.0, pcvr)) * value_per_action_micros
    raise ValueError(f"unknown action {action!r}")


def auto_bid_micros(value_micros: float, lam: float) -> int:
    """The automatic bid ⌊value ÷ λ⌋ in integer micros, at least ``MIN_BID_MICROS`` and
    never above the value (λ < 1 is read as 1). A value under one micro bids 0 (no bid):
    nothing worth a micro is worth buying.

    Invariants (property-tested): ``0 ≤ bid ≤ value``; non-decreasing in the value,
    non-increasing in λ.
    """
    if not value_micros >= MIN_BID_MICROS:
        return 0
    bid = math.floor(value_micros / max(1.0, lam))
    return max(MIN_BID_MICROS, min(bid, math.floor(value_micros)))


def auto_bids_micros(values_micros: np.ndarray, lams: np.ndarray) -> np.ndarray:
    """:func:`auto_bid_micros` element by element (int64 array; equal to it, tested): for
    many campaigns, or replayed episodes, at once."""
    values = np.asarray(values_micros, dtype=np.float64)
    bids = np.floor(values / np.maximum(1.0, lams))
    bids = np.maximum(MIN_BID_MICROS, np.minimum(bids, np.floor(values)))
    return np.where(values >= MIN_BID_MICROS, bids, 0).astype(np.int64)
