"""The invalid-traffic settings as values: tier-2 thresholds with their defaults, the IP lists.

They sit in the foundation, below the ivt room, so that :class:`adfunnel.settings.Settings`
checks them at start-up with the ivt room's own rules (one rule each: the ``COUNT/SECONDS``
form of a rate limit, thresholds that fit together, the names of the IP lists); the ivt
room builds its scorer (:mod:`adfunnel.ivt.scoring`), rules and range trees
(:mod:`adfunnel.ivt.lists`) from them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS


#: A click sooner than this after its impression (or serve) is not a person's, in
#: milliseconds. A person's fastest response to something seen is a simple reaction
#: time of about 200–250 ms (perceive, decide, press: Card, Moran & Newell's Model
#: Human Processor puts the cycle near 240 ms); clicking an ad also needs the ad to be
#: seen and the pointer moved onto it (Fitts's law: a few hundred ms more), so a
#: genuine click takes well over 500 ms. The margin covers the serve time's
#: truncation to whole seconds in the token (which only lengthens the measured delay)
#: but not clock skew between the ad server and tracker hosts: keep them NTP-synced.
MIN_CLICK_DELAY_MS = 500


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` events in any ``window_ms`` milliseconds (window ``(t - w, t]``).

    Raises:
        ValueError: ``limit`` < 0 or ``window_ms`` ≤ 0.
    """

    limit: int
    window_ms: int

    def __post_init__(self) -> None:
        if self.limit < 0 or self.window_ms <= 0:
            raise ValueError(f"need limit >= 0 and window_ms > 0, got {self}")

    def __str__(self) -> str:
        return f"{self.limit}/{self.window_ms}ms"


#: Clicks per (client IP, user key): 1 a minute, 3 in 10 minutes, 10 an hour, 25 a day.
#: The defaults of EthicalAds (readthedocs/ethical-ad-server, setting
#: ``ADSERVER_CLICK_RATELIMITS = ["1/m", "3/10m", "10/h", "25/d"]``), which keys them
#: per IP over fixed windows; here the windows slide and the key adds the user key, so
#: people behind one shared address do not share one budget of clicks.
CLICK_RATE_LIMITS: tuple[RateLimit, ...] = (
    RateLimit(1, MINUTE_MS),
    RateLimit(3, 10 * MINUTE_MS),
    RateLimit(10, HOUR_MS),
    RateLimit(25, DAY_MS),
)

#: Impressions per viewer (IP, user agent, user key) per minute: 60, one a second for a
#: whole minute. House
#: figure: EthicalAds limits counted views to 5 per 5 minutes per IP with one ad per
#: page; a page here can carry several slots (3 slots on a page every 6 s is 30 a
#: minute) and an address can be shared (office or carrier NAT), so the bar is twice
#: that busy reader, and traffic over it is a script reloading pages.
IMPRESSION_RATE_LIMIT = RateLimit(60, MINUTE_MS)

#: The CTR window per (client IP, placement), in ms, and its bucket width (ms).
CTR_WINDOW_MS = HOUR_MS
CTR_BUCKET_MS = 5 * MINUTE_MS
#: Fewest impressions of an IP on a placement within the window before its CTR is
#: judged (house figure, see :data:`CTR_OUTLIER_MAX_PERCENT`).
CTR_OUTLIER_MIN_IMPRESSIONS = 20
#: The CTR (percent, clicks / impressions) above which an IP's clicks on a placement are
#: reversed. Display CTRs are typically well under 1 %; at 20 impressions this bar
#: needs 6 clicks, which a person with a true CTR of 5 % (a generous one) reaches with
#: probability about 3·10⁻⁴ (binomial tail), one with 1 % about 4·10⁻⁸.
CTR_OUTLIER_MAX_PERCENT = 25

