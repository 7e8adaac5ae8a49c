"""Targeting expressions: the JSON tree, its validation, evaluation and compilation."""

from adfunnel.targeting.attributes import ATTRIBUTES, MULTI_VALUED
from adfunnel.targeting.evaluate import RequestAttributes, matches
from adfunnel.targeting.expr import (
    All,
    Any_,
    Expr,
    In,
    Not,
    NotIn,
    TargetingError,
    dump_expr,
    parse_expr,
)

__all__ = [
    "ATTRIBUTES",
    "MULTI_VALUED",
    "All",
    "Any_",
    "Expr",
    "In",
    "Not",
    "NotIn",
    "RequestAttributes",
    "TargetingError",
    "dump_expr",
    "matches",
    "parse_expr",
]
