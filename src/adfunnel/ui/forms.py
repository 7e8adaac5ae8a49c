"""Form fields of the dashboard → API bodies: money in units, JSON editors.

Pure. Each parser raises :class:`FieldProblem` naming the API field it fills, so a
problem found here shows next to the same field as one the API reports.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from adfunnel.json_depth import nesting_problem
from adfunnel.money import MICROS_PER_UNIT

#: Amounts of 10^19 currency units and more are refused (``is too large``).
_MAX_UNITS_DIGITS = 19
_MICRO = Decimal("0.000001")
#: A number whose commas separate thousands: ``1,234,567`` (and ``.5`` after it).
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")


class FieldProblem(ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def units_to_micros(text: str, field: str) -> int:
    """``"12.5"`` (currency units, at most 6 decimals) → ``12500000`` micros, exactly.

    Raises:
        FieldProblem: not a number, negative, 10^19 units or more, or finer than a
            micro; a comma that does not separate thousands (:func:`without_thousands`).
    """
    try:
        amount = Decimal(without_thousands(text, field))
    except InvalidOperation:
        raise FieldProblem(field, "must be an amount like 12.50") from None
    if not amount.is_finite() or amount < 0:
        raise FieldProblem(field, "must be an amount of at least 0")
    # bounded before any arithmetic: Decimal's context would overflow (1e999999999) or
    # underflow to 0 (1e-999999999); 10^19 units is beyond every money limit
    if amount and amount.adjusted() >= _MAX_UNITS_DIGITS:
        raise FieldProblem(field, "is too large")
    if amount != amount.quantize(_MICRO):
        raise FieldProblem(field, "has more than 6 decimals")
    return int(amount * MICROS_PER_UNIT)


def without_thousands(text: str, field: str) -> str:
    """``text`` stripped, without the commas that separate its thousands (``1,000.25``).

    Raises:
        FieldProblem: a comma elsewhere: ``0,50`` is a decimal comma, which read as a
            separator would make the amount a hundred times larger.
    """
    text = text.strip()
    if "," not in text:
        return text
    if not _THOUSANDS.fullmatch(text):
        raise FieldProblem(field, "a comma may only separate thousands (1,000.50); "
                                  "write decimals with a point")
    return text.replace(",", "")


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
        FieldProblem: not valid JSON (with the line and column), or nested deeper than
            the decoder may recurse (:mod:`adfunnel.json_depth`).
    """
    if not text.strip():
        if allow_empty:
            return None
        raise FieldProblem(field, "is required")
    too_deep = nesting_problem(text)
    if too_deep is not None:
        raise FieldProblem(field, too_deep[1])
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


#: Weekday names of the dayparts form, Monday first (the API's 0 … 6).
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
#: Most rows a dayparts form may post: the API's 100 dayparts and the blank row. The
#: count is the page's hidden ``rows``, but any client can post it.
MAX_DAYPART_ROWS = 101


def dayparts_rows(dayparts: list[dict[str, Any]], blank: int = 1) -> list[dict[str, Any]]:
    """The dayparts form's rows for a campaign's dayparts, plus ``blank`` empty rows to
    add one: ``{"weekdays": set, "start_hour", "end_hour"}``."""
    rows = [{"weekdays": set(d["weekdays"]), "start_hour": d["start_hour"],
             "end_hour": d["end_hour"]} for d in dayparts]
    return rows + [{"weekdays": set(), "start_hour": 0, "end_hour": 24}] * blank


def dayparts_from_form(form: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """The dayparts form (``rows``; per row ``dp-I-wd`` checkboxes, ``dp-I-start``,
    ``dp-I-end``) → the API's ``dayparts`` and, for each of them, the form row it came
    from (a row without a weekday ticked is left out: that is how a row is removed).

    Raises:
        FieldProblem: a count or hour that is not a whole number; more rows than
            :data:`MAX_DAYPART_ROWS`.
    """
    out: list[dict[str, Any]] = []
    used: list[int] = []
    rows = int_field(str(form.get("rows", "0")), "dayparts")
    if rows > MAX_DAYPART_ROWS:
        raise FieldProblem("dayparts", f"at most {MAX_DAYPART_ROWS - 1} dayparts")
    for i in range(rows):
        days = sorted({int_field(str(d), f"dayparts[{i}].weekdays")
                       for d in form.getlist(f"dp-{i}-wd")})
        if not days:
            continue
        out.append({"weekdays": days,
                    "start_hour": int_field(str(form.get(f"dp-{i}-start", "")),
                                            f"dayparts[{i}].start_hour"),
                    "end_hour": int_field(str(form.get(f"dp-{i}-end", "")),
                                          f"dayparts[{i}].end_hour")})
        used.append(i)
    return out, used


def rows_of_errors(errors: dict[str, str], used: list[int]) -> dict[str, str]:
    """API field errors on ``dayparts[K]…`` renamed to the form row K came from."""
    out = {}
    for field, problem in errors.items():
        head, sep, rest = field.partition("]")
        if field.startswith("dayparts[") and sep and head[9:].isdigit():
            k = int(head[9:])
            field = f"dayparts[{used[k] if k < len(used) else k}]{rest}"
        out[field] = problem
    return out


def submitted_rows(form: Any) -> list[dict[str, Any]]:
    """The dayparts form's rows as submitted (to show them again with their errors; at
    most :data:`MAX_DAYPART_ROWS`)."""
    try:
        n = min(int(str(form.get("rows", "0"))), MAX_DAYPART_ROWS)
    except ValueError:
        n = 0
    return [{"weekdays": {int(d) for d in form.getlist(f"dp-{i}-wd") if str(d).isdigit()},
             "start_hour": str(form.get(f"dp-{i}-start", "")),
             "end_hour": str(form.get(f"dp-{i}-end", ""))} for i in range(n)]
