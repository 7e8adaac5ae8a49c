"""Where target curves come from: eligible requests per campaign and hour.

Ad servers count, per campaign and UTC hour, the requests that passed targeting, status
and schedule (the traffic the campaign could reach, before budget and pacing) and add
them to the ``eligible_traffic`` table every few seconds. The budget service turns the
last 7 days into a 24-hour shape in each campaign's local time — the mean requests of
each hour of day over the hours the campaign has lived, the current unfinished hour left
out (:mod:`adfunnel.pacing.hour_means`: a young campaign's sums would weigh the hours it
has lived twice double); a campaign without
history gets the average shape of all campaigns (the placement average), and with no
history at all the shape is flat.

At catalogue scale the service reads the window in bulk (:meth:`SqlTrafficLog.by_utc_hour`:
the database sums each campaign's requests by UTC hour of day, at most 24 rows a
campaign) and :func:`shape_matrix` makes every shape at once, mapping UTC hours to
local ones with each zone's offset at the time of the read (hours logged before a
DST change in the window land one hour off; :func:`local_shape` is exact).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from itertools import repeat

import numpy as np
from sqlalchemy import ColumnElement, Engine, Integer, cast, extract, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from adfunnel.campaigns.schedule import zone
from adfunnel.db import connection_guard
from adfunnel.dense import DENSE_IDS, DenseIds
from adfunnel.pacing.hour_means import lived_hours, mean_shapes
from adfunnel.pacing.traffic_tables import eligible_traffic

HOURS = 24
#: Requests a campaign needs in the window before its own shape is trusted.
MIN_REQUESTS = 200


class EligibleCounter:
    """In-memory counts per (campaign id, UTC hour start); thread-safe, O(1) per add.

    :meth:`add_many` (the columnar decider: thousands of campaigns per decision) counts
    into an array by campaign id per hour; :meth:`drain` merges both."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[int, datetime]] = Counter()
        self._dense: dict[datetime, DenseIds] = {}
        self._lock = threading.Lock()
        self._hour: tuple[float, datetime] | None = None

    def add(self, campaign_id: int, at: datetime) -> None:
        hour = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        with self._lock:
            self._counts[(campaign_id, hour)] += 1

    def add_many(self, campaign_ids: Iterable[int] | np.ndarray, at: datetime) -> None:
        """:meth:`add` for each of ``campaign_ids`` (one lock); an int array of distinct
        ids is counted in place in an array by id."""
        hour = self._hour_of(at)
        with self._lock:
            if not isinstance(campaign_ids, np.ndarray):
                self._counts.update(zip(campaign_ids, repeat(hour)))
                return
            if not len(campaign_ids):
                return
            if int(campaign_ids.max()) >= DENSE_IDS:
                dense = campaign_ids < DENSE_IDS
                self._counts.update(zip(campaign_ids[~dense].tolist(), repeat(hour)))
                campaign_ids = campaign_ids[dense]
                if not len(campaign_ids):
                    return
            counts = self._dense.get(hour)
            if counts is None:
                counts = self._dense[hour] = DenseIds(np.int64, 0)
            counts.add_one(campaign_ids)

    def _hour_of(self, at: datetime) -> datetime:
        """The UTC hour start of ``at`` (the last one kept: most adds share it)."""
        t = at.timestamp()
        held = self._hour
        if held is not None and held[0] <= t < held[0] + 3600:
            return held[1]
        hour = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        self._hour = (hour.timestamp(), hour)
        return hour

    def peek(self) -> dict[tuple[int, datetime], int]:
        """The counts held, as :meth:`drain` answers them, without taking them."""
        with self._lock:
            counts = Counter(self._counts)
            dense = {h: arr.values.copy() for h, arr in self._dense.items()}
        for hour, values in dense.items():
            ids = np.flatnonzero(values)
            for cid, n in zip(ids.tolist(), values[ids].tolist(), strict=True):
                counts[(cid, hour)] += n
        return dict(counts)

    def forget_before(self, since: datetime) -> None:
        """Drop the hours before ``since``: a counter nobody drains stays bounded by
        the hours still asked about."""
        with self._lock:
            for key in [k for k in self._counts if k[1] < since]:
                del self._counts[key]
            for hour in [h for h in self._dense if h < since]:
                del self._dense[hour]

    def drain(self) -> dict[tuple[int, datetime], int]:
        with self._lock:
            counts, self._counts = self._counts, Counter()
            dense, self._dense = self._dense, {}
        for hour, arr in dense.items():
            ids = np.flatnonzero(arr.values)
            for cid, n in zip(ids.tolist(), arr.values[ids].tolist(), strict=True):
                counts[(cid, hour)] += n
        return dict(counts)


