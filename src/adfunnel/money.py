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
    """One impression of a CPM price (micros per thousand), rounded *down* to whole micros.

    Never rounds against the advertiser, but drifts by up to one micro per impression;
    the ledger bills CPM exactly with :func:`bill_per_mille` instead. For callers that
    keep no carry (the day simulation).
    """
    return Micros(cpm_micros // MILLE)


def impression_charge_bound(cpm_micros: int) -> Micros:
    """The most one impression of a CPM price can bill, micros: ceil(price / 1000).

    With the carried fraction (:func:`bill_per_mille`) an impression bills
    floor((carry + price) / 1000) with carry ≤ 999, so never more than this. Budget
    estimates (max charge, expected cost) use it: conservative, and never billed.
    """
    return Micros(-(-cpm_micros // MILLE))


def bill_per_mille(carry_millimicros: int, price_per_mille: int) -> tuple[Micros, int]:
    """Bill one event of a price per thousand events, carrying the fraction exactly.

    ``carry_millimicros`` (in [0, 999]) is the not-yet-billed fraction of earlier events
    in thousandths of a micro; ``price_per_mille`` is micros per 1000 events (a CPM
    price), i.e. the event's exact charge in thousandths of a micro.
    Returns ``(whole micros due now, new carry)``: due = floor((carry + price) / 1000).

    Invariant over any sequence starting at carry 0: 1000·Σ due + carry = Σ price, so
    Σ due ≤ exact total < Σ due + 1 micro; no event is ever rounded up.

    Raises:
        MoneyError: for a carry outside [0, 999] or a negative price.
    """
    if not 0 <= carry_millimicros < MILLE:
        raise MoneyError(f"carry must be in [0, {MILLE - 1}], got {carry_millimicros}")
    micros(price_per_mille, field="price_per_mille")
    due, carry = divmod(carry_millimicros + price_per_mille, MILLE)
    return Micros(due), carry


def format_units(amount: int, currency: str = "") -> str:
    """Render micros as a decimal string for people (never for math): 2 decimals, more
    (up to 6) where the amount is not a whole cent, so nothing is hidden by truncation
    (669,000 micros is ``0.669``, not ``0.66``)."""
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), MICROS_PER_UNIT)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    text = f"{sign}{whole:,}.{digits}"
    return f"{text} {currency}".strip()


def round_micros(value: float) -> Micros:
    """Round an expected amount (e.g. price × pCTR) half-up to whole micros."""
    if not math.isfinite(value) or value < 0:
        raise MoneyError(f"amount must be finite and >= 0, got {value}")
    return Micros(math.floor(value + 0.5))
