"""Ledger rollups per UTC quarter-hour and the reports computed from them (pure).

A rollup holds, for one UTC quarter-hour and one (advertiser, campaign, ad, placement),
the valid events of the ledger — impressions, clicks, conversions, billed and absorbed
micros, and the measurement events ``rendered`` and ``viewable`` (never billed) — and the
invalid traffic of ``ledger_ivt`` counted per reason code (never billed). The reason
counts cover impressions, clicks and conversions only: an invalid render or viewable
beacon stays in ``ledger_ivt`` (and the ledger's ``ivt_render_<reason>`` counters) but
is not counted again beside the invalid impression it came with.

Why quarter-hours: every UTC offset in use is a whole number of quarter-hours (+5:30
Asia/Kolkata, +5:45 Asia/Kathmandu, +10:30 Australia/Adelaide, +12:45 Pacific/Chatham,
Lord Howe's half-hour DST shift), so every local hour and every local day in every zone is
a whole number of UTC quarter-hours. A report in any zone therefore buckets each event by
its own local hour and day, exactly as the ledger's per-day report (``local_day`` of the
event's time in the campaign's zone) does; UTC hours would put the half hour after local
midnight in a :30 zone on the previous day.

Rollups are derived data, kept by a store (:mod:`adfunnel.billing.rollup_store`: its
interface, who refreshes it, the in-memory store; on SQL :mod:`adfunnel.billing.sql_rollups`).
This module is pure: the records, the buckets, and the reports computed from rollups.

An event counts in the quarter-hour of its ``occurred_at`` (event time).

Report periods are local to the zone the report names: ``granularity="day"`` buckets by
the local date, ``granularity="hour"`` by the local wall-clock hour (its ``period_start``
is that local hour's start, with the zone's offset). DST days have 23 or 25 hours (Lord
Howe: 23.5 or 24.5). A span of local days ``first``..``last`` is the quarter-hours
starting in :func:`adfunnel.campaigns.schedule.day_bounds` (``first`` start, ``last``
end).

Metrics, integer micros rounded down (never above what was billed), each None without
its denominator: ctr = clicks / impressions; ecpm = billed × 1000 // impressions;
cost per conversion = billed // conversions; viewability rate = viewable / rendered
(valid events; measured by the page's tag, never assumed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Literal

from adfunnel.billing.model import MEASUREMENT, EventType, LedgerEvent
from adfunnel.campaigns.schedule import day_bounds, zone

HOUR = timedelta(hours=1)
#: The width of a rollup bucket: every UTC offset in use is a multiple of it.
QUARTER = timedelta(minutes=15)

Granularity = Literal["hour", "day"]
GroupBy = Literal["ad", "campaign", "placement"]
GRANULARITIES: tuple[Granularity, ...] = ("hour", "day")
GROUP_BYS: tuple[GroupBy, ...] = ("ad", "campaign", "placement")

#: The columns that name a group: ad → (campaign_id, ad_id), campaign → (campaign_id,),
#: placement → (placement,).
GROUP_COLUMNS: dict[GroupBy, tuple[str, ...]] = {
    "ad": ("campaign_id", "ad_id"),
    "campaign": ("campaign_id",),
    "placement": ("placement",),
}


# --- records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HourRollup:
    """One UTC quarter-hour of one (campaign, ad, placement); ``ivt``: reason -> invalid
    events (of every event type). Money in micros. (The name and the ``hour`` column date
    from hourly buckets, migration 0007.)"""

    hour: datetime  # start of the UTC quarter-hour, aware
    advertiser_id: int
    campaign_id: int
    ad_id: int
    placement: str
    impressions: int = 0
    clicks: int = 0
    conversions: int = 0
    billed_micros: int = 0
    absorbed_micros: int = 0
    ivt: dict[str, int] = field(default_factory=dict)
    #: valid render (``/i``) and viewable (``/vi``) events: measurement, never billed
    rendered: int = 0
    viewable: int = 0


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One period of one group. ``period_start``: the start of the local hour (``hour``)
    or the local midnight (``day``) in the report's zone, with its offset. Of
    ``campaign_id``, ``ad_id`` and ``placement`` only the group's columns
    (:data:`GROUP_COLUMNS`) are set."""

    period_start: datetime
    campaign_id: int | None
    ad_id: int | None
    placement: str | None
    impressions: int
    clicks: int
    conversions: int
    billed_micros: int
    absorbed_micros: int
    ivt: dict[str, int]
    rendered: int = 0
    viewable: int = 0

    @property
    def ctr(self) -> float | None:
        return ctr(self.clicks, self.impressions)

    @property
    def viewability_rate(self) -> float | None:
        return viewability_rate(self.viewable, self.rendered)

    @property
    def ecpm_micros(self) -> int | None:
        return ecpm_micros(self.billed_micros, self.impressions)

    @property
    def cost_per_conversion_micros(self) -> int | None:
        return cost_per_conversion_micros(self.billed_micros, self.conversions)