class SqlTrafficLog:
    """The ``eligible_traffic`` table: additive writes from many ad servers."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert

    def add(self, counts: dict[tuple[int, datetime], int]) -> None:
        """Add ``counts`` to the stored totals (an upsert per row, one transaction)."""
        if not counts:
            return
        rows = [{"campaign_id": c, "hour_start": h, "requests": n} for (c, h), n in counts.items()]
        stmt = self._insert(eligible_traffic).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=["campaign_id", "hour_start"],
            set_={"requests": eligible_traffic.c.requests + stmt.excluded.requests},
        )
        with connection_guard(self.engine), self.engine.begin() as conn:
            conn.execute(stmt)

    def hourly(self, since: datetime) -> dict[int, dict[datetime, int]]:
        """campaign id -> {UTC hour start: requests} for hours at or after ``since``."""
        out: dict[int, dict[datetime, int]] = defaultdict(dict)
        q = select(eligible_traffic).where(eligible_traffic.c.hour_start >= since)
        with connection_guard(self.engine), self.engine.connect() as conn:
            for row in conn.execute(q):
                out[row.campaign_id][_utc(row.hour_start)] = row.requests
        return dict(out)

    def requests_since(self, campaign_ids: Iterable[int], since: datetime) -> dict[int, int]:
        """campaign id -> requests in hours at or after ``since``, for ``campaign_ids``
        only (0 where none): one aggregate query, in chunks of ids."""
        ids = sorted(set(campaign_ids))
        out = dict.fromkeys(ids, 0)
        t = eligible_traffic.c
        with connection_guard(self.engine), self.engine.connect() as conn:
            for i in range(0, len(ids), 500):
                q = (select(t.campaign_id, func.sum(t.requests))
                     .where(t.hour_start >= since, t.campaign_id.in_(ids[i:i + 500]))
                     .group_by(t.campaign_id))
                for cid, n in conn.execute(q):
                    out[int(cid)] = int(n)
        return out

    def by_utc_hour(self, since: datetime, until: datetime | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Requests in hours ``since`` <= hour < ``until`` (None: no end) summed per
        campaign and UTC hour of day: (campaign ids, hours 0-23, requests, first hour
        start of each group in Unix s), int64 columns; one aggregate query."""
        hour = _utc_hour(self.engine).label("h")
        t = eligible_traffic.c
        cond = t.hour_start >= since
        if until is not None:
            cond = cond & (t.hour_start < until)
        q = (select(t.campaign_id, hour, func.sum(t.requests), func.min(t.hour_start))
             .where(cond).group_by(t.campaign_id, hour))
        with connection_guard(self.engine), self.engine.connect() as conn:
            rows = conn.execute(q).all()
        if not rows:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty
        ids, hours, counts, firsts = zip(*rows, strict=True)
        first_s = [int(_utc(f).timestamp()) for f in firsts]
        return (np.array(ids, dtype=np.int64), np.array(hours, dtype=np.int64),
                np.array(counts, dtype=np.int64), np.array(first_s, dtype=np.int64))


def _utc(at: datetime | str) -> datetime:
    """A stored hour start as an aware UTC datetime (SQLite gives naive UTC wall time,
    and an aggregate over it a string)."""
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


def _utc_hour(engine: Engine) -> ColumnElement[int]:
    """The UTC hour of day of ``hour_start`` as SQL (SQLite stores UTC wall time)."""
    col = eligible_traffic.c.hour_start
    if engine.dialect.name == "postgresql":
        return extract("hour", func.timezone("UTC", col))
    return cast(func.strftime("%H", col), Integer)


