"""The bid multiplier λ of automatic strategies: one control step toward the spend plan. Pure.

DESIGN.md §How ads are sold, *Automatic bidding*: bid = value × pCTR (× pCVR) ÷ λ with
λ ≥ 1 controlled per campaign toward the spend plan, in place of throttling; throttling
(the participation probability p of :mod:`adfunnel.pacing.controller`) is the fallback
once λ is at its bound. λ is the dual multiplier of the budget constraint: the optimal
budget-constrained bid is linear in the value, value ÷ λ (Zhang, Yuan, Wang, "Optimal
real-time bidding for display advertising", KDD 2014; Balseiro & Gur, "Learning in
repeated auctions with budgets", Management Science 2019, whose dual step is the
multiplicative one used here).

This is the sibling of the p controller and has its rules, mirrored (spend falls as λ
rises, so λ moves *against* p):

- λ changes by at most ±25 % per step and stays in ``[1, LAMBDA_MAX]``;
- proportional action on the spend-rate ratio (spend ÷ desired), applied
  multiplicatively to λ: the plant ``spend ≈ f(value ÷ λ)`` is close to linear in
  log space, as p's is;
- integral action: a *leaky, clamped* integral of the spend deviation (share of the
  budget) shifts the rate set-point, so cumulative spend returns to the plan without
  wind-up while λ sits at a bound;
- the expected-spend denominator is floored (≥ ``denominator_floor_share`` of the
  budget per hour) so a dead hour cannot blow the ratio up;
- gains scale with volume, the smoothed charges per step (a few charges are noise);
  an empty step lowers λ only when charges were due in it or the campaign is behind;
- **direction rules**: given how far cumulative spend is behind the plan
  (``behind_micros``), a campaign ahead of plan never has λ lowered and one behind
  never has it raised.

``LAMBDA_MAX = 10⁴``: bids can fall to a ten-thousandth of the value, four decades —
enough to bring a generous value per click (100 USD × pCTR 0.01 = 1 USD per
impression) to the price of remnant traffic (a 0.1 USD CPM = 100 micros per
impression); below that the campaign is not worth pricing down further and
throttling (p) takes over. At 25 % per step, 1 → 10⁴ takes 42 steps (7 minutes at
the budget service's 10 s step), so the bound costs little reaction time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from adfunnel.pacing.controller import Gains, _compound

#: Lowest λ: bids never above the value.
LAMBDA_MIN = 1.0
#: Highest λ control alone can set; at it, throttling takes over (:func:`at_bound`).
LAMBDA_MAX = 1e4
#: Largest relative change of λ in one step.
MAX_STEP_CHANGE = 0.25


@dataclass(frozen=True, slots=True)
class MultiplierGains(Gains):
    """Controller tuning: the p controller's :class:`~adfunnel.pacing.controller.Gains`
    (same fields, same meanings, the budget being the period's) and one more.

    ``idle_share``: share of ``kp`` applied at least when a step won nothing although
    charges were due (or the campaign is behind): without it, a campaign whose bids
    win nothing would have no volume and λ would never fall.
    """

    idle_share: float = 0.5


DEFAULT_GAINS = MultiplierGains()
#: Every gain's name (the p controller's and ``idle_share``).
GAIN_FIELDS = tuple(f.name for f in fields(MultiplierGains))


@dataclass(frozen=True, slots=True)
class MultiplierState:
    """``lam``: the bid multiplier λ in [1, LAMBDA_MAX]; ``integral``: leaky integral of
    (target − spend) as a share of the budget, in ±``integral_clamp``; the averages are
    EWMAs per step (< 0: none yet)."""

    lam: float = 1.0
    integral: float = 0.0
    spend_avg: float = -1.0  # micros per step
    target_avg: float = -1.0  # micros per step
    charges_avg: float = -1.0  # charges per step


def clamp_lambda(lam: float) -> float:
    """``lam`` within [LAMBDA_MIN, LAMBDA_MAX] (NaN → LAMBDA_MIN)."""
    if not lam >= LAMBDA_MIN:
        return LAMBDA_MIN
    return min(LAMBDA_MAX, lam)


def clamp_step(lam_old: float, lam_new: float) -> float:
    """``lam_new`` limited to ±25 % of ``lam_old`` and to [1, LAMBDA_MAX]; an ``lam_old``
    outside the range (a corrupt or legacy state) restarts from the clamped ``lam_new``."""
    lo = max(LAMBDA_MIN, lam_old * (1.0 - MAX_STEP_CHANGE))
    hi = min(LAMBDA_MAX, lam_old * (1.0 + MAX_STEP_CHANGE))
    if not lo <= hi:
        return clamp_lambda(lam_new)
    return min(hi, max(lo, lam_new))


def start_multiplier(value_micros: float, start_bid_micros: float) -> float:
    """The λ a strategy starts (or restarts, on a strategy switch) at: the one whose bid
    ``value ÷ λ`` equals a known safe bid (e.g. the manual bid it replaces, or the bid
    that met the plan yesterday), clamped to [1, LAMBDA_MAX]. A safe bid ≥ the value
    gives λ = 1 (bid the value); a safe bid ≤ 0 gives LAMBDA_MAX (start low, let the
    controller raise bids)."""
    if start_bid_micros <= 0:
        return LAMBDA_MAX
    return clamp_lambda(float(value_micros) / float(start_bid_micros))


def at_bound(lam: float) -> bool:
    """True when λ is at LAMBDA_MAX: bids can fall no further, so throttling (p) must
    take over the cut."""
    return lam >= LAMBDA_MAX


def step(
    state: MultiplierState,
    spend_micros: float,
    target_micros: float,
    dt_s: float,
    *,
    budget_micros: int,
    charges: float,
    behind_micros: float | None = None,
    gains: MultiplierGains = DEFAULT_GAINS,
) -> tuple[MultiplierState, float]:
    """One control step; returns ``(new_state, λ)``.

    Args:
        state: the state after the previous step.
        spend_micros: spend recorded during the step, micros.
        target_micros: spend the plan asks for during the step, micros.
        dt_s: step length in seconds (> 0).
        budget_micros: the period's budget (> 0), the unit of the integral.
        charges: how many charges the step's spend came from; scales the gains.
        behind_micros: planned cumulative spend minus spend so far, micros (> 0: behind,
            < 0: ahead); None = unknown (no direction rule).
        gains: tuning.

    Invariants (property-tested): the returned λ is in [1, LAMBDA_MAX] and within ±25 %
    of ``state.lam`` (when that is itself in range); λ is not lowered while
    ``behind_micros < 0`` nor raised while ``behind_micros > 0``; λ is non-decreasing
    in ``spend_micros``.

    Raises:
        ValueError: ``dt_s <= 0`` or ``budget_micros <= 0``.
    """
    if dt_s <= 0 or budget_micros <= 0:
        raise ValueError("dt_s and budget_micros must be > 0")
    spend = max(0.0, float(spend_micros))
    target = max(0.0, float(target_micros))
    floor = gains.denominator_floor_share * budget_micros * dt_s / 3600.0

    # integral: leaky and clamped (the clamp bounds wind-up while λ sits at a bound)
    dev = (target - spend) / budget_micros
    c = gains.integral_clamp
    integral = max(-c, min(c, state.integral * math.exp(-dt_s / gains.leak_s) + dev))

    # set-point: the plan's rate plus making up the deviation over catch_up_s, never
    # below a quarter of the plan's rate (a campaign ahead is slowed, not stopped)
    a = gains.smoothing
    prior = target if state.spend_avg < 0 else state.spend_avg  # first step: assume on plan
    spend_avg = (1 - a) * prior + a * spend
    target_avg = target if state.target_avg < 0 else (1 - a) * state.target_avg + a * target
    desired = max(target_avg + integral * budget_micros * dt_s / gains.catch_up_s,
                  0.25 * target_avg)

    ratio = max(spend_avg, floor) / max(desired, floor)  # > 1: spending too fast → λ up
    volume = max(0.0, float(charges))
    prior_charges = volume if state.charges_avg < 0 else state.charges_avg
    charges_avg = (1 - a) * prior_charges + a * volume
    g = gains.kp * charges_avg / (charges_avg + gains.volume_ref)
    behind = behind_micros is not None and behind_micros > 0
    if spend <= 0.0 and volume <= 0 and ratio < 1.0 and (prior_charges >= 1.0 or behind):
        g = max(g, gains.kp * gains.idle_share)  # nothing won where charges were due: bid up
    lam_new = state.lam * math.exp(g * math.log(ratio))
    if behind_micros is not None:
        if behind_micros < 0:
            lam_new = max(lam_new, state.lam)  # ahead of plan: never raise bids
        elif behind_micros > 0:
            lam_new = min(lam_new, state.lam)  # behind plan: never lower bids
    lam = clamp_step(state.lam, lam_new)
    return MultiplierState(lam, integral, spend_avg, target_avg, charges_avg), lam


@dataclass(slots=True)
class MultiplierArrays:
    """:class:`MultiplierState` of many campaigns (or replayed episodes) as float64 arrays."""

    lam: np.ndarray
    integral: np.ndarray
    spend_avg: np.ndarray
    target_avg: np.ndarray
    charges_avg: np.ndarray

    @classmethod
    def start(cls, lam: np.ndarray) -> MultiplierArrays:
        """Fresh states (no averages yet) at multipliers ``lam``."""
        lam = np.asarray(lam, dtype=np.float64)
        return cls(lam.copy(), np.zeros_like(lam), np.full_like(lam, -1.0),
                   np.full_like(lam, -1.0), np.full_like(lam, -1.0))


def step_arrays(
    state: MultiplierArrays,
    spend_micros: np.ndarray,
    target_micros: np.ndarray,
    dt_s: float,
    *,
    budget_micros: np.ndarray,
    charges: np.ndarray,
    behind_micros: np.ndarray,
    gains: MultiplierGains = DEFAULT_GAINS,
) -> MultiplierArrays:
    """:func:`step` for many at once (arrays of one length; ``behind_micros`` always
    known; every ``budget_micros`` > 0). A gain may be an array too (one per lane: a
    tuning run tries many gains in one pass).

    Bit-for-bit equal to :func:`step` (tested): the same float operations in the same
    order, ``exp`` of the leak from :mod:`math`, and λ × exp(g × log(ratio)) by the p
    controller's compiled ``_compound`` (the C library's functions, as :mod:`math`).
    """
    if dt_s <= 0:
        raise ValueError("dt_s must be > 0")
    budget = np.asarray(budget_micros, dtype=np.float64)
    spend = np.maximum(0.0, np.asarray(spend_micros, dtype=np.float64))
    target = np.maximum(0.0, np.asarray(target_micros, dtype=np.float64))
    gain = {f: np.asarray(getattr(gains, f), dtype=np.float64)
            for f in GAIN_FIELDS}
    floor = gain["denominator_floor_share"] * budget * dt_s / 3600.0

    dev = (target - spend) / budget
    x = dt_s / gain["leak_s"]  # a scalar unless leak_s is an array
    steps, where = np.unique(x, return_inverse=True)
    leak = np.array([math.exp(-u) for u in steps.tolist()])[where.reshape(x.shape)]
    c = gain["integral_clamp"]
    integral = np.maximum(-c, np.minimum(c, state.integral * leak + dev))

    a = gain["smoothing"]
    prior = np.where(state.spend_avg < 0, target, state.spend_avg)
    spend_avg = (1 - a) * prior + a * spend
    target_avg = np.where(state.target_avg < 0, target, (1 - a) * state.target_avg + a * target)
    desired = np.maximum(target_avg + integral * budget * dt_s / gain["catch_up_s"],
                         0.25 * target_avg)

    ratio = np.maximum(spend_avg, floor) / np.maximum(desired, floor)
    volume = np.maximum(0.0, np.asarray(charges, dtype=np.float64))
    prior_charges = np.where(state.charges_avg < 0, volume, state.charges_avg)
    charges_avg = (1 - a) * prior_charges + a * volume
    g = gain["kp"] * charges_avg / (charges_avg + gain["volume_ref"])
    behind = np.asarray(behind_micros, dtype=np.float64)
    idle = (spend <= 0.0) & (volume <= 0) & (ratio < 1.0) & ((prior_charges >= 1.0) | (behind > 0))
    g = np.where(idle, np.maximum(g, gain["kp"] * gain["idle_share"]), g)
    g = np.broadcast_to(g, state.lam.shape)
    lam_new = _compound(state.lam, np.ascontiguousarray(g), np.ascontiguousarray(ratio))
    lam_new = np.where(behind < 0, np.maximum(lam_new, state.lam), lam_new)
    lam_new = np.where(behind > 0, np.minimum(lam_new, state.lam), lam_new)
    lo = np.maximum(LAMBDA_MIN, state.lam * (1.0 - MAX_STEP_CHANGE))
    hi = np.minimum(LAMBDA_MAX, state.lam * (1.0 + MAX_STEP_CHANGE))
    restart = np.minimum(LAMBDA_MAX, np.where(lam_new >= LAMBDA_MIN, lam_new, LAMBDA_MIN))
    lam = np.where(lo <= hi, np.minimum(hi, np.maximum(lo, lam_new)), restart)
    return MultiplierArrays(lam, integral, spend_avg, target_avg, charges_avg)
