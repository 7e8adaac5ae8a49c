"""Warnings about a valid campaign that cannot deliver as written (pure; no I/O).

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
from adfunnel.money import impression_charge_bound


def campaign_warnings(campaign: Campaign, now: datetime) -> list[tuple[str, str]]:
    """``(field, problem)`` for each reason ``campaign`` cannot deliver; ``now`` is UTC."""
    return [*_flight_over(campaign, now), *_charge_over_budget(campaign)]


def max_charge_micros(campaign: Campaign) -> int:
    """The most one billable event of ``campaign`` can charge, micros."""
    if campaign.bid_type is BidType.CPM:
        return impression_charge_bound(campaign.bid_micros)
    return campaign.bid_micros


def _flight_over(campaign: Campaign, now: datetime) -> list[tuple[str, str]]:
    today = local_day(now, campaign.time_zone)
    end = campaign.flight_end
    if end is None or end >= today:
        return []
    return [("flight_end", f"the flight ended on {end.isoformat()}, before today "
             f"({today.isoformat()} in {campaign.time_zone}): the campaign will not serve")]


def _charge_over_budget(campaign: Campaign) -> list[tuple[str, str]]:
    charge = max_charge_micros(campaign)
    if charge <= campaign.daily_budget_micros:
        return []
    unit = "impression" if campaign.bid_type is BidType.CPM else (
        "click" if campaign.bid_type is BidType.CPC else "conversion")
    return [("bid_micros", f"one {unit} can charge up to {charge} micros, more than the "
             f"daily budget of {campaign.daily_budget_micros} micros: no charge ever fits")]
