"""Which per-user cap records a candidate needs, and whether they let it serve. Pure.

A user's cap records are one hash (one per user in the store) of integer fields:

- a *counter* field ``LEVEL:ID:WINDOW:BUCKET`` holds the impressions served in one
  calendar window, e.g. ``c:12:d:2026-11-01``;
- a *cooldown* field ``LEVEL:ID:last`` holds the Unix second of the last impression,
  e.g. ``c:12:last``.

``LEVEL`` is ``a`` (ad), ``c`` (campaign) or ``v`` (advertiser), ``ID`` that record's
id. ``WINDOW`` and ``BUCKET`` follow the calendar of the campaign's IANA time zone:

=========  ======  ==============================================  ====================
window     code    bucket                                          example
=========  ======  ==============================================  ====================
hour       ``h``   local date, hour and UTC offset                 ``2026-11-01T01-0400``
day        ``d``   local date                                      ``2026-11-01``
week       ``w``   ISO year and week (weeks start Monday 00:00)    ``2026-W45``
lifetime   ``l``   the constant ``all``                            ``all``
=========  ======  ==============================================  ====================

The offset in an hour bucket tells the two 01:00 hours of a DST-end day apart; a
25-hour or 23-hour local day is still one day bucket. Buckets never contain ``:``,
so the fields of one counter cap share everything up to the last ``:``
(:func:`counter_prefix`); a store drops the older buckets of a cap when it starts a
new one.

The hash lives :func:`ttl_for` seconds after its last write: the longest window in use
plus one day (hour: 1 h + 1 d, day: 2 d, week: 8 d, cooldown: its seconds + 1 d), and
400 days when a lifetime cap is in use — so a "lifetime" is 400 days since the user's
last capped impression.

Advertiser-level windows follow the zone of the campaign that carries the cap. Where
campaigns of two zones carry it, a candidate's plan holds a bucket of each zone's window
(the catalogue's :class:`~adfunnel.serving.caps.CapBook`), every serve counts both, and
a store never drops a bucket the plan holds as an older one; a date string both zones
share is one field (counted since the earlier zone's midnight: stricter, never looser).
An advertiser-level counter counts the impressions of the campaigns that carry that cap.

Times come from arguments only (an aware ``datetime`` of the injected clock, or Unix
seconds); nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from adfunnel.campaigns.model import CapLevel, CapWindow, FrequencyCap
from adfunnel.campaigns.schedule import zone

#: Field code of each cap level.
LEVEL_CODES: dict[CapLevel, str] = {
    CapLevel.AD: "a",
    CapLevel.CAMPAIGN: "c",
    CapLevel.ADVERTISER: "v",
}
#: Field code of each counter window.
WINDOW_CODES: dict[CapWindow, str] = {
    CapWindow.HOUR: "h",
    CapWindow.DAY: "d",
    CapWindow.WEEK: "w",
    CapWindow.LIFETIME: "l",
}
#: The one bucket of a lifetime counter.
LIFETIME_BUCKET = "all"
#: Last part of a cooldown field.
LAST_SERVE = "last"

DAY_S = 86_400
#: How long a user's records live after a write when a lifetime cap is in use (400 days).
LIFETIME_TTL_S = 400 * DAY_S
#: Longest calendar length of each bounded window, seconds (a DST-end day has 25 hours,
#: which the extra day of the TTL covers).
_WINDOW_S: dict[CapWindow, int] = {
    CapWindow.HOUR: 3_600,
    CapWindow.DAY: DAY_S,
    CapWindow.WEEK: 7 * DAY_S,
}


@dataclass(frozen=True, slots=True)
class CapCheck:
    """A counter cap of one candidate, resolved to the field of the current window.

    The candidate may serve while the count in ``field`` is below ``limit``; a serve
    adds 1 to it.

    Attributes:
        field: hash field, ``LEVEL:ID:WINDOW:BUCKET`` (module docstring).
        limit: impressions allowed per window (``count`` of the cap), >= 1.
        level, owner_id, window: the cap it comes from: ``owner_id`` is the ad,
            campaign or advertiser id that ``level`` names (for reason data).
    """

    field: str
    limit: int
    level: CapLevel
    owner_id: int
    window: CapWindow

    def describe(self) -> str:
        """Reason text, e.g. ``campaign 12: 3 per day``."""
        return f"{self.level} {self.owner_id}: {self.limit} per {self.window}"


@dataclass(frozen=True, slots=True)
class Cooldown:
    """A cooldown cap of one candidate.

    The candidate may serve when ``field`` is absent (no earlier serve) or
    ``now_s - value >= seconds``; a serve sets it to ``now_s``.

    Attributes:
        field: hash field, ``LEVEL:ID:last``; its value is a Unix second.
        seconds: least time between two serves to one user, seconds (>= 1).
        level, owner_id: the cap it comes from (as in :class:`CapCheck`).
    """

    field: str
    seconds: int
    level: CapLevel
    owner_id: int

    def describe(self) -> str:
        """Reason text, e.g. ``campaign 12: 1 per 1800 s``."""
        return f"{self.level} {self.owner_id}: 1 per {self.seconds} s"


#: One cap of a candidate, resolved to its field.
CapRule = CapCheck | Cooldown


@dataclass(frozen=True, slots=True)
class CapPlan:
    """The caps of one candidate at one instant.

    Attributes:
        rules: the caps to hold together (AND), one per field, in the campaign's order.
        ttl_s: seconds the user's records must live after this candidate serves
            (:func:`ttl_for`); 0 without caps.
    """

    rules: tuple[CapRule, ...]
    ttl_s: int

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields to read for this candidate."""
        return tuple(r.field for r in self.rules)


