"""Form fields of the dashboard → API bodies: money in units, JSON editors.

Pure. Each parser raises :class:`FieldProblem` naming the API field it fills, so a
problem found here shows next to the same field as one the API reports.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

from adfunnel.money import MICROS_PER_UNIT


class FieldProblem(ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def units_to_micros(text: str, field: str) -> int:
    """``"12.5"`` (currency units, at most 6 decimals) → ``12500000`` micros, exactly.

    Raises:
        FieldProblem: not a number, negative, or finer than a micro.
    """
    try:
        amount = Decimal(text.strip().replace(",", ""))
    except InvalidOperation:
        raise FieldProblem(field, "must be an amount like 12.50") from None
    if not amount.is_finite() or amount < 0:
        raise FieldProblem(field, "must be an amount of at least 0")
    value = amount * MICROS_PER_UNIT
    if value != value.to_integral_value():
        raise FieldProblem(field, "has more than 6 decimals")
    return int(value)


def micros_to_units(micros: int | None) -> str:
    """The inverse of :func:`units_to_micros` for a form's value (no trailing zeros
    past the cents)."""
    if micros is None:
        return ""
    whole, frac = divmod(micros, MICROS_PER_UNIT)
    text = f"{frac:06d}".rstrip("0")
    return f"{whole}.{text.ljust(2, '0')}"


def json_field(text: str, field: str, *, allow_empty: bool = True) -> Any:
    """A JSON editor's text → its value; empty text → None (where allowed).

    Raises:
        FieldProblem: not valid JSON (with the line and column).
    """
    if not text.strip():
        if allow_empty:
            return None
        raise FieldProblem(field, "is required")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FieldProblem(field, f"not valid JSON: {exc.msg} at line {exc.lineno}, "
                                  f"column {exc.colno}") from None


def int_field(text: str, field: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise FieldProblem(field, "must be a whole number") from None


def pretty_json(value: Any) -> str:
    return "" if value is None else json.dumps(value, indent=2)
