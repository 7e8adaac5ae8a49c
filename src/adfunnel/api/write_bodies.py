"""What the advertiser API does to a write's body before the store sees it: the fields a
PATCH sets (``null`` only where allowed), a new campaign's sale defaults (its budget
period and an absent daily budget), and targeting checked and put in canonical text.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from adfunnel.campaigns.model import BudgetPeriod, Priority
from adfunnel.http_errors import validation_error
from adfunnel.targeting.expr import TargetingError, dump_expr, parse_expr

try:  # another module of the targeting room; optional until it lands
    from adfunnel.targeting.dnf import compile_dnf as _compile_dnf
except ImportError:  # pragma: no cover - depends on the tree
    _compile_dnf = None


def canonical_targeting(raw: Any) -> str:
    """Validate a targeting JSON tree and return its canonical text (``dump_expr``).

    Also compiles it to DNF when ``adfunnel.targeting.dnf`` exists, so an expression
    whose DNF blows up is refused here rather than by the ad servers.

    Raises:
        TargetingError: with ``path`` naming the offending node (``targeting.all[0].attr``).
    """
    expr = parse_expr(raw)
    if _compile_dnf is not None:
        try:
            _compile_dnf(expr)
        except TargetingError:
            raise
        except (ValueError, RecursionError) as exc:
            raise TargetingError("targeting", str(exc)) from exc
    return dump_expr(raw)


def sale_defaults(values: dict[str, Any]) -> list[tuple[str, str]]:
    """Fill a new campaign's ``budget_period`` (``flight`` for a guaranteed line, else
    ``day``) and, with ``flight``, an absent ``daily_budget_micros`` (0: no daily
    ceiling); mutates ``values``. Returns the problem of an absent daily budget with
    another period (as ``(field, problem)``; none when fine)."""
    if values.get("budget_period") is None:
        values["budget_period"] = (BudgetPeriod.FLIGHT
                                   if values.get("priority") is Priority.GUARANTEED
                                   else BudgetPeriod.DAY)
    if values.get("daily_budget_micros") is not None:
        return []
    if values["budget_period"] is BudgetPeriod.FLIGHT:
        values["daily_budget_micros"] = 0
        return []
    return [("daily_budget_micros", "is required (it may be left out only with "
                                    "budget_period flight)")]


def patch_changes(body: BaseModel, nullable: frozenset[str]) -> dict[str, Any]:
    """The fields a patch body (campaign, ad, placement) sets (``version`` excluded),
    ``null`` only where allowed; lists of dayparts and frequency caps become tuples.

    Raises:
        ApiError: 422 for ``null`` on a non-nullable field or an empty patch.
    """
    names = body.model_fields_set - {"version"}
    if not names:
        raise validation_error(("body", "no fields to change"))
    data = body.model_dump(include=names)
    bad = sorted(n for n in names if data[n] is None and n not in nullable)
    if bad:
        raise validation_error(*((n, "must not be null") for n in bad))
    for name in ("dayparts", "frequency_caps"):
        if name in data:
            data[name] = tuple(data[name])
    return data