def plan_caps(
    caps: Iterable[FrequencyCap],
    *,
    ad_id: int,
    campaign_id: int,
    advertiser_id: int,
    time_zone: str,
    at: datetime,
) -> CapPlan:
    """The fields and limits of a candidate (one ad of a campaign) at instant ``at``.

    ``caps`` is the campaign's own list (``Campaign.frequency_caps``), already
    validated by the campaign store. Two caps on one field keep the stricter one: the
    lower count, the longer cooldown.

    Raises:
        ValueError: ``at`` is naive, or ``time_zone`` is not an IANA zone.
    """
    if at.tzinfo is None:
        raise ValueError("cap windows need a timezone-aware instant")
    local = at.astimezone(zone(time_zone))
    owners = {CapLevel.AD: ad_id, CapLevel.CAMPAIGN: campaign_id,
              CapLevel.ADVERTISER: advertiser_id}
    rules: dict[str, CapRule] = {}
    caps = tuple(caps)
    for cap in caps:
        level = CapLevel(cap.level)
        owner = owners[level]
        head = f"{LEVEL_CODES[level]}:{owner}"
        rule: CapRule
        if cap.cooldown_s is not None:
            rule = Cooldown(f"{head}:{LAST_SERVE}", cap.cooldown_s, level, owner)
            held = rules.get(rule.field)
            if isinstance(held, Cooldown) and held.seconds >= rule.seconds:
                continue
        else:
            if cap.count is None or cap.window is None:
                raise ValueError(f"a cap without count or window: {cap!r}")
            window = CapWindow(cap.window)
            rule = CapCheck(
                f"{head}:{WINDOW_CODES[window]}:{bucket(window, local)}",
                cap.count, level, owner, window,
            )
            held = rules.get(rule.field)
            if isinstance(held, CapCheck) and held.limit <= rule.limit:
                continue
        rules[rule.field] = rule
    return CapPlan(tuple(rules.values()), ttl_for(caps))


def bucket(window: CapWindow, local: datetime) -> str:
    """The bucket of ``window`` holding ``local`` (an aware time in the campaign's zone).

    See the module docstring for the formats.
    """
    if window is CapWindow.HOUR:
        return f"{local:%Y-%m-%dT%H}{local:%z}"
    if window is CapWindow.DAY:
        return local.date().isoformat()
    if window is CapWindow.WEEK:
        year, week, _ = local.isocalendar()
        return f"{year}-W{week:02d}"
    return LIFETIME_BUCKET


