"""How a campaign bids, in the dashboard: the form fields of bid strategy, bid, cap and
target CPA → API fields (issue #27).

Pure. Amounts are entered in currency units and sent as micros. Only the fields the chosen
strategy takes are sent (``campaigns.bidding_terms`` holds the rules and names what is
wrong): a manual bid for ``manual``, a cap for ``max_clicks`` / ``max_conversions``
(empty: none), a target for ``target_cpa``. An automatic strategy's bid is derived by the
API, never sent. Parsers raise :class:`~adfunnel.ui.forms.FieldProblem` naming the API
field they fill.
"""

from __future__ import annotations

from typing import Any

from adfunnel.ui.forms import units_to_micros

BID_STRATEGIES = ("manual", "max_clicks", "max_conversions", "target_cpa")
#: The strategies that may cap their bid per action.
CAPPED = ("max_clicks", "max_conversions")


def bidding_fields(form: Any, *, edit: bool) -> dict[str, Any]:
    """The API fields of the form's ``bid_strategy``, ``bid``, ``bid_cap`` and
    ``target_cpa`` (micros). On create an empty strategy is ``manual``; an empty manual bid
    is left out on edit (the bid stays) and sent as given on create (the API names it)."""
    strategy = str(form.get("bid_strategy", "") or "manual").strip()
    out: dict[str, Any] = {"bid_strategy": strategy}
    bid = str(form.get("bid", "")).strip()
    if strategy == "manual" and (bid or not edit):
        out["bid_micros"] = units_to_micros(bid, "bid_micros")
    elif strategy in CAPPED:
        cap = str(form.get("bid_cap", "")).strip()
        out["bid_cap_micros"] = units_to_micros(cap, "bid_cap_micros") if cap else None
    elif strategy == "target_cpa":
        target = str(form.get("target_cpa", "")).strip()
        out["target_cpa_micros"] = (units_to_micros(target, "target_cpa_micros")
                                    if target else None)
    return out
