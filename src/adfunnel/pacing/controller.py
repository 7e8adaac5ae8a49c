"""The pacing controller: one proportional-integral step on spend rate. Pure.

DESIGN.md §Money and budgets, *Pacing*: every 10 s a PI controller on the spend rate
sets the participation probability ``p`` that ad servers apply as a coin flip before
scoring. Rules implemented here:

- ``p`` changes by at most ±25 % per step and stays in ``[P_FLOOR, 1]``
  (``P_FLOOR = 0.001``); only hard stops (outside this module) set 0;
- proportional action on the spend-rate ratio, applied multiplicatively to ``p``
  (so the plant ``spend ≈ p × reachable traffic`` is linear in log space);
- integral action: a *leaky, clamped* integral of the spend deviation (share of the
  daily budget) raises or lowers the rate set-point, so cumulative spend returns to
  the target curve without wind-up;
- the expected-spend denominator is floored (≥ ``denominator_floor_share`` of the
  daily budget per hour) so a dead hour cannot blow the ratio up;
- gains scale with campaign volume, the *smoothed* charges per step: a few events
  per step are noise, so the step is damped in proportion. An empty step moves p up
  only when charges were expected in it (an empty step of a campaign that charges
  once a minute is no evidence), or when the campaign is clearly behind its curve;
- **behind means never down**: while cumulative spend is not ahead of the target
  by more than ``hold_band_micros`` (a few charges: the noise of billed reality),
  p is never lowered. A campaign that cannot reach its curve ends at p = 1 (status
  "limited by bid or audience"), never lowered by a burst of noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

#: Lowest participation probability control alone can set.
P_FLOOR = 0.001
#: Largest relative change of p in one step.
MAX_STEP_CHANGE = 0.25


@dataclass(frozen=True, slots=True)
class Gains:
    """Controller tuning.

    ``kp``: exponent applied to the rate ratio at full volume (1 = dead-beat).
    ``catch_up_s``: seconds over which the integral (a spend deviation) is made up.
    ``leak_s``: time constant of the integral's leak (seconds).
    ``integral_clamp``: bound of the integral, as a share of the daily budget.
    ``denominator_floor_share``: floor of expected spend per hour, share of budget.
    ``volume_ref``: charges per step at which the gains reach half their full value.
    """

    kp: float = 0.6
    catch_up_s: float = 1200.0
    leak_s: float = 4 * 3600.0
    integral_clamp: float = 0.03
    denominator_floor_share: float = 0.01
    volume_ref: float = 4.0
    smoothing: float = 0.35


DEFAULT_GAINS = Gains()


@dataclass(frozen=True, slots=True)
class ControllerState:
    """``p``: participation probability in [P_FLOOR, 1]; ``integral``: leaky integral of
    (target − spend) as a share of the daily budget, in ±``integral_clamp``."""

    p: float = 1.0
    integral: float = 0.0
    spend_avg: float = -1.0  # EWMA of spend per step, micros (< 0: none yet)
    target_avg: float = -1.0  # EWMA of target per step, micros
    charges_avg: float = -1.0  # EWMA of charges per step (< 0: none yet)


def clamp_step(p_old: float, p_new: float) -> float:
    """``p_new`` limited to ±25 % of ``p_old`` and to [P_FLOOR, 1]."""
    lo = max(P_FLOOR, p_old * (1.0 - MAX_STEP_CHANGE))
    hi = min(1.0, p_old * (1.0 + MAX_STEP_CHANGE))
    if lo > hi:  # p_old outside the band (e.g. 0 after a hard stop): restart from the floor
        return min(1.0, max(P_FLOOR, p_new))
    return min(hi, max(lo, p_new))


def step(
    state: ControllerState,
    spend_micros: float,
    target_micros: float,
    dt_s: float,
    *,
    budget_micros: int,
    charges: float,
    committed_delta_micros: float | None = None,
    behind_micros: float | None = None,
    hold_band_micros: float = 0.0,
    charge_micros: float = 0.0,
    gains: Gains = DEFAULT_GAINS,
) -> tuple[ControllerState, float]:
    """One control step; returns ``(new_state, p)``.

    Args:
        state: the state after the previous step.
        spend_micros: expected spend recorded during the step (all servers), micros.
        target_micros: spend the target curve asks for during the step, micros.
        dt_s: step length in seconds (> 0).
        budget_micros: the day's budget (> 0), the unit of the integral.
        charges: how many charges (serves) the step's spend came from; scales gains.
        committed_delta_micros: change of committed spend (billed + in flight) over the
            step; feeds the integral so billed reality (renders, clicks) replaces the
            estimates. Defaults to ``spend_micros``.
        behind_micros: target cumulative spend minus spend so far (billed + in flight,
            leases excluded), micros; None = unknown (no hold rule).
        hold_band_micros: how far ahead of the curve the campaign must be before p
            may be lowered (a few of its charges); 0 = any amount ahead.
        charge_micros: the campaign's largest charge; behind by more than half of one, an
            empty step moves p up even when few charges were expected.
        gains: tuning.

    Invariants (property-tested): the returned p is in [P_FLOOR, 1] and within ±25 %
    of ``state.p`` (when ``state.p`` is itself in range); p is not lowered while
    ``behind_micros > -hold_band_micros``.

    Raises:
        ValueError: ``dt_s <= 0`` or ``budget_micros <= 0``.
    """
    if dt_s <= 0 or budget_micros <= 0:
        raise ValueError("dt_s and budget_micros must be > 0")
    spend = max(0.0, float(spend_micros))
    target = max(0.0, float(target_micros))
    floor = gains.denominator_floor_share * budget_micros * dt_s / 3600.0

    # integral: leaky and clamped (the clamp bounds wind-up while p sits at 1)
    moved = spend if committed_delta_micros is None else float(committed_delta_micros)
    dev = (target - moved) / budget_micros
    leak = math.exp(-dt_s / gains.leak_s)
    integral = state.integral * leak + dev
    c = gains.integral_clamp
    integral = max(-c, min(c, integral))

    # set-point: the curve's rate plus making up the deviation over catch_up_s,
    # never below a quarter of the curve's rate (a cut never drives p to the floor)
    a = gains.smoothing
    prior = target if state.spend_avg < 0 else state.spend_avg  # first step: assume on plan
    spend_avg = (1 - a) * prior + a * spend
    target_avg = target if state.target_avg < 0 else (1 - a) * state.target_avg + a * target
    desired = target_avg + integral * budget_micros * dt_s / gains.catch_up_s
    desired = max(desired, 0.25 * target_avg)

    ratio = max(desired, floor) / max(spend_avg, floor)
    volume = max(0.0, charges)
    prior_charges = volume if state.charges_avg < 0 else state.charges_avg
    charges_avg = (1 - a) * prior_charges + a * volume
    g = gains.kp * charges_avg / (charges_avg + gains.volume_ref)
    behind = behind_micros is not None and behind_micros > 0.5 * max(0.0, charge_micros)
    if spend <= 0.0 and volume <= 0 and desired > floor and spend_avg < desired and (
            prior_charges >= 1.0 or behind):
        g = max(g, gains.kp * 0.5)  # nothing served where charges were due: move up
    p_new = state.p * math.exp(g * math.log(ratio)) if ratio > 0 else state.p
    if behind_micros is not None and behind_micros > -hold_band_micros:
        p_new = max(p_new, state.p)  # not ahead of the curve: never lower p
    p = clamp_step(state.p, p_new)
    return ControllerState(p, integral, spend_avg, target_avg, charges_avg), p


@dataclass(slots=True)
class ControllerArrays:
    """:class:`ControllerState` of many campaign-days as float64 arrays (one per field)."""

    p: np.ndarray
    integral: np.ndarray
    spend_avg: np.ndarray
    target_avg: np.ndarray
    charges_avg: np.ndarray


def clamp_steps(p_old: np.ndarray, p_new: np.ndarray) -> np.ndarray:
    """:func:`clamp_step` of arrays."""
    lo = np.maximum(P_FLOOR, p_old * (1.0 - MAX_STEP_CHANGE))
    hi = np.minimum(1.0, p_old * (1.0 + MAX_STEP_CHANGE))
    inside = np.minimum(hi, np.maximum(lo, p_new))
    return np.where(lo > hi, np.minimum(1.0, np.maximum(P_FLOOR, p_new)), inside)


def step_arrays(
    state: ControllerArrays,
    spend_micros: np.ndarray,
    target_micros: np.ndarray,
    dt_s: np.ndarray,
    *,
    budget_micros: np.ndarray,
    charges: np.ndarray,
    committed_delta_micros: np.ndarray,
    has_delta: np.ndarray,
    behind_micros: np.ndarray,
    hold_band_micros: np.ndarray,
    charge_micros: np.ndarray,
    gains: Gains = DEFAULT_GAINS,
) -> ControllerArrays:
    """:func:`step` for many campaign-days at once (every argument an array of one length;
    ``has_delta`` False where ``committed_delta_micros`` is None in the scalar call, and
    ``behind_micros`` always known). Every ``dt_s`` and ``budget_micros`` must be > 0
    (the caller selects those rows).

    Bit-for-bit equal to :func:`step` (tested): the same float operations in the same
    order, and ``exp`` / ``log`` from :mod:`math` (numpy's vectorised ones may differ in
    the last bit, and p compounds step after step). ``exp(-dt / leak_s)`` is computed once
    per distinct step length; ``p × exp(g × log(ratio))`` only where it can move p
    (``g ≠ 0`` and ``ratio ≠ 1``: elsewhere it is exactly p).
    """
    budget = budget_micros.astype(np.float64)
    spend = np.maximum(0.0, spend_micros.astype(np.float64))
    target = np.maximum(0.0, target_micros.astype(np.float64))
    floor = gains.denominator_floor_share * budget * dt_s / 3600.0

    moved = np.where(has_delta, committed_delta_micros, spend)
    dev = (target - moved) / budget
    steps, where = np.unique(dt_s, return_inverse=True)
    leak = np.array([math.exp(-d / gains.leak_s) for d in steps.tolist()])[where]
    c = gains.integral_clamp
    integral = np.maximum(-c, np.minimum(c, state.integral * leak + dev))

    a = gains.smoothing
    prior = np.where(state.spend_avg < 0, target, state.spend_avg)
    spend_avg = (1 - a) * prior + a * spend
    target_avg = np.where(state.target_avg < 0, target, (1 - a) * state.target_avg + a * target)
    desired = target_avg + integral * budget * dt_s / gains.catch_up_s
    desired = np.maximum(desired, 0.25 * target_avg)

    ratio = np.maximum(desired, floor) / np.maximum(spend_avg, floor)
    volume = np.maximum(0.0, charges.astype(np.float64))
    prior_charges = np.where(state.charges_avg < 0, volume, state.charges_avg)
    charges_avg = (1 - a) * prior_charges + a * volume
    g = gains.kp * charges_avg / (charges_avg + gains.volume_ref)
    behind = behind_micros > 0.5 * np.maximum(0.0, charge_micros.astype(np.float64))
    idle = ((spend <= 0.0) & (volume <= 0) & (desired > floor) & (spend_avg < desired)
            & ((prior_charges >= 1.0) | behind))
    g = np.where(idle, np.maximum(g, gains.kp * 0.5), g)
    p_new = state.p.copy()
    move = np.flatnonzero((ratio > 0) & (g != 0.0) & (ratio != 1.0))
    if len(move):
        p_new[move] = _compound(state.p[move], g[move], ratio[move])
    p_new = np.where(behind_micros > -hold_band_micros, np.maximum(p_new, state.p), p_new)
    p = clamp_steps(state.p, p_new)
    return ControllerArrays(p, integral, spend_avg, target_avg, charges_avg)


@njit(cache=True, nogil=True)
def _compound(p: np.ndarray, g: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """``p × exp(g × log(ratio))`` element by element with the C library's ``exp`` and
    ``log``, as :mod:`math` computes them (bit for bit: the test of :func:`step_arrays`
    against :func:`step` holds it), in compiled code (at 10⁶ campaigns a Python loop
    over them took most of a control step)."""
    out = np.empty(len(p), np.float64)
    for i in range(len(p)):
        out[i] = p[i] * math.exp(g[i] * math.log(ratio[i]))
    return out