def ctr(clicks: int, impressions: int) -> float | None:
    """Clicks per impression; None without impressions."""
    return clicks / impressions if impressions else None


def viewability_rate(viewable: int, rendered: int) -> float | None:
    """Viewable events per rendered one (valid events); None without renders. Above 1
    only when a client fired ``/vi`` without ``/i``."""
    return viewable / rendered if rendered else None


def ecpm_micros(billed_micros: int, impressions: int) -> int | None:
    """Billed micros per 1000 impressions, rounded down; None without impressions."""
    return billed_micros * 1000 // impressions if impressions else None


def cost_per_conversion_micros(billed_micros: int, conversions: int) -> int | None:
    """Billed micros per conversion, rounded down; None without conversions."""
    return billed_micros // conversions if conversions else None


# --- hours ------------------------------------------------------------------------------


def utc_hour(t: datetime) -> datetime:
    """The start of the UTC hour holding instant ``t``.

    Raises:
        ValueError: for a naive datetime (no time zone).
    """
    if t.tzinfo is None:
        raise ValueError(f"a time zone is required, got naive {t.isoformat()}")
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def utc_quarter(t: datetime) -> datetime:
    """The start of the UTC quarter-hour holding instant ``t`` (a rollup's bucket).

    Raises:
        ValueError: for a naive datetime (no time zone).
    """
    h = utc_hour(t)
    return h + QUARTER * ((t.astimezone(UTC) - h) // QUARTER)


def quarters(hour: datetime) -> list[datetime]:
    """The four quarter-hour starts of the UTC hour starting at ``hour``."""
    return [hour + i * QUARTER for i in range(4)]


def local_hour(t: datetime, z: tzinfo) -> datetime:
    """The start of the wall-clock hour holding instant ``t`` in zone ``z``, as UTC (an
    hour repeated by a DST fold is two hours, one per offset)."""
    return t.astimezone(z).replace(minute=0, second=0, microsecond=0).astimezone(UTC)


def hours_of(times: Iterable[datetime]) -> set[datetime]:
    """The UTC hours holding ``times`` (e.g. the ``occurred_at`` of a batch's events)."""
    return {utc_hour(t) for t in times}


def hour_range(since: datetime, until: datetime) -> list[datetime]:
    """Every UTC hour from the one holding ``since`` to the one holding ``until``,
    both included (none when ``until`` is before ``since``)."""
    h, last = utc_hour(since), utc_hour(until)
    out = []
    while h <= last:
        out.append(h)
        h += HOUR
    return out


def runs(hours: Iterable[datetime]) -> list[tuple[datetime, datetime]]:
    """Sorted, distinct hour starts as consecutive runs ``[start, end)``."""
    out: list[tuple[datetime, datetime]] = []
    for h in sorted(set(hours)):
        if out and out[-1][1] == h:
            out[-1] = (out[-1][0], h + HOUR)
        else:
            out.append((h, h + HOUR))
    return out


def local_days_span(first: date, last: date, time_zone: str) -> tuple[datetime, datetime]:
    """UTC ``[start, end)`` of local days ``first``..``last`` in ``time_zone``: the hours
    starting in it are those of these days (an hour belongs to the day it starts in).

    Raises:
        ValueError: unknown time zone.
    """
    return day_bounds(first, time_zone)[0], day_bounds(last, time_zone)[1]


# --- aggregation (pure) -------------------------------------------------------------------


def rollup_rows(
    valid: Iterable[tuple[LedgerEvent, int, int]],
    invalid: Iterable[tuple[LedgerEvent, str]],
    advertiser_of: Callable[[int], int | None] = lambda _cid: None,
) -> list[HourRollup]:
    """Quarter-hour rollups of ledger rows: ``valid`` as (event, billed micros, absorbed
    micros), ``invalid`` as (event, reason). ``advertiser_of``: campaign id → advertiser
    id (None: unknown, stored as 0). Sorted by (quarter, campaign, ad, placement)."""
    sums: dict[tuple[datetime, int, int, str], _Sums] = {}

    def cell(e: LedgerEvent) -> _Sums:
        key = (utc_quarter(e.occurred_at), e.campaign_id, e.ad_id, e.placement)
        s = sums.get(key)
        if s is None:
            s = sums[key] = _Sums()
        return s

    for e, billed, absorbed in valid:
        cell(e).add_event(EventType(e.event_type), billed, absorbed)
    for e, reason in invalid:
        if e.event_type not in MEASUREMENT:  # counted with the impression it came with
            cell(e).ivt[reason] += 1
    return [
        s.hour_rollup(hour, advertiser_of(cid) or 0, cid, ad, placement)
        for (hour, cid, ad, placement), s in sorted(sums.items(), key=lambda kv: kv[0])
    ]


def aggregate(
    rows: Iterable[HourRollup],
    granularity: Granularity = "hour",
    group_by: GroupBy = "campaign",
    time_zone: str = "UTC",
) -> list[ReportRow]:
    """Report rows of quarter-hour rollups per period and group, sorted by (period,
    group).

    Only the group's columns of each row are read (:data:`GROUP_COLUMNS`). Periods are
    the local hours or local dates in ``time_zone`` of the quarters' starts, which are
    those of every event in them (offsets are whole quarter-hours).

    Raises:
        ValueError: unknown granularity, group or time zone.
    """
    check_shape(granularity, group_by, time_zone)
    z = zone(time_zone)
    days: dict[date, datetime] = {}

    def period(quarter: datetime) -> datetime:
        """A UTC instant, so that the two hours of a DST fold stay apart as keys."""
        if granularity == "hour":
            return local_hour(quarter, z)
        d = quarter.astimezone(z).date()
        start = days.get(d)
        if start is None:
            start = days[d] = day_bounds(d, time_zone)[0]
        return start

    columns = GROUP_COLUMNS[group_by]
    sums: dict[tuple[datetime, tuple[int | str, ...]], _Sums] = {}
    for r in rows:
        key = (period(r.hour), tuple(getattr(r, c) for c in columns))
        s = sums.get(key)
        if s is None:
            s = sums[key] = _Sums()
        s.add_rollup(r)
    out = []
    for (start, key), s in sorted(sums.items(), key=lambda kv: kv[0]):
        named = dict(zip(columns, key, strict=True))
        out.append(s.report_row(start.astimezone(z), named))
    return out


def total(rows: Iterable[ReportRow], period_start: datetime) -> ReportRow:
    """All ``rows`` summed into one with ``period_start`` and no group columns (zeros
    for no rows)."""
    s = _Sums()
    for r in rows:
        s.add_rollup(r)
    return s.report_row(period_start, {})


def ivt_reasons(rows: Iterable[ReportRow]) -> list[str]:
    """The IVT reason codes seen in ``rows``, sorted (one column each in a table)."""
    return sorted({reason for r in rows for reason in r.ivt})


def check_shape(granularity: str, group_by: str, time_zone: str) -> None:
    """Raises ValueError naming the first bad value (``granularity``, ``group_by`` or
    ``time_zone``)."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}")
    if group_by not in GROUP_BYS:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BYS)}")
    try:
        zone(time_zone)
    except ValueError as exc:
        raise ValueError(f"time_zone: {exc}") from exc


class _Sums:
    """A mutable accumulator of one cell."""

    __slots__ = ("absorbed", "billed", "clicks", "conversions", "impressions", "ivt",
                 "rendered", "viewable")

    def __init__(self) -> None:
        self.impressions = self.clicks = self.conversions = self.billed = self.absorbed = 0
        self.rendered = self.viewable = 0
        self.ivt: Counter[str] = Counter()

    def add_event(self, event_type: EventType, billed: int, absorbed: int) -> None:
        if event_type is EventType.IMPRESSION:
            self.impressions += 1
        elif event_type is EventType.CLICK:
            self.clicks += 1
        elif event_type is EventType.RENDER:
            self.rendered += 1
        elif event_type is EventType.VIEWABLE:
            self.viewable += 1
        elif event_type is EventType.WIN or event_type is EventType.LOSS:
            return  # an OpenRTB notice's measurement: no count of the rollups, no money
        else:
            self.conversions += 1
        self.billed += billed
        self.absorbed += absorbed

    def add_rollup(self, r: HourRollup | ReportRow) -> None:
        self.impressions += r.impressions
        self.clicks += r.clicks
        self.conversions += r.conversions
        self.billed += r.billed_micros
        self.absorbed += r.absorbed_micros
        self.rendered += r.rendered
        self.viewable += r.viewable
        self.ivt.update(r.ivt)

    def hour_rollup(
        self, hour: datetime, advertiser_id: int, campaign_id: int, ad_id: int, placement: str
    ) -> HourRollup:
        return HourRollup(hour, advertiser_id, campaign_id, ad_id, placement, self.impressions,
                          self.clicks, self.conversions, self.billed, self.absorbed,
                          dict(sorted(self.ivt.items())), self.rendered, self.viewable)

    def report_row(self, start: datetime, named: dict[str, int | str]) -> ReportRow:
        cid, ad, placement = (named.get(c) for c in ("campaign_id", "ad_id", "placement"))
        return ReportRow(
            start,
            cid if isinstance(cid, int) else None,
            ad if isinstance(ad, int) else None,
            placement if isinstance(placement, str) else None,
            self.impressions, self.clicks, self.conversions, self.billed, self.absorbed,
            dict(sorted(self.ivt.items())), self.rendered, self.viewable,
        )


def check_scope(
    start: datetime, end: datetime,
    campaign_ids: Collection[int] | None, advertiser_id: int | None,
    placement: str | None = None,
) -> None:
    """Raises ValueError unless exactly one scope is given and ``start``/``end`` are
    aware datetimes."""
    if sum(s is not None for s in (campaign_ids, advertiser_id, placement)) != 1:
        raise ValueError("give exactly one of campaign_ids, advertiser_id and placement")
    for name, t in (("start", start), ("end", end)):
        if t.tzinfo is None:
            raise ValueError(f"{name}: a time zone is required")
