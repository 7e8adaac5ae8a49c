"""How a campaign is sold: the rules tying its priority, goal and budget period together
(issue #25, CONTRACT25), and the money limit of a goal. Pure; no I/O.

:func:`sale_problems` lists *every* broken rule of a campaign at once, each as
``(field, problem)`` naming the API field (``goal.share``, ``goal.total``, ``flight_end``,
``flight_budget_micros``, ``budget_period``, ``priority``, ``bid_type``,
``daily_budget_micros``); :mod:`adfunnel.campaigns.validate` raises them together as one
:class:`~adfunnel.campaigns.errors.InvalidChange` (HTTP 422).

The rules:

- ``sponsorship``: goal ``{"metric": "share", "share": S}`` with 0 < S <= 1, bid type
  CPM (``bid_micros`` is its contract CPM).
- ``guaranteed``: goal ``{"metric": "impressions" | "clicks", "total": N}`` with N >= 1,
  bid type CPM for impressions and CPC for clicks (``bid_micros`` is the contract rate),
  ``flight_end`` set and budget period ``flight``.
- ``auction``: no goal; any budget period.
- budget period ``flight``: ``flight_end`` set, at most :data:`MAX_FLIGHT_DAYS` days after
  ``flight_start`` (the plan is hourly); ``flight_budget_micros`` set unless the
  line has an impressions or clicks goal; ``daily_budget_micros`` is a ceiling on any
  one local day when > 0 (0: none).
- budget periods ``day`` and ``average_day``: no ``flight_budget_micros``;
  ``average_day`` needs ``daily_budget_micros`` > 0 (the average a day may bill twice
  and a calendar month 30.4 times, Google Ads' rule; seed ``002``).
"""

from __future__ import annotations

import math
from datetime import date

from adfunnel.campaigns.model import BidType, BudgetPeriod, Campaign, Goal, GoalMetric, Priority

#: Most impressions or clicks one goal may ask for (a trillion: far above any deal, far
#: below where ``total * bid`` could leave 64 bits at the largest allowed bid).
MAX_GOAL_TOTAL = 10**12
#: Longest flight of a flight budget, days (ten years and a little).
MAX_FLIGHT_DAYS = 3660

#: The bid type a guaranteed line's goal metric is billed by.
GOAL_BID_TYPE = {GoalMetric.IMPRESSIONS: BidType.CPM, GoalMetric.CLICKS: BidType.CPC}

#: A day of an ``average_day`` budget bills at most this many times the daily budget.
AVERAGE_DAY_MAX_FACTOR = 2
#: A local calendar month of an ``average_day`` budget bills at most daily * 304 // 10.
AVERAGE_MONTH_TENTHS = 304

Problem = tuple[str, str]


def goal_cost_micros(campaign: Campaign) -> int | None:
    """The money limit of a guaranteed line's goal over its flight, micros
    (:func:`goal_cost`); None for a line without an impressions or clicks goal."""
    goal = campaign.goal
    if goal is None:
        return None
    return goal_cost(goal.metric, goal.total, campaign.bid_micros)


def goal_cost(metric: object, total: object, bid_micros: object) -> int | None:
    """What ``total`` deliveries of ``metric`` bill at the contract rate ``bid_micros``,
    micros: N impressions at a CPM bill ``N * bid // 1000`` (the ledger's per-mille
    carry, :func:`adfunnel.money.bill_per_mille`, bills exactly that over N events), N
    clicks ``N * bid``. None unless ``metric`` is impressions or clicks and both numbers
    are integers (a share goal has no cost of its own)."""
    if metric not in GOAL_BID_TYPE or not _int(total) or not _int(bid_micros):
        return None
    assert isinstance(total, int) and isinstance(bid_micros, int)
    if GoalMetric(metric) is GoalMetric.IMPRESSIONS:
        return total * bid_micros // 1000
    return total * bid_micros


