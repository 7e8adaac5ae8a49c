"""Warnings about a valid campaign that cannot deliver as written, and the money limits
every campaign write must keep (pure; no I/O).

The advertiser API accepts such a campaign (it may be edited later) and answers its
write with a ``warnings`` list of ``{"field", "problem"}`` items:

- ``flight_end``: the flight ended before the campaign's local today (its time zone,
  on the injected clock), so it will never serve;
- ``bid_micros``: one charge is more than the daily budget (for a flight without a daily
  ceiling: the flight's budget or goal cost), so no charge ever fits. The largest
  single charge is the bid for CPC and CPA and ceil(bid / 1000) micros for a CPM
  impression (:func:`adfunnel.money.impression_charge_bound`);
- ``flight_budget_micros``: a flight budget below the goal's cost, so the goal cannot
  be met.
"""

from __future__ import annotations

from datetime import datetime

from adfunnel.campaigns.model import BidType, BudgetPeriod, Campaign
from adfunnel.campaigns.sales import goal_cost, goal_cost_micros
from adfunnel.campaigns.schedule import local_day

#: A bid, and what an automatic strategy's bid is derived from (a cap, a target).
_BID_FIELDS = ("bid_micros", "bid_cap_micros", "target_cpa_micros")
_BUDGET_FIELDS = ("daily_budget_micros", "lifetime_budget_micros", "flight_budget_micros")


def money_limit_problems(values: dict[str, object], max_bid_micros: int,
                         max_budget_micros: int,
                         current: Campaign | None = None) -> list[tuple[str, str]]:
    """``(field, problem)`` for each bid or budget in ``values`` (a create's fields or an
    edit's changes, micros) above its limit: a typo or a forged request must not be
    able to bill without bound (a bid of 2**63 - 1 micros would).

    A goal's cost (its total at the contract rate: ``goal.total`` x ``bid_micros``, per
    mille for impressions; :func:`adfunnel.campaigns.sales.goal_cost_micros`) is a
    budget too: above ``max_budget_micros`` it is refused as ``goal.total``. An edit's
    goal or bid is priced with the other from ``current`` (the campaign before it)."""
    problems: list[tuple[str, str]] = []
    for field in _BID_FIELDS:
        bid = values.get(field)
        if isinstance(bid, int) and bid > max_bid_micros:
            problems.append((field, f"must be <= {max_bid_micros} micros (the server's "
                                    "max_bid_micros)"))
    for field in _BUDGET_FIELDS:
        budget = values.get(field)
        if isinstance(budget, int) and budget > max_budget_micros:
            problems.append((field, f"must be <= {max_budget_micros} micros (the server's "
                                    "max_budget_micros)"))
    cost = _goal_cost(values, current)
    if cost is not None and cost > max_budget_micros:
        problems.append(("goal.total", f"costs {cost} micros at the contract rate, above "
                                       f"{max_budget_micros} micros (the server's "
                                       "max_budget_micros)"))
    return problems


def _goal_cost(values: dict[str, object], current: Campaign | None) -> int | None:
    """The cost of the goal ``values`` (or ``current``) sets at the bid of ``values``
    (or ``current``), micros; None without a total to price."""
    goal = values.get("goal", current.goal if current is not None else None)
    bid = values.get("bid_micros", current.bid_micros if current is not None else None)
    if isinstance(goal, dict):
        return goal_cost(goal.get("metric"), goal.get("total"), bid)
    if goal is None:
        return None
    return goal_cost(getattr(goal, "metric", None), getattr(goal, "total", None), bid)


def campaign_warnings(campaign: Campaign, now: datetime) -> list[tuple[str, str]]:
    """``(field, problem)`` for each reason ``campaign`` cannot deliver; ``now`` is UTC."""
    return [*_flight_over(campaign, now), *_charge_over_budget(campaign),
            *_flight_budget_below_goal(campaign)]


def _flight_over(campaign: Campaign, now: datetime) -> list[tuple[str, str]]:
    today = local_day(now, campaign.time_zone)
    end = campaign.flight_end
    if end is None or end >= today:
        return []
    return [("flight_end", f"the flight ended on {end.isoformat()}, before today "
             f"({today.isoformat()} in {campaign.time_zone}): the campaign will not serve")]


def _charge_over_budget(campaign: Campaign) -> list[tuple[str, str]]:
    charge = campaign.max_charge_micros
    name, budget = "daily budget", campaign.daily_budget_micros
    if campaign.budget_period is BudgetPeriod.FLIGHT and budget == 0:
        # no daily ceiling: the flight's own limit is what a charge must fit in
        limits = [m for m in (campaign.flight_budget_micros, goal_cost_micros(campaign))
                  if m is not None]
        if not limits:
            return []
        name, budget = "flight's budget", min(limits)
    if charge <= budget:
        return []
    unit = "impression" if campaign.bid_type is BidType.CPM else (
        "click" if campaign.bid_type is BidType.CPC else "conversion")
    return [("bid_micros", f"one {unit} can charge up to {charge} micros, more than the "
             f"{name} of {budget} micros: no charge ever fits")]


def _flight_budget_below_goal(campaign: Campaign) -> list[tuple[str, str]]:
    cost = goal_cost_micros(campaign)
    budget = campaign.flight_budget_micros
    if cost is None or budget is None or budget >= cost:
        return []
    return [("flight_budget_micros", f"{budget} micros is less than the goal's cost of "
             f"{cost} micros: the goal cannot be met")]
