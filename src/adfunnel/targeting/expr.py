"""The targeting expression tree: parsing, validation and canonical serialisation.

JSON shape (grouping is always explicit; there is no and/or precedence)::

    {"all": [E, ...]}            every child matches
    {"any": [E, ...]}            at least one child matches
    {"not": E}                   the child does not match
    {"attr": A, "in": [v, ...]}      the request's value(s) of A intersect the set
    {"attr": A, "not_in": [v, ...]}  the request's value(s) of A avoid the set

Values are non-empty strings (request attributes are strings too). The parsed tree
holds them in the case of their attribute (:data:`adfunnel.targeting.attributes.VALUE_CASE`:
``geo.country`` upper, ``os`` lower, ids as given), which the request side applies too;
:func:`dump_expr` keeps the advertiser's spelling.
Unknown attributes, unknown keys and empty value lists are refused with a
:class:`TargetingError` naming the path of the offending node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from adfunnel.targeting.attributes import ATTRIBUTES, normalise_value

#: Deepest nesting accepted; deeper trees are refused (they are never hand-written).
MAX_DEPTH = 12
#: Most values in one leaf term.
MAX_VALUES = 10_000


class TargetingError(ValueError):
    """A targeting expression that cannot be accepted; ``path`` locates the node."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True, slots=True)
class In:
    attr: str
    values: frozenset[str]


@dataclass(frozen=True, slots=True)
class NotIn:
    attr: str
    values: frozenset[str]


@dataclass(frozen=True, slots=True)
class All:
    children: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Any_:
    children: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Not:
    child: Expr


Expr = In | NotIn | All | Any_ | Not


def parse_expr(raw: Any, path: str = "targeting") -> Expr:
    """Validate a JSON value (already decoded) and build the expression tree.

    Raises:
        TargetingError: unknown attribute or operator, empty value list, wrong types.
    """
    return _parse(raw, path, 0)


def _parse(raw: Any, path: str, depth: int) -> Expr:
    if depth > MAX_DEPTH:
        raise TargetingError(path, f"nested deeper than {MAX_DEPTH} levels")
    if not isinstance(raw, dict):
        raise TargetingError(path, "must be an object")
    if "attr" in raw:
        return _parse_leaf(raw, path)
    keys = set(raw)
    if len(keys) != 1 or not keys <= {"all", "any", "not"}:
        raise TargetingError(
            path,
            "expected exactly one of 'all', 'any', 'not' or a leaf with 'attr', "
            f"got {sorted(keys)}",
        )
    op = next(iter(keys))
    if op == "not":
        return Not(_parse(raw["not"], f"{path}.not", depth + 1))
    children = raw[op]
    if not isinstance(children, list) or not children:
        raise TargetingError(f"{path}.{op}", "must be a non-empty list")
    parsed = tuple(_parse(c, f"{path}.{op}[{i}]", depth + 1) for i, c in enumerate(children))
    return All(parsed) if op == "all" else Any_(parsed)


def _parse_leaf(raw: dict[str, Any], path: str) -> Expr:
    attr = raw["attr"]
    if not isinstance(attr, str) or attr not in ATTRIBUTES:
        raise TargetingError(f"{path}.attr", f"unknown attribute {attr!r}")
    ops = set(raw) - {"attr"}
    if ops not in ({"in"}, {"not_in"}):
        raise TargetingError(
            path, f"a leaf needs exactly one of 'in' or 'not_in', got {sorted(ops)}"
        )
    op = next(iter(ops))
    values = raw[op]
    if not isinstance(values, list) or not values:
        raise TargetingError(f"{path}.{op}", "must be a non-empty list of values")
    if len(values) > MAX_VALUES:
        raise TargetingError(f"{path}.{op}", f"more than {MAX_VALUES} values")
    out: set[str] = set()
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise TargetingError(f"{path}.{op}[{i}]", "values must be strings")
        if not v.strip():
            raise TargetingError(f"{path}.{op}[{i}]", "empty value")
        out.add(normalise_value(attr, v))  # compared in the attribute's case; stored as given
    return In(attr, frozenset(out)) if op == "in" else NotIn(attr, frozenset(out))


def dump_expr(raw: Any) -> str:
    """Canonical text of a validated JSON expression: key order kept, no spaces.

    Stored as given, so what an advertiser wrote reads back identically and a
    save of what was read produces the same bytes.
    """
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":"))


def attributes_of(expr: Expr) -> set[str]:
    """Every attribute named anywhere in ``expr``."""
    if isinstance(expr, In | NotIn):
        return {expr.attr}
    if isinstance(expr, Not):
        return attributes_of(expr.child)
    out: set[str] = set()
    for c in expr.children:
        out |= attributes_of(c)
    return out
