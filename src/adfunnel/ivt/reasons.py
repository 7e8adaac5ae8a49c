"""Why an event is invalid traffic: one vocabulary for both tiers, rollups and reports.

Tier 1 (:mod:`adfunnel.ivt.rules`) decides inline, per event, from the event alone and
the reference lists; tier 2 (:mod:`adfunnel.ivt.scoring`) decides later, from sliding
windows over many events, and reverses events still pending.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """A reason code; its value is what logs, rollups and reports carry."""

    # tier 1: one event on its own
    MISSING_UA = "missing_ua"  # no User-Agent header, or a blank one
    CRAWLER_UA = "crawler_ua"  # the User-Agent matches a known crawler/bot pattern
    BAD_IP = "bad_ip"  # the client address does not parse as IPv4 or IPv6
    CRAWLER_IP = "crawler_ip"  # from a declared bot's published range (Googlebot, Bingbot, …)
    DATACENTER_IP = "datacenter_ip"  # from a hosting, cloud or VPN range: no eyeball network
    IMPOSSIBLE_TIMING = "impossible_timing"  # a click sooner after its serve than a person can
    # tier 2: windows over many events
    CLICK_RATE = "click_rate"  # more clicks per IP and user key than a rate limit allows
    IMPRESSION_RATE = "impression_rate"  # more impressions per IP per minute than the limit
    CTR_OUTLIER = "ctr_outlier"  # an IP's click-through rate on a placement far above normal
    TIMING = "timing"  # click-after-impression delays too short or too regular for a person


TIER1_REASONS: frozenset[Reason] = frozenset({
    Reason.MISSING_UA, Reason.CRAWLER_UA, Reason.BAD_IP, Reason.CRAWLER_IP,
    Reason.DATACENTER_IP, Reason.IMPOSSIBLE_TIMING,
})
TIER2_REASONS: frozenset[Reason] = frozenset(Reason) - TIER1_REASONS