def average_day_limits(daily_budget_micros: int) -> tuple[int, int]:
    """``(day, month)`` limits of an ``average_day`` budget, micros: a local day at most
    2x the daily budget, a local calendar month at most 30.4x it (``daily * 304 // 10``,
    never rounded up against the advertiser). Source: Google Ads' average daily budget
    (seed ``002``)."""
    return (AVERAGE_DAY_MAX_FACTOR * daily_budget_micros,
            daily_budget_micros * AVERAGE_MONTH_TENTHS // 10)


def sale_problems(c: Campaign) -> list[Problem]:
    """Every broken rule of the module docstring (the goal's first, then the line's, then
    the budget period's); empty when none."""
    problems: list[Problem] = []
    if not isinstance(c.priority, Priority):
        return [("priority", f"must be one of {', '.join(Priority)}")]
    if not isinstance(c.budget_period, BudgetPeriod):
        return [("budget_period", f"must be one of {', '.join(BudgetPeriod)}")]
    if c.goal is not None and not isinstance(c.goal, Goal):
        return [("goal", "must be an object with metric and share or total")]
    if c.priority is Priority.AUCTION:
        if c.goal is not None:
            problems.append(("goal", "only sponsorship and guaranteed lines have a goal "
                                     "(set priority, or leave goal out)"))
    elif c.priority is Priority.SPONSORSHIP:
        problems += _sponsorship(c, c.goal)
    else:
        problems += _guaranteed(c, c.goal)
    problems += _period(c)
    return problems


def _sponsorship(c: Campaign, goal: Goal | None) -> list[Problem]:
    out = _sponsorship_goal(goal)
    if c.bid_type is not BidType.CPM:
        out.append(("bid_type", "a sponsorship is sold per mille: CPM (bid_micros is its "
                                "contract CPM)"))
    return out


def _sponsorship_goal(goal: Goal | None) -> list[Problem]:
    if goal is None:
        return [("goal", 'is required for a sponsorship: {"metric": "share", "share": S}')]
    out: list[Problem] = []
    if goal.metric is not GoalMetric.SHARE:
        out.append(("goal.metric", "a sponsorship's goal is a share of the matching "
                                   'requests: {"metric": "share", "share": S}'))
    share = goal.share
    if share is None:
        out.append(("goal.share", "is required: the share of matching requests, 0 < S <= 1"))
    elif (not isinstance(share, int | float) or isinstance(share, bool)
          or not math.isfinite(share) or not 0 < share <= 1):
        out.append(("goal.share", "must be a number with 0 < share <= 1 (1: a takeover)"))
    if goal.total is not None:
        out.append(("goal.total", "a sponsorship's goal is a share, not a total"))
    return out


def _guaranteed(c: Campaign, goal: Goal | None) -> list[Problem]:
    return [*_guaranteed_goal(c, goal), *_guaranteed_flight(c)]


def _guaranteed_goal(c: Campaign, goal: Goal | None) -> list[Problem]:
    if goal is None:
        return [("goal", "is required for a guaranteed line: "
                         '{"metric": "impressions" | "clicks", "total": N}')]
    out: list[Problem] = []
    if goal.metric not in GOAL_BID_TYPE:
        out.append(("goal.metric", "a guaranteed line's goal is impressions or clicks: "
                                   '{"metric": "impressions", "total": N}'))
    total = goal.total
    if total is None:
        out.append(("goal.total", "is required: the impressions or clicks to deliver "
                                  "over the flight"))
    elif not _int(total) or not 1 <= total <= MAX_GOAL_TOTAL:
        out.append(("goal.total", f"must be an integer 1..{MAX_GOAL_TOTAL}"))
    if goal.share is not None:
        out.append(("goal.share", "a guaranteed line's goal is a total, not a share"))
    wanted = GOAL_BID_TYPE.get(goal.metric)
    if wanted is not None and c.bid_type is not wanted:
        out.append(("bid_type", f"a goal of {goal.metric} is billed {wanted} (bid_micros "
                                "is the contract rate)"))
    return out


def _guaranteed_flight(c: Campaign) -> list[Problem]:
    out: list[Problem] = []
    if c.flight_end is None:
        out.append(("flight_end", "is required for a guaranteed line: its goal is "
                                  "delivered by the flight's end"))
    if c.budget_period is not BudgetPeriod.FLIGHT:
        out.append(("budget_period", "a guaranteed line's budget period is flight"))
    return out


def _period(c: Campaign) -> list[Problem]:
    out: list[Problem] = []
    if c.budget_period is BudgetPeriod.FLIGHT:
        out += _flight_span(c)
        # a guaranteed line's missing flight_end is named once, by _guaranteed
        if c.flight_end is None and c.priority is not Priority.GUARANTEED:
            out.append(("flight_end", "is required with budget_period flight"))
        # a guaranteed line's limit is its goal (a missing or wrong goal is named once)
        has_total = c.priority is Priority.GUARANTEED or (
            isinstance(c.goal, Goal) and c.goal.metric in GOAL_BID_TYPE)
        if c.flight_budget_micros is None and not has_total:
            out.append(("flight_budget_micros", "is required with budget_period flight "
                                                "(unless the line has an impressions or "
                                                "clicks goal)"))
    elif c.flight_budget_micros is not None:
        out.append(("flight_budget_micros", "is only for budget_period flight (null it "
                                            "when changing the period)"))
    if c.budget_period is BudgetPeriod.AVERAGE_DAY and _int(c.daily_budget_micros) and (
            c.daily_budget_micros <= 0):
        out.append(("daily_budget_micros", "must be > 0 with budget_period average_day "
                                           "(it is the average a day bills)"))
    return out


def _flight_span(c: Campaign) -> list[Problem]:
    """A flight budget is planned hour by hour over its flight (:mod:`adfunnel.pacing.flight`):
    at most :data:`MAX_FLIGHT_DAYS` of them."""
    start, end = c.flight_start, c.flight_end
    if not (isinstance(start, date) and isinstance(end, date)) or end < start:
        return []  # a missing or reversed flight is named by its own rule
    if (end - start).days + 1 > MAX_FLIGHT_DAYS:
        return [("flight_end", f"a flight budget's flight spans at most {MAX_FLIGHT_DAYS} "
                               "days (it is planned hour by hour)")]
    return []


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
