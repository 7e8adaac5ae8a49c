"""The replay's campaigns and requests: how each of the nine iPinYou advertisers is set up
(bid type, budget, targeting, pacing, caps), its ads' sizes and landing URL, and the ad
request a feed would send for one log row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adfunnel.money import MICROS_PER_FEN
from adfunnel.sim.ipinyou import LogRow, split_useragent

REPLAY_DEADLINE_MS = 2_000
#: The banner sizes of each campaign's ten ads.
SIZES = ("300x250", "728x90", "1000x90", "250x250", "336x280", "950x90", "200x200",
         "468x60", "120x240", "960x90")


@dataclass(frozen=True)
class CampaignPlan:
    """How one iPinYou advertiser is set up: bid type, daily budget (CNY) and targeting."""

    advertiser: str
    bid_type: str
    daily_budget_cny: float
    targeting: dict[str, Any] | None
    pacing_mode: str = "accelerated"
    frequency_caps: tuple[dict[str, Any], ...] = ()


#: The frequency cap of two replay campaigns (1458 and 3386): 3 serves per user per
#: local day.
CAP_3_PER_DAY = ({"level": "campaign", "count": 3, "window": "day"},)


def plans() -> list[CampaignPlan]:
    """The nine campaigns. The small CPM budgets (2259, 3358, 3476: 50-700 impressions)
    bind. Two large CPM campaigns (1458, 3386) are capped at 3 serves per user per day.
    Four campaigns pace evenly over the day (2259 binds; 1458, 2261, 2821 do not).
    The CPC budgets hold ten clicks at the bid: at this log's traffic a CPC campaign
    earns about one click a day, and a budget small enough to bind would be one or two
    clicks, where a day's delivery moves in steps of 50 %."""
    cities_a = ["219", "217", "233"]
    cities_b = ["222", "227", "220", "234"]
    banners = ["728x90", "1000x90", "950x90", "960x90", "468x60"]
    return [
        CampaignPlan("1458", "CPM", 500.0, {"attr": "geo.city", "in": cities_a}, "even",
                     CAP_3_PER_DAY),
        CampaignPlan("2259", "CPM", 0.4, {"attr": "geo.region", "in": ["CN-216"]}, "even"),
        CampaignPlan("2261", "CPC", 30.0, {"attr": "interests", "in": ["10063", "10006"]},
                     "even"),
        CampaignPlan("2821", "CPC", 15.0, {"attr": "slot_size", "in": ["300x250", "336x280"]},
                     "even"),
        CampaignPlan("2997", "CPC", 500.0, {"attr": "exchange", "in": ["1"]}),
        CampaignPlan("3358", "CPM", 0.05, {"all": [
            {"attr": "exchange", "not_in": ["3"]},
            {"attr": "interests", "in": ["10110", "10083", "10059"]}]}),
        CampaignPlan("3386", "CPM", 500.0, {"attr": "slot_size", "in": banners},
                     frequency_caps=CAP_3_PER_DAY),
        CampaignPlan("3427", "CPC", 500.0, {"not": {"attr": "geo.city", "in": cities_b}}),
        CampaignPlan("3476", "CPM", 0.05, {"all": [
            {"attr": "os", "in": ["windows"]}, {"attr": "browser", "in": ["chrome"]}]}),
    ]


def landing_url(advertiser: str) -> str:
    return f"https://adv{advertiser}.example/landing?src=adfunnel&adv={advertiser}&q=a%20b"


def ad_request(row: LogRow, request_id: str | None = None) -> dict[str, Any]:
    """The ad request a feed would send for one log row (named ``request_id`` when
    given; else the server names it)."""
    device, os_name, browser = split_useragent(row.useragent)
    attrs: dict[str, Any] = {
        "geo.country": "CN", "geo.region": f"CN-{row.region}", "geo.city": row.city,
        "device_type": device, "os": os_name, "browser": browser,
    }
    if row.usertags:
        attrs["interests"] = list(row.usertags)
    out: dict[str, Any] = {
        "user": {"key": row.user, "attributes": attrs},
        "placement": {"id": row.slot_id, "exchange": row.exchange, "domain": row.domain,
                      "reserve_cpm_micros": row.slot_price_fen * MICROS_PER_FEN},
        "slots": [{"id": "s1", "position": 1, "width": row.width, "height": row.height,
                   "format": "banner", "visibility": row.visibility}],
        # a generous deadline: a replay checks decisions, not this machine's load, and a
        # late decision (204) would make the report depend on timing
        "deadline_ms": REPLAY_DEADLINE_MS,
    }
    if request_id is not None:
        out["request_id"] = request_id
    return out
