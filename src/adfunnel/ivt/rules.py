"""Tier-1 invalid-traffic rules: inline, per event, pure (no clock, no I/O per call).

The tracker applies them to each beacon before appending it to the event log; an
invalid event is logged with its reason and never billed, never counted toward a
budget, never used for training (DESIGN §Events and billing).

The checks run in this order and the first that fails names the verdict:

1. ``missing_ua``: no User-Agent, or only whitespace (every browser sends one);
2. ``crawler_ua``: the User-Agent matches a crawler-user-agents pattern (Googlebot is
   invalid even from Google's own addresses: a bot is never billed);
3. ``bad_ip``: the client address does not parse (:func:`~adfunnel.ivt.lists.parse_ip`);
4. ``crawler_ip``: the address is in a declared bot's published range;
5. ``datacenter_ip``: the address is in a hosting/cloud/VPN range and not in a
   privacy relay's;
6. ``impossible_timing``: a click less than
   :data:`~adfunnel.settings.ivt.MIN_CLICK_DELAY_MS` after its
   impression (or, the impression time unknown, after its serve).

Apply them to what a browser sends (impression and click beacons, a conversion
pixel), not to a server-to-server conversion postback, which comes from the
advertiser's servers by design.
"""

from __future__ import annotations

from dataclasses import dataclass

from adfunnel.ivt.lists import (
    CrawlerUserAgents,
    IpRanges,
    crawler_user_agents,
    ip_ranges,
    parse_ip,
)
from adfunnel.ivt.reasons import Reason
from adfunnel.settings.ivt import MIN_CLICK_DELAY_MS, IpKind

#: Event types, the values of :class:`adfunnel.billing.model.EventType` (a ``StrEnum``
#: member compares equal to its value, so either may be passed).
IMPRESSION = "impression"
CLICK = "click"



@dataclass(frozen=True, slots=True)
class EventFacts:
    """What invalid-traffic detection knows about one tracked event.

    Times are unix epoch milliseconds (ints). ``served_at_ms`` is the serve (token
    issue) time, ``event_at_ms`` when the tracker received the beacon,
    ``impression_at_ms`` the impression's receipt time when known (a click's token
    does not carry it; the aggregator knows it). ``client_ip`` is the socket peer or
    the trusted proxy's ``X-Forwarded-For`` entry, unparsed. The last three fields
    serve tier 2 (:mod:`adfunnel.ivt.scoring`): the impression id the event belongs
    to, the user key (None when the request had none) and the placement.
    """

    event_type: str
    client_ip: str
    user_agent: str | None
    served_at_ms: int
    event_at_ms: int
    impression_at_ms: int | None = None
    impression_id: str = ""
    user_key: str | None = None
    placement: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Valid, or invalid with its reason. Invariant: ``valid`` ⇔ ``reason is None``.

    Raises:
        ValueError: on construction, when the invariant does not hold.
    """

    valid: bool
    reason: Reason | None = None

    def __post_init__(self) -> None:
        if self.valid != (self.reason is None):
            raise ValueError(f"valid={self.valid} with reason={self.reason!r}")


VALID = Verdict(True)
#: one shared invalid verdict per reason (the hot path builds none)
INVALID: dict[Reason, Verdict] = {reason: Verdict(False, reason) for reason in Reason}


class Tier1Rules:
    """The tier-1 checks over given lists (default: the process-wide ones, which this
    constructor loads when they are not loaded yet).

    Args:
        user_agents: crawler patterns; None = :func:`~adfunnel.ivt.lists.crawler_user_agents`.
        ranges: IP ranges; None = :func:`~adfunnel.ivt.lists.ip_ranges`.
        min_click_delay_ms: the ``impossible_timing`` bound (ms, ≥ 0).

    Raises:
        FileNotFoundError: the default IP ranges' data directory or a file is missing.
        ValueError: ``min_click_delay_ms`` is negative.
    """

    def __init__(self, user_agents: CrawlerUserAgents | None = None,
                 ranges: IpRanges | None = None, *,
                 min_click_delay_ms: int = MIN_CLICK_DELAY_MS) -> None:
        if min_click_delay_ms < 0:
            raise ValueError(f"min_click_delay_ms must be >= 0, got {min_click_delay_ms}")
        self.user_agents = user_agents if user_agents is not None else crawler_user_agents()
        self.ranges = ranges if ranges is not None else ip_ranges()
        self.min_click_delay_ms = min_click_delay_ms

    def check(self, event: EventFacts) -> Verdict:
        """The event's verdict; the first failing check (module docstring order) names it.

        Pure: the same event and lists always give the same verdict. A few µs.
        Raises nothing for any field values.
        """
        ua = event.user_agent
        if ua is None or not ua.strip():
            return INVALID[Reason.MISSING_UA]
        if self.user_agents.is_crawler(ua):
            return INVALID[Reason.CRAWLER_UA]
        try:
            packed = parse_ip(event.client_ip)
        except ValueError:
            return INVALID[Reason.BAD_IP]
        match = self.ranges.lookup_packed(packed)
        if match is not None:
            if match.kind is IpKind.CRAWLER:
                return INVALID[Reason.CRAWLER_IP]
            if match.kind is IpKind.DATACENTER:
                return INVALID[Reason.DATACENTER_IP]
        if event.event_type == CLICK and self.click_too_soon(event):
            return INVALID[Reason.IMPOSSIBLE_TIMING]
        return VALID

    def click_too_soon(self, event: EventFacts) -> bool:
        """Whether the click came less than ``min_click_delay_ms`` after its impression,
        or after its serve when the impression time is unknown (a click before either
        counts as too soon)."""
        start = event.impression_at_ms if event.impression_at_ms is not None else (
            event.served_at_ms)
        return event.event_at_ms - start < self.min_click_delay_ms
