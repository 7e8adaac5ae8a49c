"""The serving catalogue as columns: every ad's and campaign's serving fields in numpy
arrays indexed by id, for the columnar decider (``adfunnel.serving.decider``).

Ids are dense in practice (database sequences), so an array indexed by the id itself
is the ad slot number: no id-to-row map to keep consistent. Ids at or above
``MAX_DENSE_ID`` are not held here, and the decider treats them as unknown to the
columns (they are decided by the per-candidate reference path; see ``decider.py``).

Per ad: campaign id (−1: no ad), active, shape code (format, width, height), quality.
Per campaign: advertiser, status code, bid type code, bid, the most one event can cost
(:attr:`~adfunnel.campaigns.model.Campaign.max_charge_micros`), min(daily, lifetime) budget,
time-zone code, flight as local date ordinals, daypart code. A daypart code indexes a table of
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

from adfunnel.budget.multipliers import automatic
from adfunnel.campaigns.model import Ad, AdStatus, BidType, Campaign, CampaignStatus, Daypart
from adfunnel.campaigns.schedule import zone
from adfunnel.pacing.flight import period_budgets

#: Ids at or above this are not held in columns (arrays would be too large).
MAX_DENSE_ID = 1 << 26
#: Local date ordinal standing for an open-ended flight.
NO_END = np.iinfo(np.int32).max
#: Hours in a week: a daypart mask has one entry per (weekday, hour).
WEEK_HOURS = 168

STATUS_CODES = {CampaignStatus.ACTIVE: 0, CampaignStatus.PAUSED: 1, CampaignStatus.ENDED: 2,
                CampaignStatus.COMPLETED: 3,
                # an archived campaign is over for serving, as an ended one is
                CampaignStatus.ARCHIVED: 2}
BID_CODES = {BidType.CPM: 0, BidType.CPC: 1, BidType.CPA: 2}
BID_TYPES = (BidType.CPM, BidType.CPC, BidType.CPA)


#: One ad's serving fields, packed in one record (32 bytes): a decision reads each of
#: its candidates' fields with one cache line, not one per column.
AD_FIELDS = np.dtype([("version", np.int64), ("campaign", np.int64), ("quality", np.int64),
                      ("shape", np.int32), ("active", np.bool_)], align=True)
#: One campaign's serving fields, packed in one record (72 bytes). ``status`` −1: no
#: such campaign (never written). ``auto``: an automatic bid strategy, whose ``bid``
#: is the value v of one action, bid as ⌊v ÷ λ⌋ (:mod:`adfunnel.bidding.strategy`).
CAMPAIGN_FIELDS = np.dtype([
    ("version", np.int64), ("advertiser", np.int64), ("bid", np.int64), ("charge", np.int64),
    ("daily", np.int64), ("lifetime", np.int64), ("start", np.int32), ("end", np.int32),
    ("daypart", np.int32), ("zone", np.int16), ("status", np.int8), ("bid_type", np.int8),
    ("auto", np.bool_),
], align=True)
_AD_FILL = {"version": 0, "campaign": -1, "quality": 0, "shape": -1, "active": False}
_CAMPAIGN_FILL = {"version": 0, "advertiser": -1, "bid": 0, "charge": 0, "daily": -1,
                  "lifetime": -1, "start": 0, "end": NO_END, "daypart": 0, "zone": 0,
                  "status": -1, "bid_type": 0, "auto": False}


class _Records:
    """One growable array of records: ``values[id]``, the fill record where never
    written."""

    __slots__ = ("fill", "values")

    def __init__(self, dtype: np.dtype, fill: dict[str, float | int]) -> None:
        self.fill = fill
        self.values = self._filled(0, dtype)

    def _filled(self, n: int, dtype: np.dtype) -> np.ndarray:
        out = np.zeros(n, dtype=dtype)
        for name, value in self.fill.items():
            out[name] = value
        return out

    def reserve(self, size: int) -> None:
        if size > len(self.values):
            grown = self._filled(max(size, 2 * len(self.values), 1024), self.values.dtype)
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
    """The records of :class:`CatalogColumns` (read without a lock), and each field as
    an array by id (a strided view of the records).

    Writers overwrite a record's fields in place, its version last; a reader that
    reads the versions first and finds the record objects at those versions when it
    uses them knows the entries it read in between were that version's.
    """

    ads: np.ndarray  # AD_FIELDS[ads]
    campaigns: np.ndarray  # CAMPAIGN_FIELDS[campaigns]
    dayparts: np.ndarray  # bool[k, 168]

    # per ad: campaign id (−1 = no ad), active, shape code, quality (micros per
    # impression), record version (written last)
    ad_campaign = property(lambda self: self.ads["campaign"])
    ad_active = property(lambda self: self.ads["active"])
    ad_shape = property(lambda self: self.ads["shape"])
    ad_quality = property(lambda self: self.ads["quality"])
    ad_version = property(lambda self: self.ads["version"])
    # per campaign: advertiser, STATUS_CODES (−1: none), BID_CODES, bid (micros per
    # mille / click / conversion), the most one event can cost (micros), daily and
    # lifetime (−1: none) budget (micros), ZoneClock code, flight start and end
    # (inclusive; NO_END) as local date ordinals, row of ``dayparts``, version
    c_advertiser = property(lambda self: self.campaigns["advertiser"])
    c_status = property(lambda self: self.campaigns["status"])
    c_bid_type = property(lambda self: self.campaigns["bid_type"])
    c_bid = property(lambda self: self.campaigns["bid"])
    c_auto = property(lambda self: self.campaigns["auto"])
    c_charge = property(lambda self: self.campaigns["charge"])
    c_daily = property(lambda self: self.campaigns["daily"])
    c_lifetime = property(lambda self: self.campaigns["lifetime"])
    c_zone = property(lambda self: self.campaigns["zone"])
    c_start = property(lambda self: self.campaigns["start"])
    c_end = property(lambda self: self.campaigns["end"])
    c_daypart = property(lambda self: self.campaigns["daypart"])
    c_version = property(lambda self: self.campaigns["version"])

    @property
    def c_known(self) -> np.ndarray:
        """bool[campaigns]: written at least once."""
        return self.campaigns["status"] >= 0


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
        self._ads = _Records(AD_FIELDS, _AD_FILL)
        self._campaigns = _Records(CAMPAIGN_FIELDS, _CAMPAIGN_FILL)
        self._lock = threading.Lock()
        self._view: ColumnsView | None = None

    # ---- reading ------------------------------------------------------------------
    def view(self) -> ColumnsView:
        """The current arrays (consistent for every id written before the call)."""
        v = self._view
        if v is None:
            with self._lock:
                v = self._view = ColumnsView(self._ads.values, self._campaigns.values,
                                             self._dayparts)
        return v

    def shape_code(self, fmt: str, width: int, height: int) -> int:
        """The code of a shape, -1 when no ad has it."""
        return self.shapes.get((fmt, width, height), -1)

    # ---- writing ------------------------------------------------------------------
    def put_campaigns(self, campaigns: list[Campaign]) -> None:
        """Write (or overwrite) campaigns' records; ids ≥ MAX_DENSE_ID are skipped."""
        cs = [c for c in campaigns if 0 <= c.id < MAX_DENSE_ID]
        if not cs:
            return
        ids = np.array([c.id for c in cs], dtype=np.int64)
        self._campaigns.reserve(int(ids.max()) + 1)
        rows = np.zeros(len(cs), dtype=CAMPAIGN_FIELDS)
        rows["advertiser"] = [c.advertiser_id for c in cs]
        rows["status"] = [STATUS_CODES[c.status] for c in cs]
        rows["bid_type"] = [BID_CODES[c.bid_type] for c in cs]
        rows["bid"] = [c.bid_micros for c in cs]
        rows["auto"] = [automatic(c) for c in cs]
        rows["charge"] = [c.max_charge_micros for c in cs]
        rows["daily"] = [period_budgets(c)[0] for c in cs]  # a flight's day: its limits
        rows["lifetime"] = [_lifetime(c) for c in cs]
        rows["zone"] = [self.zones.code(c.time_zone) for c in cs]
        rows["start"] = [c.flight_start.toordinal() for c in cs]
        rows["end"] = [c.flight_end.toordinal() if c.flight_end else NO_END for c in cs]
        rows["daypart"] = [self._daypart_code(c.dayparts) for c in cs]
        _write(self._campaigns.values, ids, rows, [c.version for c in cs])
        self._view = None

    def put_ads(self, ads: list[Ad]) -> None:
        """Write (or overwrite) ads' records; ids ≥ MAX_DENSE_ID are skipped."""
        ads = [a for a in ads if 0 <= a.id < MAX_DENSE_ID]
        if not ads:
            return
        ids = np.array([a.id for a in ads], dtype=np.int64)
        self._ads.reserve(int(ids.max()) + 1)
        rows = np.zeros(len(ads), dtype=AD_FIELDS)
        rows["active"] = [a.status is AdStatus.ACTIVE for a in ads]
        rows["shape"] = [self._shape(a.format, a.width, a.height) for a in ads]
        rows["quality"] = [a.quality_micros for a in ads]
        rows["campaign"] = [a.campaign_id for a in ads]
        _write(self._ads.values, ids, rows, [a.version for a in ads])
        self._view = None

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


def _write(table: np.ndarray, ids: np.ndarray, rows: np.ndarray, versions: list[int]) -> None:
    """Overwrite ``table``'s records at ``ids`` with ``rows``, every field before the
    version (see :class:`ColumnsView`)."""
    for name in table.dtype.names or ():
        if name != "version":
            table[name][ids] = rows[name]
    table["version"][ids] = versions


def _lifetime(c: Campaign) -> int:
    life = period_budgets(c)[1]  # a flight's money counts as its lifetime budget
    return -1 if life is None else life
