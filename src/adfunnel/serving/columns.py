"""The serving catalogue as columns: every ad's and campaign's serving fields in numpy
arrays indexed by id, for the columnar decider (``adfunnel.serving.fast``).

Ids are dense in practice (database sequences), so an array indexed by the id itself
is the ad slot number: no id-to-row map to keep consistent. Ids at or above
``MAX_DENSE_ID`` are not held here, and the decider treats them as unknown to the
columns (they are decided by the per-candidate reference path; see ``fast.py``).

Per ad: campaign id (−1: no ad), active, shape code (format, width, height), quality.
Per campaign: advertiser, status code, bid type code, bid, the most one event can cost
(:func:`adfunnel.serving.funnel.max_charge`), min(daily, lifetime) budget, time-zone
code, flight as local date ordinals, daypart code. A daypart code indexes a table of
168-hour week masks (0 = every hour), read at the hour of week of the campaign's time
zone now; local dates and hours of week are computed once per time zone and minute
(:class:`ZoneClock`), so no time-zone conversion runs per candidate.

Writers (the catalogue, under its lock, from the change feed) write columns before
the index makes an ad retrievable; a column that must grow is copied and swapped in
one reference assignment, so a reader that takes :meth:`CatalogColumns.view` after
retrieval sees every retrieved id.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from adfunnel.campaigns.model import Ad, AdStatus, BidType, Campaign, CampaignStatus, Daypart
from adfunnel.campaigns.schedule import zone
from adfunnel.money import impression_charge_bound

#: Ids at or above this are not held in columns (arrays would be too large).
MAX_DENSE_ID = 1 << 26
#: Local date ordinal standing for an open-ended flight.
NO_END = np.iinfo(np.int32).max
#: Hours in a week: a daypart mask has one entry per (weekday, hour).
WEEK_HOURS = 168

STATUS_CODES = {CampaignStatus.ACTIVE: 0, CampaignStatus.PAUSED: 1, CampaignStatus.ENDED: 2,
                CampaignStatus.COMPLETED: 3}
BID_CODES = {BidType.CPM: 0, BidType.CPC: 1, BidType.CPA: 2}
BID_TYPES = (BidType.CPM, BidType.CPC, BidType.CPA)


class _Grown:
    """One growable column: ``values[id]``, ``fill`` where never written."""

    __slots__ = ("fill", "values", "width")

    def __init__(self, dtype: type, fill: float | int, width: int = 0) -> None:
        self.fill = fill
        self.width = width  # 0: one value per id; else a row of ``width`` values
        self.values = np.full((0, width) if width else 0, fill, dtype=dtype)

    def reserve(self, size: int) -> None:
        if size > len(self.values):
            n = max(size, 2 * len(self.values), 1024)
            grown = np.full((n, self.width) if self.width else n, self.fill,
                            dtype=self.values.dtype)
            grown[: len(self.values)] = self.values
            self.values = grown


def daypart_mask(dayparts: Iterable[Daypart]) -> np.ndarray:
    """bool[168]: True at weekday × 24 + hour (local) when some daypart covers it."""
    mask = np.zeros(WEEK_HOURS, dtype=bool)
    for p in dayparts:
        for wd in p.weekdays:
            mask[wd * 24 + p.start_hour: wd * 24 + p.end_hour] = True
    return mask


class ZoneClock:
    """Local date ordinal and hour of week of every known time zone at one instant.

    Cached per UTC minute: every current UTC offset is a whole number of minutes, so
    local dates and hours change only on a UTC minute boundary.
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self.codes: dict[str, int] = {}
        self._cache: tuple[int, int, np.ndarray, np.ndarray] | None = None

    def code(self, name: str) -> int:
        c = self.codes.get(name)
        if c is None:
            zone(name)  # raises on an unknown zone before it gets a code
            c = self.codes[name] = len(self.names)
            self.names.append(name)
        return c

    def at(self, now: datetime) -> tuple[np.ndarray, np.ndarray]:
        """(local date ordinal int32[z], hour of week int16[z]) of each zone at ``now``."""
        minute = int(now.timestamp() // 60)
        cached = self._cache
        if cached is not None and cached[0] == minute and cached[1] == len(self.names):
            return cached[2], cached[3]
        names = list(self.names)
        ordinals = np.empty(len(names), dtype=np.int32)
        hours = np.empty(len(names), dtype=np.int16)
        for i, name in enumerate(names):
            local = now.astimezone(zone(name))
            ordinals[i] = local.date().toordinal()
            hours[i] = local.weekday() * 24 + local.hour
        self._cache = (minute, len(names), ordinals, hours)
        return ordinals, hours


@dataclass(frozen=True, slots=True)
class ColumnsView:
    """The arrays of :class:`CatalogColumns` (read without a lock).

    Writers overwrite a record's entries in place, its version last; a reader that
    reads the versions first and finds the record objects at those versions when it
    uses them knows the entries it read in between were that version's.
    """

    ad_campaign: np.ndarray  # int64[ads]: campaign id, −1 = no such ad
    ad_active: np.ndarray  # bool[ads]
    ad_shape: np.ndarray  # int32[ads]: shape code
    ad_quality: np.ndarray  # int64[ads]: quality, micros per impression
    ad_version: np.ndarray  # int64[ads]: record version (written last)
    c_known: np.ndarray  # bool[campaigns]
    c_advertiser: np.ndarray  # int64[campaigns]
    c_status: np.ndarray  # int8[campaigns]: STATUS_CODES
    c_bid_type: np.ndarray  # int8[campaigns]: BID_CODES
    c_bid: np.ndarray  # int64[campaigns]: micros per mille / click / conversion
    c_charge: np.ndarray  # int64[campaigns]: most one event can cost, micros
    c_budgets: np.ndarray  # int64[campaigns, 2]: daily, lifetime (−1: none) budget, micros
    c_zone: np.ndarray  # int16[campaigns]: ZoneClock code
    c_start: np.ndarray  # int32[campaigns]: flight start, local date ordinal
    c_end: np.ndarray  # int32[campaigns]: flight end (inclusive) or NO_END
    c_daypart: np.ndarray  # int32[campaigns]: row of ``dayparts``
    c_version: np.ndarray  # int64[campaigns]: record version (written last)
    dayparts: np.ndarray  # bool[k, 168]


class CatalogColumns:
    """Serving fields of ads and campaigns as columns indexed by id (see module doc).

    Shape codes: :meth:`shape_code` of (format, width, height); -1 for a shape no ad has.
    Not thread-safe for writers: the catalogue writes under its own lock.
    """

    def __init__(self) -> None:
        self.zones = ZoneClock()
        self.shapes: dict[tuple[str, int, int], int] = {}
        self.shape_list: list[tuple[str, int, int]] = []
        self._daypart_codes: dict[bytes, int] = {np.ones(WEEK_HOURS, bool).tobytes(): 0}
        self._dayparts = np.ones((1, WEEK_HOURS), dtype=bool)
        self._ad = {
            "ad_campaign": _Grown(np.int64, -1), "ad_active": _Grown(np.bool_, False),
            "ad_shape": _Grown(np.int32, -1), "ad_quality": _Grown(np.int64, 0),
            "ad_version": _Grown(np.int64, 0),
        }
        self._c = {
            "c_known": _Grown(np.bool_, False), "c_advertiser": _Grown(np.int64, -1),
            "c_status": _Grown(np.int8, 0), "c_bid_type": _Grown(np.int8, 0),
            "c_bid": _Grown(np.int64, 0), "c_charge": _Grown(np.int64, 0),
            "c_budgets": _Grown(np.int64, -1, width=2), "c_zone": _Grown(np.int16, 0),
            "c_start": _Grown(np.int32, 0), "c_end": _Grown(np.int32, NO_END),
            "c_daypart": _Grown(np.int32, 0), "c_version": _Grown(np.int64, 0),
        }
        self._lock = threading.Lock()
        self._view: ColumnsView | None = None

    # ---- reading ------------------------------------------------------------------
    def view(self) -> ColumnsView:
        """The current arrays (consistent for every id written before the call)."""
        v = self._view
        if v is None:
            with self._lock:
                v = self._view = ColumnsView(
                    **{k: g.values for k, g in {**self._ad, **self._c}.items()},
                    dayparts=self._dayparts,
                )
        return v

    def shape_code(self, fmt: str, width: int, height: int) -> int:
        """The code of a shape, -1 when no ad has it."""
        return self.shapes.get((fmt, width, height), -1)

    # ---- writing ------------------------------------------------------------------
    def put_campaigns(self, campaigns: list[Campaign]) -> None:
        """Write (or overwrite) campaigns' columns; ids ≥ MAX_DENSE_ID are skipped."""
        cs = [c for c in campaigns if 0 <= c.id < MAX_DENSE_ID]
        if not cs:
            return
        ids = np.array([c.id for c in cs], dtype=np.int64)
        self._reserve(self._c, int(ids.max()) + 1)
        cols = {k: g.values for k, g in self._c.items()}
        cols["c_advertiser"][ids] = [c.advertiser_id for c in cs]
        cols["c_status"][ids] = [STATUS_CODES[c.status] for c in cs]
        cols["c_bid_type"][ids] = [BID_CODES[c.bid_type] for c in cs]
        cols["c_bid"][ids] = [c.bid_micros for c in cs]
        cols["c_charge"][ids] = [_max_charge(c) for c in cs]
        cols["c_budgets"][ids] = [(c.daily_budget_micros, _lifetime(c)) for c in cs]
        cols["c_zone"][ids] = [self.zones.code(c.time_zone) for c in cs]
        cols["c_start"][ids] = [c.flight_start.toordinal() for c in cs]
        cols["c_end"][ids] = [c.flight_end.toordinal() if c.flight_end else NO_END for c in cs]
        cols["c_daypart"][ids] = [self._daypart_code(c.dayparts) for c in cs]
        cols["c_known"][ids] = True
        cols["c_version"][ids] = [c.version for c in cs]  # last: see ColumnsView
        self._view = None

    def put_ads(self, ads: list[Ad]) -> None:
        """Write (or overwrite) ads' columns; ids ≥ MAX_DENSE_ID are skipped."""
        ads = [a for a in ads if 0 <= a.id < MAX_DENSE_ID]
        if not ads:
            return
        ids = np.array([a.id for a in ads], dtype=np.int64)
        self._reserve(self._ad, int(ids.max()) + 1)
        cols = {k: g.values for k, g in self._ad.items()}
        cols["ad_active"][ids] = [a.status is AdStatus.ACTIVE for a in ads]
        cols["ad_shape"][ids] = [self._shape(a.format, a.width, a.height) for a in ads]
        cols["ad_quality"][ids] = [a.quality_micros for a in ads]
        cols["ad_campaign"][ids] = [a.campaign_id for a in ads]
        cols["ad_version"][ids] = [a.version for a in ads]  # last: see ColumnsView
        self._view = None

    def _reserve(self, group: dict[str, _Grown], size: int) -> None:
        for g in group.values():
            g.reserve(size)

    def _shape(self, fmt: str, width: int, height: int) -> int:
        key = (fmt, width, height)
        code = self.shapes.get(key)
        if code is None:
            code = len(self.shape_list)
            self.shape_list.append(key)
            self.shapes[key] = code
        return code

    def _daypart_code(self, dayparts: tuple[Daypart, ...]) -> int:
        if not dayparts:
            return 0
        mask = daypart_mask(dayparts)
        key = mask.tobytes()
        code = self._daypart_codes.get(key)
        if code is None:
            code = len(self._daypart_codes)
            self._daypart_codes[key] = code
            self._dayparts = np.vstack([self._dayparts, mask[None, :]])
        return code


def _max_charge(c: Campaign) -> int:
    return impression_charge_bound(c.bid_micros) if c.bid_type is BidType.CPM else c.bid_micros


def _lifetime(c: Campaign) -> int:
    return -1 if c.lifetime_budget_micros is None else c.lifetime_budget_micros