#: How many of an (IP, user key)'s consecutive click delays (click − impression) are
#: compared for robotic regularity, and the spread (ms, max − min) at or under which
#: they are called regular. People's delays vary by seconds; 5 delays within 20 ms of
#: each other are a script's timer (house figures).
TIMING_REGULAR_CLICKS = 5
TIMING_REGULAR_SPREAD_MS = 20

#: How long (ms) the scorer remembers an impression's time to pair it with its click
#: (and a click waiting for its impression, and events seen, to drop repeats): it only
#: needs to exceed MIN_CLICK_DELAY_MS plus the gap between the two events' arrival on
#: the log. At 5,000 events/s it holds about 600,000 entries.
PAIRING_MEMORY_MS = 2 * MINUTE_MS


@dataclass(frozen=True, slots=True)
class Tier2Config:
    """Tier-2 thresholds; every default is the module constant of the same name.

    Raises:
        ValueError: a threshold out of range (negative, empty limits, CTR bucket not
            dividing its window, fewer than 2 regular clicks).
    """

    click_limits: tuple[RateLimit, ...] = CLICK_RATE_LIMITS
    impression_limit: RateLimit = IMPRESSION_RATE_LIMIT
    ctr_window_ms: int = CTR_WINDOW_MS
    ctr_bucket_ms: int = CTR_BUCKET_MS
    ctr_min_impressions: int = CTR_OUTLIER_MIN_IMPRESSIONS
    ctr_max_percent: int = CTR_OUTLIER_MAX_PERCENT
    min_click_delay_ms: int = MIN_CLICK_DELAY_MS
    regular_clicks: int = TIMING_REGULAR_CLICKS
    regular_spread_ms: int = TIMING_REGULAR_SPREAD_MS
    pairing_memory_ms: int = PAIRING_MEMORY_MS

    def __post_init__(self) -> None:
        problems = []
        if not self.click_limits:
            problems.append("click_limits is empty")
        if self.ctr_bucket_ms <= 0 or self.ctr_window_ms <= 0 or (
                self.ctr_window_ms % self.ctr_bucket_ms):
            problems.append("ctr_bucket_ms must be > 0 and divide ctr_window_ms")
        if self.ctr_min_impressions < 1 or not 0 <= self.ctr_max_percent <= 100:
            problems.append("ctr_min_impressions >= 1, 0 <= ctr_max_percent <= 100")
        if self.min_click_delay_ms < 0 or self.regular_spread_ms < 0:
            problems.append("delays must be >= 0")
        if self.regular_clicks < 2:
            problems.append("regular_clicks must be >= 2")
        if self.pairing_memory_ms <= self.min_click_delay_ms:
            problems.append("pairing_memory_ms must exceed min_click_delay_ms")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_settings(cls, settings: Any) -> Tier2Config:
        """The thresholds of ``settings`` (``ADFUNNEL_IVT_…``; seconds there, ms here).

        Raises:
            ValueError: thresholds that do not fit together (checked at start-up).
        """
        s = settings
        return cls(
            click_limits=tuple(parse_rate_limit(text) for text in s.ivt_click_rate_limits),
            impression_limit=RateLimit(s.ivt_impression_rate_limit,
                                       s.ivt_impression_rate_window_s * 1000),
            ctr_window_ms=s.ivt_ctr_window_s * 1000, ctr_bucket_ms=s.ivt_ctr_bucket_s * 1000,
            ctr_min_impressions=s.ivt_ctr_min_impressions,
            ctr_max_percent=s.ivt_ctr_max_percent,
            min_click_delay_ms=s.ivt_min_click_delay_ms,
            regular_clicks=s.ivt_regular_clicks, regular_spread_ms=s.ivt_regular_spread_ms)


def parse_rate_limit(text: str) -> RateLimit:
    """``"COUNT/SECONDS"`` (``"3/600"``: at most 3 in any 600 s) as a :class:`RateLimit`.

    Raises:
        ValueError: another form, a negative count or a window under one second.
    """
    count, sep, seconds = text.strip().partition("/")
    if not (sep and count.strip().isdigit() and seconds.strip().isdigit()
            and int(seconds) > 0):
        raise ValueError(f"{text!r} is not COUNT/SECONDS (e.g. 3/600)")
    return RateLimit(int(count), int(seconds) * 1000)


