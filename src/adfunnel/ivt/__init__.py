"""Invalid traffic (IVT): reference lists, tier-1 inline rules, tier-2 window scoring.

Pure logic, no I/O on the event path: :mod:`~adfunnel.ivt.lists` loads the crawler
user agents and bot/datacenter IP ranges once; :mod:`~adfunnel.ivt.rules` judges one
event inline (the tracker); :mod:`~adfunnel.ivt.scoring` scores sliding windows over
many events and names the pending events to reverse (the aggregator). Every verdict
carries a :class:`~adfunnel.ivt.reasons.Reason`.
"""

from adfunnel.ivt.lists import (
    CrawlerUserAgents,
    IpKind,
    IpMatch,
    IpRanges,
    crawler_user_agents,
    ip_ranges,
    parse_ip,
    preload,
)
from adfunnel.ivt.reasons import TIER1_REASONS, TIER2_REASONS, Reason
from adfunnel.ivt.rules import (
    CLICK,
    IMPRESSION,
    MIN_CLICK_DELAY_MS,
    VALID,
    EventFacts,
    Tier1Rules,
    Verdict,
)
from adfunnel.ivt.scoring import RateLimit, Reversal, Tier2Config, Tier2Scorer

__all__ = [
    "CLICK",
    "IMPRESSION",
    "MIN_CLICK_DELAY_MS",
    "TIER1_REASONS",
    "TIER2_REASONS",
    "VALID",
    "CrawlerUserAgents",
    "EventFacts",
    "IpKind",
    "IpMatch",
    "IpRanges",
    "RateLimit",
    "Reason",
    "Reversal",
    "Tier1Rules",
    "Tier2Config",
    "Tier2Scorer",
    "Verdict",
    "crawler_user_agents",
    "ip_ranges",
    "parse_ip",
    "preload",
]
