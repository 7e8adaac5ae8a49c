"""The money rules of one ledger write: its money checked before anything is recorded, a
charge split between billed and absorbed under the budgets left, a lifetime budget's
remainder, and a conversion's attribution window (micros throughout).

Pure. :func:`adfunnel.billing.batch.plan_batch` applies them (inlined where it runs once
per billed event); :class:`adfunnel.billing.ledger.MemoryLedger` applies them one event
at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from adfunnel.billing.batch_model import LedgerWrite
from adfunnel.billing.model import LedgerEvent
from adfunnel.money import MILLE, MoneyError, micros

_INT64_MAX = 2**63 - 1


def validate(writes: Sequence[LedgerWrite]) -> None:
    """Check every write's money before anything is recorded.

    Raises:
        MoneyError: a negative or non-integer charge or budget, or a charge too large
            to store.
    """
    for w in writes:
        event = w.event
        charge, daily, life = event.charge_micros, w.daily_budget_micros, w.lifetime_budget_micros
        if (type(charge) is int and type(daily) is int and charge >= 0 and daily >= 0
                and (charge if event.charge_per_mille else charge * MILLE) <= _INT64_MAX
                and (life is None or (type(life) is int and life >= 0))):
            continue  # plain ints in range (not bool: type() is exact), the usual case
        _validate_one(w)


def _validate_one(w: LedgerWrite) -> None:
    """:func:`validate` of one write, raising what it finds."""
    micros(w.event.charge_micros, field="charge_micros")
    if w.event.charge_millimicros > _INT64_MAX:
        raise MoneyError(f"charge_micros: too large, got {w.event.charge_micros}")
    micros(w.daily_budget_micros, field="daily_budget_micros")
    if w.lifetime_budget_micros is not None:
        micros(w.lifetime_budget_micros, field="lifetime_budget_micros")


def split_charge(
    charge: int, billed_so_far: int, daily_budget: int, lifetime_remaining: int | None = None
) -> tuple[int, int]:
    """(billed, absorbed) for a ``charge`` on a day already billed ``billed_so_far``.

    ``lifetime_remaining``: what the lifetime budget has left (None: no lifetime budget).
    Invariant: billed + absorbed == charge, billed_so_far + billed <= daily_budget and
    billed <= lifetime_remaining.
    """
    remaining = max(0, daily_budget - billed_so_far)
    if lifetime_remaining is not None:
        remaining = min(remaining, max(0, lifetime_remaining))
    billed = min(charge, remaining)
    return billed, charge - billed


def lifetime_left(lifetime_budget: int | None, lifetime_billed: int) -> int | None:
    """Micros the lifetime budget has left (≥ 0), or None without a lifetime budget."""
    return None if lifetime_budget is None else max(0, lifetime_budget - lifetime_billed)


def outside_window(event: LedgerEvent, prerequisite_at: datetime) -> bool:
    """True when ``event`` (a conversion) came later than its attribution window after
    its click at ``prerequisite_at``."""
    window = event.attribution_window_s
    return window is not None and (
        (event.occurred_at - prerequisite_at).total_seconds() > window)