def ttl_for(caps: Iterable[FrequencyCap]) -> int:
    """Seconds a user's records must live after a serve under ``caps``; 0 without caps.

    The longest window in use plus one day (hour 90,000 s, day 172,800 s, week
    691,200 s, cooldown its seconds + 86,400 s); 400 days (34,560,000 s) with a lifetime
    counter, unless a longer cooldown asks for more.
    """
    longest = 0
    for cap in caps:
        if cap.cooldown_s is not None:
            longest = max(longest, cap.cooldown_s + DAY_S)
        elif cap.window is not None:
            window = CapWindow(cap.window)
            if window is CapWindow.LIFETIME:
                longest = max(longest, LIFETIME_TTL_S)
            else:
                longest = max(longest, _WINDOW_S[window] + DAY_S)
    return longest


def fields_to_read(plans: Iterable[CapPlan]) -> list[str]:
    """Every field of ``plans``, each once, in first-seen order (one read per request)."""
    return list(dict.fromkeys(f for plan in plans for f in plan.fields))


def counter_prefix(field: str) -> str:
    """``c:12:d:2026-11-01`` → ``c:12:d:``: what the buckets of one counter cap share."""
    return field[: field.rindex(":") + 1]


def unix_s(at: datetime) -> int:
    """Whole Unix seconds of an aware instant (rounded down): the ``now_s`` of the stores.

    Raises:
        ValueError: ``at`` is naive.
    """
    if at.tzinfo is None:
        raise ValueError("cap times must be timezone-aware")
    return math.floor(at.timestamp())


def rule_holds(rule: CapRule, values: Mapping[str, int], now_s: int) -> bool:
    """Whether ``rule`` lets one more impression through, given the user's ``values``
    (field → int; an absent field means no serve in that window / ever).

    A counter holds while its count < ``limit``; a cooldown while there was no earlier
    serve or ``now_s - last >= seconds`` (a last serve in the future, from a clock
    behind another server's, does not hold).
    """
    if isinstance(rule, CapCheck):
        return values.get(rule.field, 0) < rule.limit
    last = values.get(rule.field)
    return last is None or now_s - last >= rule.seconds


class CapStatus(StrEnum):
    ALLOWED = "allowed"
    CAPPED = "capped"  # a cap binds: ``CapVerdict.rule`` says which
    UNAVAILABLE = "unavailable"  # the candidate has caps and the read failed


@dataclass(frozen=True, slots=True)
class CapVerdict:
    """Whether a candidate may serve; ``rule`` is the cap that binds when ``CAPPED``."""

    status: CapStatus
    rule: CapRule | None = None

    @property
    def allowed(self) -> bool:
        return self.status is CapStatus.ALLOWED

    def reason(self) -> str | None:
        """Reason text for a rejection (``capped: campaign 12: 3 per day``,
        ``cap_unavailable``); None when allowed."""
        if self.status is CapStatus.CAPPED and self.rule is not None:
            return f"capped: {self.rule.describe()}"
        if self.status is CapStatus.UNAVAILABLE:
            return "cap_unavailable"
        return None


def evaluate(
    rules: CapPlan | Sequence[CapRule], values: Mapping[str, int] | None, now_s: int
) -> CapVerdict:
    """Whether a candidate with ``rules`` may serve to a user whose records are ``values``.

    ``values`` is what :meth:`FrequencyStore.read` answered (field → int; absent fields
    are 0 / never served), or None when the read failed: a candidate with caps is then
    ``UNAVAILABLE`` (a cap is never silently ignored) and one without caps ``ALLOWED``.
    ``now_s`` is Unix seconds (:func:`unix_s` of the injected clock). The first rule
    that binds, in order, is reported.
    """
    held = rules.rules if isinstance(rules, CapPlan) else tuple(rules)
    if not held:
        return CapVerdict(CapStatus.ALLOWED)
    if values is None:
        return CapVerdict(CapStatus.UNAVAILABLE)
    for rule in held:
        if not rule_holds(rule, values, now_s):
            return CapVerdict(CapStatus.CAPPED, rule)
    return CapVerdict(CapStatus.ALLOWED)
