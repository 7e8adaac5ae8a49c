"""A campaign's bid strategy terms (issue #27): which fields each strategy needs, the
``bid_micros`` an automatic strategy derives, and when λ must restart. Pure; no I/O.

``bid_micros`` of an automatic strategy is the value v of one action and the ceiling of
any bid it makes (bid = pCTR × v / λ, λ ≥ 1), so the budget's bounds that read
``bid_micros`` (``Campaign.max_charge_micros``, slices, the gate) hold unchanged:

- ``target_cpa``: ``target_cpa_micros``;
- ``max_clicks`` / ``max_conversions``: ``bid_cap_micros`` when given, else
  ⌊period budget / 100⌋ — one action never costs more than 1 % of the budget of its
  period (the daily budget; the flight budget with ``budget_period`` flight), so the
  budget's last-charge margin leaves at most 1 % of it unspent.

The rules (every broken one as ``(field, problem)``, :func:`strategy_problems`):
``max_clicks`` is billed per click (``bid_type`` CPC) and states the ``objective``
clicks, ``max_conversions`` and ``target_cpa`` per conversion (CPA) with the objective
conversions (a strategy optimises the action the campaign states as its goal);
``target_cpa`` requires ``target_cpa_micros`` > 0; ``bid_cap_micros`` (> 0) only with
max_clicks or max_conversions; ``target_cpa_micros`` only with target_cpa; a
sponsorship or guaranteed line bids its contract rate (``manual``); an automatic
strategy's ``bid_micros`` is the derived one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from adfunnel.campaigns.model import (
    BidStrategy,
    BidType,
    BudgetPeriod,
    Campaign,
    Objective,
    Priority,
)

#: An action costs at most 1 / this of the period's budget when no cap is given.
PERIOD_BUDGET_ACTIONS = 100
#: The bid type each automatic strategy is billed by (the action it optimises).
STRATEGY_BID_TYPE = {BidStrategy.MAX_CLICKS: BidType.CPC,
                     BidStrategy.MAX_CONVERSIONS: BidType.CPA,
                     BidStrategy.TARGET_CPA: BidType.CPA}
#: The objective each automatic strategy serves.
STRATEGY_OBJECTIVE = {BidStrategy.MAX_CLICKS: Objective.CLICKS,
                      BidStrategy.MAX_CONVERSIONS: Objective.CONVERSIONS,
                      BidStrategy.TARGET_CPA: Objective.CONVERSIONS}
#: Strategies that may cap their bid.
CAPPED = frozenset({BidStrategy.MAX_CLICKS, BidStrategy.MAX_CONVERSIONS})
#: Fields whose change restarts λ (a new strategy, cap or target).
TERMS = ("bid_strategy", "bid_cap_micros", "target_cpa_micros")
#: Fields the derived ``bid_micros`` reads.
INPUTS = (*TERMS, "daily_budget_micros", "flight_budget_micros", "budget_period")

Problem = tuple[str, str]


def is_automatic(strategy: object) -> bool:
    return strategy in STRATEGY_BID_TYPE


def derived_bid_micros(strategy: object, *, bid_cap_micros: object = None,
                       target_cpa_micros: object = None, budget_period: object = None,
                       daily_budget_micros: object = None,
                       flight_budget_micros: object = None) -> int | None:
    """The ``bid_micros`` an automatic ``strategy`` derives (module docstring), micros;
    None for ``manual``, or when the inputs do not give a positive integer (a missing
    target, a budget under 100 micros: :func:`strategy_problems` names why)."""
    if strategy is BidStrategy.TARGET_CPA:
        value = target_cpa_micros
    elif strategy in CAPPED and bid_cap_micros is not None:
        value = bid_cap_micros
    elif strategy in CAPPED:
        budget = (flight_budget_micros if budget_period is BudgetPeriod.FLIGHT
                  else daily_budget_micros)
        value = budget // PERIOD_BUDGET_ACTIONS if _int(budget) else None  # type: ignore[operator]
    else:
        return None
    return value if _int(value) and value > 0 else None  # type: ignore[operator]


def campaign_derived_bid(c: Campaign) -> int | None:
    """:func:`derived_bid_micros` of a campaign's own fields."""
    return derived_bid_micros(
        c.bid_strategy, bid_cap_micros=c.bid_cap_micros, target_cpa_micros=c.target_cpa_micros,
        budget_period=c.budget_period, daily_budget_micros=c.daily_budget_micros,
        flight_budget_micros=c.flight_budget_micros)


def strategy_problems(c: Campaign) -> list[Problem]:
    """Every broken rule of the module docstring; empty when none."""
    s = c.bid_strategy
    if not isinstance(s, BidStrategy):
        return [("bid_strategy", f"must be one of {', '.join(BidStrategy)}")]
    out: list[Problem] = []
    if s is not BidStrategy.MANUAL and c.priority is not Priority.AUCTION:
        out.append(("bid_strategy", "a sponsorship or guaranteed line bids its contract "
                                    "rate: manual"))
    wanted = STRATEGY_BID_TYPE.get(s)
    if wanted is not None and c.bid_type is not wanted:
        out.append(("bid_type", f"{s} is billed per {_ACTION[wanted]}: {wanted} (the "
                                "advertiser pays for the action it optimises)"))
    goal = STRATEGY_OBJECTIVE.get(s)
    if goal is not None and c.objective is not goal:
        out.append(("objective", f"{s} optimises {goal}: the objective must be {goal}"))
    out += _field_problems(c, s)
    derived = campaign_derived_bid(c)
    if s in CAPPED and c.bid_cap_micros is None and derived is None:
        budget = ("flight_budget_micros" if c.budget_period is BudgetPeriod.FLIGHT
                  else "daily_budget_micros")
        out.append((budget, f"must be >= {PERIOD_BUDGET_ACTIONS} micros with {s} and no "
                            "bid_cap_micros (one action costs at most 1 % of it)"))
    if derived is not None and c.bid_micros != derived:
        out.append(("bid_micros", f"is derived for bid_strategy {s}: {derived} micros"))
    return out