def shape_matrix(campaign_ids: np.ndarray, zone_of: np.ndarray, zones: list[str],
                 traffic: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                 now: datetime) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """:func:`shapes` in bulk: the campaigns (of ``campaign_ids``, time zone
    ``zones[zone_of[i]]``) with at least ``MIN_REQUESTS`` logged and their local shapes
    (k × 24, each summing to 1: means per lived hour, :mod:`adfunnel.pacing.hour_means`),
    and the average of those shapes (flat without any), which every other campaign
    gets. ``traffic`` is :meth:`SqlTrafficLog.by_utc_hour` up to the current hour."""
    ids, hours, counts, first_s = traffic
    order = np.argsort(campaign_ids, kind="stable")
    sorted_ids = campaign_ids[order]
    pos = np.searchsorted(sorted_ids, ids)
    pos = np.minimum(pos, max(len(sorted_ids) - 1, 0))
    known = (sorted_ids[pos] == ids) if len(sorted_ids) else np.zeros(len(ids), dtype=bool)
    hours, counts, first_s, camp = hours[known], counts[known], first_s[known], order[pos[known]]
    uniq, row = np.unique(camp, return_inverse=True)
    sums = np.zeros((len(uniq), HOURS))
    np.add.at(sums, (row, hours), counts.astype(np.float64))
    first = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, row, first_s)
    own = sums.sum(axis=1) >= MIN_REQUESTS
    lived = lived_hours(first[own], hour_start(now).timestamp())
    offsets = np.array([int(zone(z).utcoffset(now).total_seconds() // 60) for z in zones]
                       or [0], dtype=np.int64)
    # UTC hour h of a campaign is local hour (h*60 + offset) // 60 (one to one)
    local = ((np.arange(HOURS)[None, :] * 60 + offsets[zone_of[uniq[own]]][:, None]) // 60
             ) % HOURS
    at = np.arange(int(own.sum()))[:, None]
    s_local, l_local = np.zeros_like(lived, dtype=np.float64), np.zeros_like(lived)
    s_local[at, local] = sums[own]
    l_local[at, local] = lived
    shaped, average = mean_shapes(s_local, l_local)
    return campaign_ids[uniq[own]], shaped, average.tolist()


def local_shape(counts: dict[datetime, int], tz: str, now: datetime) -> list[float]:
    """24 weights by local hour of day, the means per lived hour
    (:func:`~adfunnel.pacing.hour_means.mean_shapes` of this one campaign: an hour it
    has not lived weighs as its average lived hour), normalised to sum 1; all zero when
    there is no traffic. Hours from the current hour on are left out."""
    z = zone(tz)
    end = hour_start(now)
    counts = {h: n for h, n in counts.items() if h < end}
    if not sum(counts.values()):
        return [0.0] * HOURS
    sums, lived = _local_sums(counts, z, end)
    return mean_shapes(sums[None, :], lived[None, :])[0][0].tolist()


def _local_sums(counts: dict[datetime, int], z: tzinfo, end: datetime
                ) -> tuple[np.ndarray, np.ndarray]:
    """Requests and lived hours by local hour of day, each hour named exactly."""
    sums, lived = np.zeros(HOURS), np.zeros(HOURS, dtype=np.int64)
    for at, n in counts.items():
        sums[at.astimezone(z).hour] += n
    at = min(counts)
    while at < end:
        lived[at.astimezone(z).hour] += 1
        at += timedelta(hours=1)
    return sums, lived


def shapes(traffic: dict[int, dict[datetime, int]], zones: dict[int, str], now: datetime,
           ) -> dict[int, list[float]]:
    """The curve shape of every campaign in ``zones`` (one by one, each hour named
    exactly: the reference :func:`shape_matrix` is checked against): its own when it
    has at least ``MIN_REQUESTS`` logged before the current hour, else the average of
    those that do, else flat."""
    end = hour_start(now)
    rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for cid, tz in zones.items():
        counts = {h: n for h, n in traffic.get(cid, {}).items() if h < end}
        if sum(counts.values()) >= MIN_REQUESTS:
            rows[cid] = _local_sums(counts, zone(tz), end)
    own = list(rows)
    sums = np.array([rows[c][0] for c in own]).reshape(len(own), HOURS)
    lived = np.array([rows[c][1] for c in own]).reshape(len(own), HOURS)
    shaped, average = mean_shapes(sums, lived)
    got = {c: shaped[i].tolist() for i, c in enumerate(own)}
    return {cid: got.get(cid, average.tolist()) for cid in zones}


def hour_start(now: datetime) -> datetime:
    """The start of ``now``'s UTC hour (the unfinished hour a shape leaves out)."""
    return now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def window_start(now: datetime, days: int = 7) -> datetime:
    return (now - timedelta(days=days)).astimezone(UTC).replace(minute=0, second=0,
                                                                 microsecond=0)