# --- IP lists ---------------------------------------------------------------------------


class IpKind(StrEnum):
    """What a range says about the traffic from it (see :mod:`adfunnel.ivt.lists`)."""

    CRAWLER = "crawler"
    RELAY = "relay"
    DATACENTER = "datacenter"


@dataclass(frozen=True, slots=True)
class IpSource:
    """One reference file under ``<data>/ivt/datacenter_ips``.

    ``fmt`` is ``cidr`` (one CIDR per line, ``#`` comments) or ``ipcat`` (CSV rows
    ``first,last,provider,url``, inclusive dotted IPv4 bounds).
    """

    path: str
    kind: IpKind
    name: str
    fmt: Literal["cidr", "ipcat"] = "cidr"


def _lord_alfred(kind: IpKind, provider: str, *versions: int) -> tuple[IpSource, ...]:
    return tuple(
        IpSource(f"lord-alfred-ipranges/{provider}/ipv{v}_merged.txt", kind, provider)
        for v in versions
    )


#: The files loaded, and what each says. lord-alfred's ``all/`` union is not loaded: it
#: mixes the relay and crawler lists into the datacenter one.
IP_SOURCES: tuple[IpSource, ...] = (
    # declared bots' published ranges
    *_lord_alfred(IpKind.CRAWLER, "googlebot", 4, 6),
    *_lord_alfred(IpKind.CRAWLER, "bing", 4),
    *_lord_alfred(IpKind.CRAWLER, "duckduckbot", 4),
    *_lord_alfred(IpKind.CRAWLER, "duckassistbot", 4),
    *_lord_alfred(IpKind.CRAWLER, "openai", 4),
    *_lord_alfred(IpKind.CRAWLER, "perplexity", 4),
    *_lord_alfred(IpKind.CRAWLER, "pingdom", 4, 6),
    *_lord_alfred(IpKind.CRAWLER, "statuscake", 4),
    # privacy relays people browse through
    *_lord_alfred(IpKind.RELAY, "apple-proxy", 4, 6),
    # hosting, cloud and VPN
    IpSource("x4bnet-datacenter-ipv4.txt", IpKind.DATACENTER, "x4bnet-datacenter"),
    IpSource("x4bnet-datacenter-ipv6.txt", IpKind.DATACENTER, "x4bnet-datacenter"),
    IpSource("x4bnet-vpn-ipv4.txt", IpKind.DATACENTER, "x4bnet-vpn"),
    IpSource("ipcat-datacenters.csv", IpKind.DATACENTER, "ipcat", "ipcat"),
    *_lord_alfred(IpKind.DATACENTER, "amazon", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "google", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "microsoft", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "oracle", 4),
    *_lord_alfred(IpKind.DATACENTER, "digitalocean", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "linode", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "vultr", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "cloudflare", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "github", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "facebook", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "twitter", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "telegram", 4, 6),
    *_lord_alfred(IpKind.DATACENTER, "protonvpn", 4),
)


def held_in(held_out: Iterable[str]) -> tuple[IpSource, ...]:
    """:data:`IP_SOURCES` less the lists named in ``held_out`` (by :attr:`IpSource.name`):
    what a filter loads when some lists are held out to measure its recall on them.

    Raises:
        ValueError: a name that is no list's (the message names it and the known ones).
    """
    names = set(held_out)
    unknown = names - {s.name for s in IP_SOURCES}
    if unknown:
        known = ", ".join(sorted({s.name for s in IP_SOURCES}))
        raise ValueError(f"unknown IP lists {sorted(unknown)}; known: {known}")
    return tuple(s for s in IP_SOURCES if s.name not in names)