def _field_problems(c: Campaign, s: BidStrategy) -> list[Problem]:
    out: list[Problem] = []
    if s is BidStrategy.TARGET_CPA and c.target_cpa_micros is None:
        out.append(("target_cpa_micros", "is required with bid_strategy target_cpa: the "
                                         "most the flight's average conversion may cost"))
    for name, allowed, who in (("target_cpa_micros", {BidStrategy.TARGET_CPA}, "target_cpa"),
                               ("bid_cap_micros", CAPPED, "max_clicks or max_conversions")):
        value = getattr(c, name)
        if value is None:
            continue
        if s not in allowed:
            out.append((name, f"is only for bid_strategy {who} (null it when changing "
                              "the strategy)"))
        elif not _int(value) or not 0 < value <= 2**63 - 1:
            out.append((name, "must be an integer number of micros > 0"))
    return out


def bidding_terms(values: dict[str, Any], current: Campaign | None,
                  now: datetime) -> list[Problem]:
    """Put a write's bid strategy terms in ``values`` (a create's fields, or a PATCH's
    changes to ``current``); mutates ``values``. The one place the API sets them:

    - an automatic strategy's ``bid_micros`` is derived (given by the client: a problem,
      it is derived); a manual one's is required on create;
    - a strategy change drops the old strategy's cap or target the write does not set;
    - ``bid_strategy_since`` is ``now`` (UTC) on create and whenever the strategy, cap
      or target changes, so the budget service restarts λ at its safe value.

    Returns the problems found as ``(field, problem)``; the remaining rules are
    :func:`strategy_problems`' (run by the store on the record).
    """
    def after(name: str) -> Any:  # the field once the write applies
        return values[name] if name in values else getattr(current, name, None)

    strategy = after("bid_strategy") or BidStrategy.MANUAL
    if current is None:
        values["bid_strategy"] = strategy
    elif "bid_strategy" in values and strategy is not current.bid_strategy:
        for name, allowed in (("bid_cap_micros", CAPPED),
                              ("target_cpa_micros", {BidStrategy.TARGET_CPA})):
            if name not in values and strategy not in allowed:
                values[name] = None
    problems: list[Problem] = []
    given = values.get("bid_micros") is not None
    if is_automatic(strategy):
        if given:
            problems.append(("bid_micros", f"is derived for bid_strategy {strategy} (the "
                                           "value of one action and the ceiling of any "
                                           "bid): leave it out"))
        derived = derived_bid_micros(strategy, **{n: after(n) for n in INPUTS[1:]})
        # underivable: the problem that prevents it is named; this placeholder is never stored
        values["bid_micros"] = derived if derived is not None else (
            current.bid_micros if current is not None else 1)
        if current is not None and values["bid_micros"] == current.bid_micros:
            values.pop("bid_micros")
    elif current is None and not given:
        problems.append(("bid_micros", "is required with bid_strategy manual"))
    if current is None or any(n in values and values[n] != getattr(current, n) for n in TERMS):
        values["bid_strategy_since"] = _since(now, current)
    return problems


def _since(now: datetime, current: Campaign | None) -> datetime:
    """``bid_strategy_since`` of new terms: ``now`` (UTC), or a microsecond after the last
    one where the clock has not moved past it (a manual clock, a replay): the same
    instant twice would be no change to the budget service and the ad servers, and λ of
    the first new terms would bid the second ones."""
    since = now.astimezone(UTC)
    last = current.bid_strategy_since if current is not None else None
    if last is not None and since <= last:
        return last + timedelta(microseconds=1)
    return since


def name_the_source(problems: list[Problem], values: dict[str, Any],
                    current: Campaign | None) -> list[Problem]:
    """``problems`` with a limit broken by a *derived* ``bid_micros`` named by what it is
    derived from: a cap or target above the limit is already named by itself, a ceiling
    from the budget asks for ``bid_cap_micros`` (the client never gave ``bid_micros``)."""
    strategy = values.get("bid_strategy", getattr(current, "bid_strategy", None))
    if not is_automatic(strategy):
        return problems
    named = {f for f, _ in problems}
    out: list[Problem] = []
    for field, problem in problems:
        if field == "bid_micros" and "derived" not in problem:
            if strategy is BidStrategy.TARGET_CPA or "bid_cap_micros" in named:
                continue
            if values.get("bid_cap_micros", getattr(current, "bid_cap_micros", None)) is None:
                field, problem = "bid_cap_micros", (
                    f"is required here: 1 % of the period's budget, the derived bid, {problem}")
        out.append((field, problem))
    return out


_ACTION = {BidType.CPC: "click", BidType.CPA: "conversion", BidType.CPM: "mille"}


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
