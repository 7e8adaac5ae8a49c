"""Slice (budget lease) arithmetic and budget states. Pure.

DESIGN.md §Money and budgets:

- **open** while remaining > max(5 min of peak spend, 10 click prices): servers
  spend freely;
- **metered** below that: a server spends only from a leased slice of ≈10 s of its own
  spend, at least one charge, expiring after 30 s;
- slices are granted only from what remains after in-flight cost, with at most half
  of it outstanding; grants stop when less than one charge (click price) remains —
  except the *last charges* of a campaign whose observed charge is below its largest
  (a CPM campaign's GSP price below its bid): see :func:`last_charge`.

All amounts are integer micros; rates are micros per second (float, never charged).
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

#: Seconds of peak spend kept as the open/metered threshold.
OPEN_RESERVE_S = 300.0
#: Charges (click prices) kept as the open/metered threshold.
OPEN_RESERVE_CHARGES = 10
#: Seconds of a server's spend one slice is sized for.
SLICE_SPEND_S = 10.0
#: Slice lifetime in seconds.
SLICE_TTL_S = 30.0
#: Below this many charges left to grant, serves take their worst-case charge from a
#: slice instead of their expected cost. Each worst-case serve holds a whole charge
#: until billing's watermark passes it (a conversion window), so the reserve is what a
#: CPA campaign cannot deliver: measured in the day simulation, 3 charges held 1.8 %
#: of a 166-charge CPA budget (delivery 94-97 %), 2 charges 1.2 %. At 1 no grant is
#: ever in the worst-case regime (grants stop below one charge): the charge left
#: ungranted after expected in-flight cost is the margin against pending clicks and
#: conversions exceeding their expectation (absorbed overspend, measured ≤ 0.041 % of
#: a budget in the day simulation). Raise it to trade delivery for a zero-overspend
#: guarantee.
WORST_CASE_CHARGES = 1


def last_charge(charge_micros: int, exact: bool, served_micros: int, served_charges: int) -> int:
    """The least that must remain for a last grant, micros: the campaign's mean charge
    per serve so far (``served_micros / served_charges``, rounded up, at most
    ``charge_micros``) where that expected cost is the serve's exact charge (``exact``:
    CPM, whose impressions bill the price they were served at, or nothing); else (CPC,
    CPA: a serve's click may bill far above its expectation, and the one charge left
    ungranted is the margin for it; or no serve yet) ``charge_micros`` itself, the rule
    of DESIGN.md.

    Grants stopped when less than one largest charge (the bid) remained, so a CPM
    campaign whose GSP price is a quarter of its bid left a fifth of a budget of 20
    prices undelivered (17 of 20 billed, ``tests/budget/test_last_charges.py``). Below
    one charge a single slice of one charge may still be granted when nothing is
    outstanding and at least this much remains (:func:`slice_size`); its serve takes
    its worst case (its own price) from it, so at any moment at most one serve is
    committed beyond what remains, and the absorbed overspend is below one charge
    (``charge − remaining``)."""
    charge = max(1, charge_micros)
    if not exact or served_charges <= 0:
        return charge
    mean = -(-max(0, served_micros) // served_charges)
    return max(1, min(charge, mean))


def last_charges(charge: np.ndarray, exact: np.ndarray, served: np.ndarray,
                 charges: np.ndarray) -> np.ndarray:
    """:func:`last_charge` of arrays (int64 micros)."""
    charge = np.maximum(1, charge)
    mean = -(-np.maximum(0, served) // np.maximum(1, charges))
    return np.where(exact & (charges > 0), np.maximum(1, np.minimum(charge, mean)), charge)


def worst_case_regime(grantable_micros: int, charge_micros: int) -> bool:
    """True when serves must take their worst-case charge from slices."""
    return grantable_micros < WORST_CASE_CHARGES * max(1, charge_micros)


class BudgetState(StrEnum):
    OPEN = "open"
    METERED = "metered"
    EXHAUSTED = "exhausted"  # metered and no more grants: spend only slices still held
    STOPPED = "stopped"  # hard stop (paused, ended, unknown): no spend at all


def open_threshold(peak_rate_micros_per_s: float, charge_micros: int) -> int:
    """max(5 min of peak spend, 10 charges), micros."""
    return max(int(OPEN_RESERVE_S * max(0.0, peak_rate_micros_per_s)),
               OPEN_RESERVE_CHARGES * charge_micros)


def budget_state(remaining_micros: int, grantable_micros: int, threshold_micros: int,
                 charge_micros: int, last_charge_micros: int | None = None) -> BudgetState:
    """OPEN above the threshold, EXHAUSTED when less than one charge (``last_charge_micros``
    where given: :func:`last_charge`) can be granted, METERED between."""
    if remaining_micros > threshold_micros:
        return BudgetState.OPEN
    least = charge_micros if last_charge_micros is None else last_charge_micros
    if grantable_micros < max(1, least):
        return BudgetState.EXHAUSTED
    return BudgetState.METERED


def grantable(budget_micros: int, billed_micros: int, in_flight_micros: int) -> int:
    """What slices may be granted from: budget − billed − in-flight cost (≥ 0)."""
    return max(0, budget_micros - billed_micros - in_flight_micros)


def slice_size(
    server_rate_micros_per_s: float,
    charge_micros: int,
    grantable_micros: int,
    outstanding_micros: int,
    last_charge_micros: int | None = None,
) -> int:
    """Size of a new slice for one server, micros; 0 means no grant.

    Wanted: ``SLICE_SPEND_S`` of the server's worst-case spend rate, at least one charge.
    Allowed: outstanding slices (this one included) at most half of ``grantable``; when
    nothing is outstanding a single charge may be granted as long as one charge remains
    (so the last charges of a budget are still deliverable). Less than one charge left:
    no grant, unless at least ``last_charge_micros`` (:func:`last_charge`, below one
    charge) remains and nothing is outstanding: then a single slice of one charge, whose
    serve takes its worst case (:func:`worst_case_regime`).

    Invariants (property-tested): the result is 0 or ≥ ``charge_micros``;
    ``outstanding + result <= grantable``, except a last slice (``grantable < charge``),
    granted alone, which exceeds ``grantable`` by less than one charge.
    """
    charge = max(1, charge_micros)
    if grantable_micros < charge:
        last = charge if last_charge_micros is None else max(1, last_charge_micros)
        if last < charge and grantable_micros >= last and outstanding_micros == 0:
            return charge  # the last charges: one serve, its worst case below one charge
        return 0
    want = max(charge, int(SLICE_SPEND_S * max(0.0, server_rate_micros_per_s)))
    room = grantable_micros // 2 - outstanding_micros
    if room >= charge:
        return min(want, room)
    if outstanding_micros == 0:
        return charge  # grantable >= charge: the last charge
    return 0
