"""Prices an exchange names in a notice: ``${AUCTION_PRICE}`` text → integer CPM micros.

OpenRTB 2.6 §4.4: the exchange substitutes ``${AUCTION_PRICE}`` (and
``${AUCTION_MIN_TO_WIN}``) with a price in the bid's currency units per thousand
impressions, written as decimal text (``1.2345``). Money is integer micros inside
(DESIGN.md §Money and budgets), so the text is read with :class:`~decimal.Decimal`,
never a float, and rounded **down** to whole micros: never in the advertiser's
disfavour (``1.2345678`` → 1,234,567 micros).

Accepted: plain decimals (``12``, ``1.5``, ``.5``, ``1.``) and the exponent form some
exchanges' number formatting writes (``1.0E-4``; exponent of at most two digits).
Refused (:class:`PriceRefused`, with its ``reason``): a missing or empty price
(``missing``), the macro left unsubstituted (``unsubstituted``: ``${...}`` still in the
text), a negative price (``negative``), anything else that is not such a decimal —
``NaN``, ``Infinity``, an encrypted price, a comma (``not_a_number``) — and a price
above :data:`MAX_CPM_MICROS` or longer than :data:`MAX_PRICE_CHARS` characters
(``absurd``). :func:`within_bid` refuses a clearing price above our bid
(``above_bid``): an exchange never charges more than the bid.
"""

from __future__ import annotations

import re
from decimal import ROUND_FLOOR, Decimal, InvalidOperation, localcontext
from typing import Literal

#: Micros per currency unit.
MICROS = 1_000_000
#: Longest price text read (a real one is under 20 characters).
MAX_PRICE_CHARS = 32
#: The highest CPM a notice may name, micros: 1,000,000 currency units per thousand
#: impressions (1,000 units for one impression) is no price anybody clears at.
MAX_CPM_MICROS = 1_000_000 * MICROS

Reason = Literal["missing", "unsubstituted", "negative", "not_a_number", "absurd",
                 "above_bid"]

_EXACT_DIGITS = 200
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,2})?")
_PROBLEMS: dict[str, str] = {
    "missing": "the clearing price is required (CPM in currency units, e.g. 1.2345)",
    "unsubstituted": "the price macro was not substituted by the exchange",
    "negative": "a price cannot be negative",
    "not_a_number": "a decimal CPM in currency units, e.g. 1.2345",
    "absurd": f"at most {MAX_CPM_MICROS // MICROS} currency units CPM",
    "above_bid": "above our bid: an exchange never clears above the bid",
}


class PriceRefused(ValueError):
    """A notice price that must not be used; ``reason`` is one of :data:`Reason`,
    ``problem`` a sentence for the error body."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason: Reason = reason
        self.problem = _PROBLEMS[reason]


def is_unsubstituted(text: str | None) -> bool:
    """True when ``text`` still holds a macro (``${...}``): the exchange left it as is."""
    return text is not None and "${" in text


def cpm_micros(text: str | None) -> int:
    """The CPM price ``text`` names (currency units per mille, decimal text) in integer
    micros, rounded down.

    Raises:
        PriceRefused: ``missing``, ``unsubstituted``, ``negative``, ``not_a_number`` or
            ``absurd`` (see the module docstring).
    """
    if text is None or not text.strip():
        raise PriceRefused("missing")
    if is_unsubstituted(text):
        raise PriceRefused("unsubstituted")
    text = text.strip()
    if len(text) > MAX_PRICE_CHARS:
        raise PriceRefused("absurd")
    negative = text.startswith("-")
    body = text[1:] if negative or text.startswith("+") else text
    if not _DECIMAL.fullmatch(body):
        raise PriceRefused("not_a_number")
    # exact: 32 characters with an exponent of two digits need under 140 digits (the
    # default 28 would round 0.99999999999999999999999999999 up before the floor)
    with localcontext(prec=_EXACT_DIGITS):
        try:
            value = Decimal(body) * MICROS
        except InvalidOperation:  # the pattern admits only finite decimals: defensive
            raise PriceRefused("not_a_number") from None
        if negative and value != 0:
            raise PriceRefused("negative")
        micros = int(value.to_integral_value(rounding=ROUND_FLOOR))
    if micros > MAX_CPM_MICROS:
        raise PriceRefused("absurd")
    return micros


def within_bid(text: str | None, bid_micros: int) -> int:
    """:func:`cpm_micros` of ``text``, refused when above ``bid_micros`` (our bid, CPM
    micros, the token's price).

    Raises:
        PriceRefused: as :func:`cpm_micros`, or ``above_bid``.
    """
    micros = cpm_micros(text)
    if micros > bid_micros:
        raise PriceRefused("above_bid")
    return micros
