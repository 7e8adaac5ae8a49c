"""Direct evaluation of a targeting expression against a request (the reference semantics).

The index must return exactly the ads this evaluator accepts; property tests
compare the two.

Semantics of a missing attribute: the request has no value for A.
- ``A in S`` is false (an absent value is in no set);
- ``A not_in S`` is true (an absent value avoids every set).
"""

from __future__ import annotations

from collections.abc import Mapping

from adfunnel.targeting.expr import All, Any_, Expr, In, Not, NotIn

#: attribute -> the request's values (single-valued attributes hold one).
RequestAttributes = Mapping[str, frozenset[str]]


def matches(expr: Expr, request: RequestAttributes) -> bool:
    """True when ``request`` satisfies ``expr``."""
    if isinstance(expr, In):
        got = request.get(expr.attr)
        return bool(got) and not expr.values.isdisjoint(got)
    if isinstance(expr, NotIn):
        got = request.get(expr.attr)
        return not got or expr.values.isdisjoint(got)
    if isinstance(expr, All):
        return all(matches(c, request) for c in expr.children)
    if isinstance(expr, Any_):
        return any(matches(c, request) for c in expr.children)
    if isinstance(expr, Not):
        return not matches(expr.child, request)
    raise TypeError(f"not a targeting expression: {expr!r}")
