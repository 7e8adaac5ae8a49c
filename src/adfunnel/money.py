"""Money as integer micros of the deployment's currency, and the only rounding rules.

One currency unit (1 USD, 1 CNY) = 1,000,000 micros. Every amount that is charged,
budgeted or reported is an ``int`` of micros. Expected values used only to *rank*
candidates (bid × pCTR) may be floats; they become money only through the functions
below, which say how they round.
"""

from __future__ import annotations

import math
from typing import NewType

Micros = NewType("Micros", int)

MICROS_PER_UNIT = 1_000_000
#: Micros in one fen (1/100 CNY); iPinYou prices are CPM in fen.
MICROS_PER_FEN = 10_000
#: Impressions per "mille" in CPM.
MILLE = 1_000


class MoneyError(ValueError):
    """An amount of money that is not a non-negative integer number of micros."""


def micros(value: object, *, field: str = "amount") -> Micros:
    """Validate ``value`` as a non-negative integer amount of micros.

    Raises:
        MoneyError: for floats (NaN included), bools, strings and negative numbers.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoneyError(f"{field}: must be an integer number of micros, got {value!r}")
    if value < 0:
        raise MoneyError(f"{field}: must be >= 0 micros, got {value}")
    return Micros(value)


def from_fen(fen: int) -> Micros:
    """Convert an integer amount of fen (1/100 CNY) to micros."""
    return Micros(fen * MICROS_PER_FEN)


def ceil_micros(value: float) -> Micros:
    """Round a non-negative computed price *up* to whole micros.

    GSP prices are the least amount that keeps a slot, so rounding up (never down)
    keeps the winner's rank; callers cap the result at the bid afterwards.
    """
    if not math.isfinite(value) or value < 0:
        raise MoneyError(f"price must be finite and >= 0, got {value}")
    return Micros(math.ceil(value - 1e-9))


def cpm_to_impression(cpm_micros: int) -> Micros:
    """Charge for one impression of a CPM price (micros per thousand), half-up rounded.

    The error is at most half a micro per impression.
    """
    return Micros((cpm_micros * 2 + MILLE) // (2 * MILLE))


def format_units(amount: int, currency: str = "") -> str:
    """Render micros as a decimal string with 2 decimals for people (never for math)."""
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), MICROS_PER_UNIT)
    cents = frac // 10_000
    text = f"{sign}{whole:,}.{cents:02d}"
    return f"{text} {currency}".strip()


def round_micros(value: float) -> Micros:
    """Round an expected amount (e.g. price × pCTR) half-up to whole micros."""
    if not math.isfinite(value) or value < 0:
        raise MoneyError(f"amount must be finite and >= 0, got {value}")
    return Micros(math.floor(value + 0.5))
