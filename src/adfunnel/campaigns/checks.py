"""Warnings about a valid campaign that cannot deliver as written, and the money limits
every campaign write must keep (pure; no I/O).

The advertiser API accepts such a campaign (it may be edited later) and answers its
write with a ``warnings`` list of ``{"field", "problem"}`` items:

- ``flight_end``: the flight ended before the campaign's local today (its time zone,
  on the injected clock), so it will never serve;
- ``bid_micros``: one charge is more than the daily budget, so no charge ever fits.
  The largest single charge is the bid for CPC and CPA and ceil(bid / 1000) micros for
  a CPM impression (:func:`adfunnel.money.impression_charge_bound`).
"""

from __future__ import annotations

from datetime import datetime

from adfunnel.campaigns.model import BidType, Campaign
from adfunnel.campaigns.schedule import local_day

_BUDGET_FIELDS = ("daily_budget_micros", "lifetime_budget_micros")


def money_limit_problems(values: dict[str, object], max_bid_micros: int,
                         max_budget_micros: int) -> list[tuple[str, str]]:
    """``(field, problem)`` for each bid or budget in ``values`` (a create's fields or an
    edit's changes, micros) above its limit: a typo or a forged request must not be
    able to bill without bound (a bid of 2**63 - 1 micros would)."""
    problems: list[tuple[str, str]] = []
    bid = values.get("bid_micros")
    if isinstance(bid, int) and bid > max_bid_micros:
        problems.append(("bid_micros", f"must be <= {max_bid_micros} micros (the server's "
                                       "max_bid_micros)"))
    for field in _BUDGET_FIELDS:
        budget = values.get(field)
        if isinstance(budget, int) and budget > max_budget_micros:
            problems.append((field, f"must be <= {max_budget_micros} micros (the server's "
                                    "max_budget_micros)"))
    return problems


def campaign_warnings(campaign: Campaign, now: datetime) -> list[tuple[str, str]]:
    """``(field, problem)`` for each reason ``campaign`` cannot deliver; ``now`` is UTC."""
    return [*_flight_over(campaign, now), *_charge_over_budget(campaign)]


def _flight_over(campaign: Campaign, now: datetime) -> list[tuple[str, str]]:
    today = local_day(now, campaign.time_zone)
    end = campaign.flight_end
    if end is None or end >= today:
        return []
    return [("flight_end", f"the flight ended on {end.isoformat()}, before today "
             f"({today.isoformat()} in {campaign.time_zone}): the campaign will not serve")]


def _charge_over_budget(campaign: Campaign) -> list[tuple[str, str]]:
    charge = campaign.max_charge_micros
    if charge <= campaign.daily_budget_micros:
        return []
    unit = "impression" if campaign.bid_type is BidType.CPM else (
        "click" if campaign.bid_type is BidType.CPC else "conversion")
    return [("bid_micros", f"one {unit} can charge up to {charge} micros, more than the "
             f"daily budget of {campaign.daily_budget_micros} micros: no charge ever fits")]
