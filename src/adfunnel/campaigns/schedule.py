"""When a campaign may spend: its local budget day, flight dates and dayparts. Pure.

The budget day is the advertiser's local calendar day in the campaign's IANA time
zone, so a 25-hour (DST end) or 23-hour (DST start) day still gets exactly one
daily budget.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from adfunnel.campaigns.model import Campaign, Daypart

_ZONES: dict[str, ZoneInfo] = {}


def zone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name (cached).

    Raises:
        ValueError: unknown time zone.
    """
    z = _ZONES.get(name)
    if z is None:
        try:
            z = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {name!r}") from exc
        _ZONES[name] = z
    return z


def is_valid_zone(name: str) -> bool:
    """True for an IANA zone name (``UTC`` included); never ``localtime`` or a file path."""
    return isinstance(name, str) and (name == "UTC" or name in _iana_names())


def _iana_names() -> frozenset[str]:
    global _IANA
    if _IANA is None:
        # the system database also lists its own files (localtime, posixrules, posix/…)
        _IANA = frozenset(
            n for n in available_timezones()
            if n not in _NOT_ZONES and not n.startswith(("posix/", "right/"))
        )
    return _IANA


_IANA: frozenset[str] | None = None
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


def local_day(now: datetime, tz: str) -> date:
    """The local calendar date of instant ``now`` in ``tz``."""
    return now.astimezone(zone(tz)).date()


def day_bounds(day: date, tz: str) -> tuple[datetime, datetime]:
    """UTC ``[start, end)`` of local ``day`` in ``tz``; 23, 24 or 25 hours long."""
    z = zone(tz)
    return _midnight(day, z), _midnight(day + timedelta(days=1), z)


def _midnight(day: date, z: ZoneInfo) -> datetime:
    """UTC instant local ``day`` starts for good in ``z``: its midnight, or, where the
    clock fell back across midnight (St John's until 2011 went from 00:01 back to
    23:01), the second midnight, since the hour before it is the previous day's again.
    A midnight skipped by a gap starts the day when the clock jumps (fold 0)."""
    first = datetime.combine(day, time(0), tzinfo=z).astimezone(UTC)
    again = datetime.combine(day, time(0, fold=1), tzinfo=z).astimezone(UTC)
    if again > first and (again - timedelta(minutes=1)).astimezone(z).date() < day:
        return again
    return first


def in_flight(campaign: Campaign, now: datetime) -> bool:
    """True when ``now``'s local date lies within the campaign's flight."""
    d = local_day(now, campaign.time_zone)
    if d < campaign.flight_start:
        return False
    return campaign.flight_end is None or d <= campaign.flight_end


def in_daypart(dayparts: tuple[Daypart, ...], now: datetime, tz: str) -> bool:
    """True when local ``now`` falls in any daypart (always, when there are none)."""
    if not dayparts:
        return True
    local = now.astimezone(zone(tz))
    wd, hour = local.weekday(), local.hour
    return any(wd in p.weekdays and p.start_hour <= hour < p.end_hour for p in dayparts)
