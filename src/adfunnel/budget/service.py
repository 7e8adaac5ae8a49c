"""The budget & pacing service: committed spend, budget states, slices and pacing.

One instance is one shard (campaigns with ``campaign_id % shards == shard``); the
embedded default runs one in-process. DESIGN.md §Money and budgets:

- committed spend = billed (ledger, replaces estimates as the watermark moves)
  + expected cost served and not yet billed + slices outstanding; a serve whose event
  billed leaves the in-flight estimate by its own expected cost
  (``BilledUpdate.settled_after_micros``), never below 0;
- open / metered / exhausted by ``adfunnel.budget.slices``;
- every ``control_interval_s`` the PI controller (``adfunnel.pacing.controller``)
  sets p per campaign against its target plan (``adfunnel.pacing.curve``).

Reports are idempotent by ``(server_id, seq)``: a duplicate entry is acknowledged and
ignored, an out-of-order one is applied once; a re-sent message gets the reply it had.
Time comes from the injected clock only. Not thread-safe by itself: the HTTP layer
serialises calls with a lock.

Catalogue scale (10⁵–10⁶ campaigns): the state of every campaign-day is a row of numpy
columns (:class:`_Rows`), so a control step, the billed feed and a state refresh are
vectorised over arrays; a report costs what it names (its spend, closed slices and
wants, each found by id: a slice by its id, a campaign-day by a dict key) plus the
campaign-days whose state or p changed since the server's last reply (a change log
by version, :class:`~adfunnel.budget.protocol.Reply`). Slices, spend buckets and
per-server rates live in per-row dicts only for the rows that have them. Target
curves are followed from 24 hourly weights per shape (:mod:`adfunnel.pacing.curve_bank`).

Every decision of the per-campaign service this replaced is kept bit for bit (the
replay report of a seed depends on it): a campaign-day's state is refreshed exactly
where that service refreshed it (its spend reported, a grant, a billed update, a
control step, a budget edit, each report for the days still cold) and nowhere else;
a slice past its expiry leaves the outstanding amount at once but counts as used only
where that service marked it (a grant, a billed update, a step of its day); every
report makes the new local days of all campaigns (a bound on the earliest day end
keeps that O(1) between midnights); curves, controller steps and hold bands are the
same float operations; yesterday's p is kept per elapsed minute (for the rows whose p
moved during the day, until the next day is made from it: 12 kB each; a row whose p
never moved keeps one number) to seed the next day at the same minute of its curve;
days are forgotten on the first step after they ended two days ago.

Cold start, restart and takeover (DESIGN.md: "a restarted or new budget shard grants
nothing for a campaign-day before it has read that day's billed spend"): an instance
has a random ``epoch``. It grants no slice for a campaign-day, and holds it metered,
until (1) billed spend of that day has been read from the ledger (a ``BilledUpdate``)
and (2) it is warm: every server that reported to it in the last ``SERVER_STALE_S``
has reported once more naming this epoch — by then it has re-sent the spend the
previous instance acknowledged (``ReportEntry.resent``) and dropped that instance's
slices — and ``warmup_s`` has passed since start (servers report once a second, so
each live server has been heard), or every one of ``expected_servers`` has synced.
"""

from __future__ import annotations

import heapq
import itertools
import math
import uuid
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import StrEnum

import numpy as np

from adfunnel.budget.gate import effective_daily_budget
from adfunnel.budget.protocol import (
    BilledColumns,
    BilledUpdate,
    CampaignSpend,
    Directive,
    Reply,
    Report,
    SliceGrant,
    SliceUse,
)
from adfunnel.budget.slices import (
    OPEN_RESERVE_CHARGES,
    OPEN_RESERVE_S,
    SLICE_TTL_S,
    BudgetState,
    grantable,
    slice_size,
    worst_case_regime,
)
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.campaigns.model import BidType, Campaign, CampaignStatus, PacingMode
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import Clock
from adfunnel.pacing import controller
from adfunnel.pacing.curve import TargetCurve, TargetPlan
from adfunnel.pacing.curve_bank import MAX_MINUTES, CurveBank, share_from

#: Seen sequence numbers kept per (server, shard); older ones count as seen.
SEQ_WINDOW = 4096
#: Charges ahead of its curve a campaign must be before its p may be lowered.
HOLD_BAND_CHARGES = 3
#: Seconds after start before a fleet shard may grant (three report periods).
WARMUP_S = 3.0
#: A server silent this long no longer holds a new instance's warm-up back (seconds).
SERVER_STALE_S = 10.0
#: Seconds a server's acknowledged directive version holds the change log back.
ACK_KEPT_S = 60.0
#: Seconds after a day's end at which a control step forgets it (two days).
FORGET_AFTER_S = 2 * 86400
#: Campaign-days a control step works on at once (its temporaries stay in cache).
STEP_CHUNK = 65_536
#: Key of a campaign-day in the row index: campaign id << DAY_BITS | day ordinal.
DAY_BITS = 22
#: Most minutes a curve cursor adds one by one; farther, its sum is made again.
CURSOR_WALK = 16


class PacingStatus(StrEnum):
    PACING = "pacing"
    LIMITED_BY_BUDGET = "limited_by_budget"
    LIMITED_BY_BID_OR_AUDIENCE = "limited_by_bid_or_audience"
    EXHAUSTED = "exhausted"
    STOPPED = "stopped"
    #: a (re)started instance that has not yet read the day's billed spend or heard
    #: every server: metered, no grants
    COLD = "cold"


# integer codes of the state columns
OPEN, METERED, EXHAUSTED, STOPPED = 0, 1, 2, 3
STATES = (BudgetState.OPEN, BudgetState.METERED, BudgetState.EXHAUSTED, BudgetState.STOPPED)
STATE_VALUES = tuple(s.value for s in STATES)
STATUSES = tuple(PacingStatus)
S_PACING, S_BUDGET, S_BID, S_EXHAUSTED, S_STOPPED, S_COLD = range(6)


def day_budget(cd: CampaignDay) -> int:
    """The campaign-day's budget, micros: min(daily, lifetime − billed on earlier days)."""
    return cd.day_budget()


def hold_band(spent_since_plan_micros: int, charge: int, budget_micros: int) -> float:
    """How far ahead of its curve a campaign must be before its p may be lowered: the
    noise of its billed spend (3 σ, σ ≈ √(spend × charge) for spend made of charges up
    to ``charge``), at least ``HOLD_BAND_CHARGES`` charges, at most 1 % of the budget."""
    sigma3 = 3.0 * math.sqrt(max(0, spent_since_plan_micros) * max(1, charge))
    return max(HOLD_BAND_CHARGES * charge, min(sigma3, 0.01 * budget_micros))


def hold_bands(spent_since_plan: np.ndarray, charge: np.ndarray,
               budget: np.ndarray) -> np.ndarray:
    """:func:`hold_band` of arrays (micros)."""
    sigma3 = 3.0 * np.sqrt(np.maximum(0, spent_since_plan).astype(np.float64)
                           * np.maximum(1, charge))
    return np.maximum(HOLD_BAND_CHARGES * charge, np.minimum(sigma3, 0.01 * budget))


#: Bid types by code (the ``bid`` column, :class:`CampaignColumns`).
BID_TYPES = (BidType.CPM, BidType.CPC, BidType.CPA)
_BID_CODE = {b: i for i, b in enumerate(BID_TYPES)}
#: ``fend`` of a campaign without a flight end.
NO_END = 1 << 40


@dataclass(frozen=True, slots=True)
class CampaignColumns:
    """What the budget service needs of many campaign records, as numpy columns of one
    length (bulk start-up from the store, no record objects): ids, versions, bid type
    codes (``BID_TYPES``), bid, daily and lifetime budgets (micros; lifetime -1 = none),
    status active, pacing even / accelerated, flight start and end (local date
    ordinals; ``NO_END`` = open-ended) and time zone (index into ``zones``)."""

    ids: np.ndarray
    versions: np.ndarray
    bid: np.ndarray
    bid_micros: np.ndarray
    daily: np.ndarray
    lifetime: np.ndarray
    active: np.ndarray
    even: np.ndarray
    accel: np.ndarray
    fstart: np.ndarray
    fend: np.ndarray
    tz: np.ndarray
    zones: list[str]

    def __len__(self) -> int:
        return len(self.ids)

    def charges(self) -> np.ndarray:
        """:func:`charge_micros` of each campaign (int64 micros)."""
        cpm = np.maximum(1, -(-self.bid_micros // 1000))
        return np.where(self.bid == _BID_CODE[BidType.CPM], cpm, np.maximum(1, self.bid_micros))

    @classmethod
    def of(cls, campaigns: Sequence[Campaign]) -> CampaignColumns:
        """The columns of record objects."""
        zones: dict[str, int] = {}
        tz = [zones.setdefault(c.time_zone, len(zones)) for c in campaigns]

        def col(values: Iterable[object], dtype: type) -> np.ndarray:
            return np.fromiter(values, dtype=dtype, count=len(campaigns))

        return cls(
            col((c.id for c in campaigns), np.int64),
            col((c.version for c in campaigns), np.int64),
            col((_BID_CODE[c.bid_type] for c in campaigns), np.int8),
            col((c.bid_micros for c in campaigns), np.int64),
            col((c.daily_budget_micros for c in campaigns), np.int64),
            col((-1 if c.lifetime_budget_micros is None else c.lifetime_budget_micros
                 for c in campaigns), np.int64),
            col((c.status is CampaignStatus.ACTIVE for c in campaigns), np.bool_),
            col((c.pacing_mode is PacingMode.EVEN for c in campaigns), np.bool_),
            col((c.pacing_mode is PacingMode.ACCELERATED for c in campaigns), np.bool_),
            col((c.flight_start.toordinal() for c in campaigns), np.int64),
            col((NO_END if c.flight_end is None else c.flight_end.toordinal()
                 for c in campaigns), np.int64),
            np.array(tz, dtype=np.int64), list(zones))


@dataclass(frozen=True, slots=True)
class OwnedCampaigns:
    """The campaigns of a shard as columns (the billed feed and traffic shapes read
    them): ids, time zone index into ``zones``, bid type code, whether a lifetime budget
    is set; ``order`` sorts ``ids`` (for :meth:`positions`)."""

    ids: np.ndarray
    tz: np.ndarray
    zones: list[str]
    bid: np.ndarray
    lifetime: np.ndarray
    order: np.ndarray
    slots: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def positions(self, campaign_ids: np.ndarray) -> np.ndarray:
        """Index of each id in ``ids`` (-1 where absent)."""
        sorted_ids = self.ids[self.order]
        i = np.searchsorted(sorted_ids, campaign_ids)
        i = np.minimum(i, max(len(sorted_ids) - 1, 0))
        if not len(sorted_ids):
            return np.full(len(campaign_ids), -1, dtype=np.int64)
        return np.where(sorted_ids[i] == campaign_ids, self.order[i], -1)


@dataclass(slots=True)
class _Slice:
    server_id: str
    amount: int
    expires_at: float
    used: int | None = None  # set when the server closes it
    closed_at: float = 0.0
    provisional: bool = False  # expired here before the server closed it: worst case
    lapsed: bool = False  # past its expiry and still open: no longer outstanding


# -- columns -----------------------------------------------------------------------------------
_I8, _I64, _F64, _B = np.int8, np.int64, np.float64, np.bool_
_NAN = float("nan")

#: Per campaign (a slot): what the state rules read from its record.
_SLOT_COLUMNS: dict[str, tuple[type, float]] = {
    "cid": (_I64, -1), "version": (_I64, 0), "bid": (_I8, 0), "charge": (_I64, 1),
    "daily": (_I64, 0), "lifetime": (_I64, -1),
    "even": (_B, 0), "accel": (_B, 0), "active": (_B, 0), "owned": (_B, 0),
    "fstart": (_I64, 0), "fend": (_I64, NO_END), "tz": (_I64, 0), "shape": (_I64, -1),
    "created": (_F64, _NAN), "cur": (_I64, -1), "head": (_I64, -1),
}
#: Per campaign-day (a row). Curve: ``total`` weight of the active minutes (``flat``:
#: none, each minute weighs 1), ``peak_share`` per second, and a cursor (``cur_m``
#: minutes added up to ``cur_acc``, left to right). p history for the next day:
#: ``p_first`` (first minute a step recorded p, -1: none), ``p_const`` (p of every step
#: so far, while it never moved) and ``p_hist`` (row of :class:`_History` once it moved).
_ROW_COLUMNS: dict[str, tuple[type, float]] = {
    "live": (_B, 0), "slot": (_I64, -1), "nxt": (_I64, -1), "day": (_I64, 0),
    "dz": (_I64, 0), "start_s": (_F64, 0), "end_s": (_F64, 0),
    "shape": (_I64, 0), "total": (_F64, 0), "flat": (_B, 0), "peak_share": (_F64, 0),
    "cur_m": (_I64, 0), "cur_acc": (_F64, 0),
    "plan_budget": (_I64, 0), "anchor_s": (_F64, 0), "anchor_spend": (_I64, 0),
    "plan_ca": (_F64, 0), "plan_peak_rate": (_F64, 0), "target_last": (_F64, _NAN),
    "p": (_F64, 1), "integral": (_F64, 0), "spend_avg": (_F64, -1),
    "target_avg": (_F64, -1), "charges_avg": (_F64, -1),
    "billed": (_I64, 0), "settled_after": (_I64, 0), "lifetime_before": (_I64, 0),
    "watermark": (_F64, 0), "billed_read": (_B, 0),
    "bucket_sum": (_I64, 0), "sl_used": (_I64, 0), "sl_open": (_I64, 0),
    "step_spend": (_I64, 0), "step_charges": (_I64, 0), "served_total": (_I64, 0),
    "rate_ewma": (_F64, 0), "peak_rate": (_F64, 0), "last_step_s": (_F64, 0),
    "last_committed": (_I64, -1), "rate_measured": (_B, 0),
    "state": (_I8, METERED), "status": (_I8, S_COLD), "exhausted_at": (_F64, _NAN),
    "pub_state": (_I8, -1), "pub_p": (_F64, _NAN), "ver": (_I64, 0),
    "p_first": (_I64, -1), "p_const": (_F64, _NAN), "p_hist": (_I64, -1),
}


class _Columns:
    """Growable numpy columns (one attribute per column) with a free list."""

    def __init__(self, spec: dict[str, tuple[type, float]], capacity: int = 256) -> None:
        self.spec = spec
        self.n = 0
        self.cap = 0
        self.free: list[int] = []
        self._alloc(capacity)

    def _alloc(self, cap: int) -> None:
        for name, (dtype, fill) in self.spec.items():
            arr = np.full(cap, fill, dtype=dtype)
            if self.cap:
                arr[: self.cap] = getattr(self, name)
            setattr(self, name, arr)
        self.cap = cap

    def take(self, k: int) -> np.ndarray:
        """``k`` fresh rows (reset to their fills), reusing freed ones first."""
        r = min(k, len(self.free))
        reuse = np.array(self.free[len(self.free) - r:], dtype=np.int64)
        del self.free[len(self.free) - r:]
        new = k - r
        if self.n + new > self.cap:
            self._alloc(max(self.n + new, 2 * self.cap))
        rows = np.concatenate([reuse, np.arange(self.n, self.n + new, dtype=np.int64)])
        self.n += new
        if r:
            self.reset(reuse)
        return rows

    def reset(self, rows: np.ndarray) -> None:
        for name, (_, fill) in self.spec.items():
            getattr(self, name)[rows] = fill


class _History:
    """p of campaign-days by elapsed minute (NaN: no step in that minute), one row of
    ``MAX_MINUTES`` floats per campaign-day whose p moved during its day."""

    def __init__(self) -> None:
        self.data = np.full((0, MAX_MINUTES), _NAN)
        self.free: list[int] = []

    def take(self, k: int) -> np.ndarray:
        """``k`` rows of NaN."""
        if len(self.free) < k:
            n = len(self.data)
            cap = max(2 * n, n + k - len(self.free), 64)
            data = np.full((cap, MAX_MINUTES), _NAN)
            data[:n] = self.data
            self.data = data
            self.free.extend(range(cap - 1, n - 1, -1))
        idx = np.array(self.free[len(self.free) - k:], dtype=np.int64)
        del self.free[len(self.free) - k:]
        self.data[idx] = _NAN
        return idx

    def release(self, idx: np.ndarray) -> None:
        self.free.extend(idx.tolist())


class CampaignDay:
    """A live view of one campaign-day row of a :class:`BudgetService` (rebuildable from
    the ledger and the next reports). Attribute reads follow the service's columns."""

    __slots__ = ("_s", "row")

    def __init__(self, service: BudgetService, row: int) -> None:
        self._s = service
        self.row = row

    def _col(self, name: str) -> np.ndarray:
        return getattr(self._s._rows, name)

    @property
    def campaign(self) -> Campaign:
        """The campaign record (fetched through ``BudgetService.campaign_loader`` for a
        campaign loaded as columns)."""
        return self._s.campaign(self.campaign_id)

    @property
    def campaign_id(self) -> int:
        return int(self._s._slots.cid[self._col("slot")[self.row]])

    @property
    def daily_budget_micros(self) -> int:
        return int(self._s._slots.daily[self._col("slot")[self.row]])

    def day_budget(self) -> int:
        """min(daily, lifetime − billed on earlier days), micros (≥ 0)."""
        slot = self._col("slot")[self.row]
        life = int(self._s._slots.lifetime[slot])
        return effective_daily_budget(self.daily_budget_micros, None if life < 0 else life,
                                      self.lifetime_billed_before)

    @property
    def day(self) -> date:
        return date.fromordinal(int(self._col("day")[self.row]))

    @property
    def start_s(self) -> float:
        return float(self._col("start_s")[self.row])

    @property
    def end_s(self) -> float:
        return float(self._col("end_s")[self.row])

    @property
    def plan(self) -> TargetPlan:
        r, t = self.row, self._s._rows
        return TargetPlan(self._s._curve(int(t.shape[r]), int(t.dz[r])), int(t.plan_budget[r]),
                          float(t.anchor_s[r]), int(t.anchor_spend[r]))

    @property
    def ctl(self) -> controller.ControllerState:
        r, t = self.row, self._s._rows
        return controller.ControllerState(float(t.p[r]), float(t.integral[r]),
                                          float(t.spend_avg[r]), float(t.target_avg[r]),
                                          float(t.charges_avg[r]))

    @property
    def state(self) -> BudgetState:
        return STATES[int(self._col("state")[self.row])]

    @property
    def status(self) -> PacingStatus:
        return STATUSES[int(self._col("status")[self.row])]

    @property
    def exhausted_at(self) -> float | None:
        v = float(self._col("exhausted_at")[self.row])
        return None if math.isnan(v) else v

    @property
    def p_by_minute(self) -> dict[int, float]:
        """p after the last control step of each elapsed minute that had one (empty
        once the next day was made from it, for a day whose p moved)."""
        return self._s._p_by_minute(self.row)

    def _int(self, name: str) -> int:
        return int(self._col(name)[self.row])

    billed = property(lambda self: self._int("billed"))
    settled_after = property(lambda self: self._int("settled_after"))
    lifetime_billed_before = property(lambda self: self._int("lifetime_before"))
    served_total = property(lambda self: self._int("served_total"))
    bucket_sum = property(lambda self: self._int("bucket_sum"))
    last_committed = property(lambda self: self._int("last_committed"))
    watermark = property(lambda self: float(self._col("watermark")[self.row]))
    peak_rate = property(lambda self: float(self._col("peak_rate")[self.row]))
    plan_peak_rate = property(lambda self: float(self._col("plan_peak_rate")[self.row]))
    rate_ewma = property(lambda self: float(self._col("rate_ewma")[self.row]))
    last_step_s = property(lambda self: float(self._col("last_step_s")[self.row]))
    rate_measured = property(lambda self: bool(self._col("rate_measured")[self.row]))

    @property
    def slices(self) -> dict[str, _Slice]:
        return self._s._slices.get(self.row, {})

    @property
    def server_rates(self) -> dict[str, float]:
        return self._s._rates.get(self.row, {})

    # -- spend accounting -------------------------------------------------------------
    def in_flight(self) -> int:
        """Expected open spend not yet covered by billing + closed/expired slices' use
        (worst case for expired ones) not yet covered, less the expected cost of those
        serves whose event already billed, micros (≥ 0)."""
        return max(0, self._int("bucket_sum") + self._int("sl_used") - self._int("settled_after"))

    def spent(self) -> int:
        """Billed + in flight, leases excluded: the spend the controller follows."""
        return self._int("billed") + self.in_flight()

    def outstanding(self, now: float) -> int:
        """Amount of live (open, unexpired) slices, micros."""
        return sum(s.amount for s in self.slices.values() if s.used is None and s.expires_at > now)

    def committed(self, now: float) -> int:
        return self._int("billed") + self.in_flight() + self.outstanding(now)


class BudgetService:
    """One shard of the budget & pacing service.

    Args:
        clock: injected domain clock (UTC).
        shard, shards: this shard's number and the shard count (routing by campaign id).
        default_shape: 24 hourly weights for campaigns without a traffic shape
            (``set_traffic_shape``); flat when not given.
        control_interval_s: seconds between controller steps.
        gains: controller tuning.
        warmup_s: seconds after start before grants (see module docstring).
        expected_servers: the servers that report here, when known (the embedded
            default: its one in-process server); warm once each has synced.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        shard: int = 0,
        shards: int = 1,
        default_shape: Sequence[float] | None = None,
        control_interval_s: float = 10.0,
        gains: controller.Gains = controller.DEFAULT_GAINS,
        warmup_s: float = WARMUP_S,
        expected_servers: set[str] | None = None,
    ) -> None:
        self.clock = clock
        self.epoch = uuid.uuid4().hex[:16]
        self.started_at = clock.now().timestamp()
        self.warmup_s = warmup_s
        self.expected_servers = set(expected_servers) if expected_servers else None
        self._heard: dict[str, float] = {}  # server id -> last report (domain s)
        self._synced: set[str] = set()  # servers that reported naming this epoch
        self._warm = False
        self.shard = shard
        self.shards = shards
        self.control_interval_s = control_interval_s
        self.gains = gains
        self._bank = CurveBank()
        self._default_sid = int(self._bank.shapes.add(
            tuple(default_shape) if default_shape else (1.0,) * 24)[0])
        self._curves: dict[tuple[int, int], TargetCurve] = {}
        self._tz_ids: dict[str, int] = {}
        self._tz_names: list[str] = []
        #: records of the campaigns given as objects; others are read through
        #: ``campaign_loader`` (campaign id -> record) when a view asks
        self._campaigns: dict[int, Campaign] = {}
        self.campaign_loader: Callable[[int], Campaign] | None = None
        self._slot_of: dict[int, int] = {}
        self._slots = _Columns(_SLOT_COLUMNS)
        self._rows = _Columns(_ROW_COLUMNS)
        self._row_of: dict[int, int] = {}  # campaign id << DAY_BITS | day ordinal -> row
        self._pending_shapes: dict[int, int] = {}  # shapes of campaigns not yet known
        self._owned_cache: OwnedCampaigns | None = None
        self._yesterday_p: dict[tuple[int, date], dict[int, float]] = {}
        self._history = _History()
        self._step_minutes: dict[int, np.ndarray] = {}  # day-zone -> minutes with a step
        # sparse per-row state: only rows that have any
        self._buckets: dict[int, deque[tuple[float, int]]] = {}
        self._slices: dict[int, dict[str, _Slice]] = {}
        self._rates: dict[int, dict[str, float]] = {}
        self._slice_row: dict[str, int] = {}
        self._expiry: list[tuple[float, str]] = []  # (expires_at, slice id), a heap
        # every owned campaign's current row holds in [_roll_lo, _next_roll) (Unix s):
        # no new day to make there
        self._roll_lo = math.inf
        self._next_roll = -math.inf
        self._first_end = math.inf  # the earliest end of a live row's day (Unix s)
        # a refresh left a campaign-day cold only for want of a warm instance
        self._maybe_cold = False
        # published directives: version, change log (version, rows changed in it)
        self._version = 0
        self._log_vers: list[int] = []
        self._log_rows: list[np.ndarray] = []
        self._log_floor = 0  # changes up to this version are no longer in the log
        self._acked: dict[str, tuple[int, float]] = {}  # server -> (version, when)
        self._days_iso: dict[int, str] = {}
        self._seen: dict[str, tuple[int, set[int]]] = {}
        self._last_reply: dict[str, tuple[tuple[int, ...], Reply]] = {}
        self._slice_ids = itertools.count(1)
        self.unknown_campaign_reports = 0
        #: control steps run, and the lowest p an evenly paced campaign-day was given
        self.steps = 0
        self.p_min: float | None = None
        #: (campaign id, unix s, p, state) after each control step; for reports and plots.
        self.on_step: Callable[[CampaignDay, float], None] | None = None

    # -- campaign records ---------------------------------------------------------------
    def owns(self, campaign_id: int) -> bool:
        return campaign_id % self.shards == self.shard

    def upsert_campaign(self, campaign: Campaign, *, created_at: float | None = None) -> None:
        """Apply a campaign record from the change log (newer versions only). A budget
        edit rescales the rest of today's curve from the spend committed now.

        ``created_at`` (Unix s) marks a campaign created now: on the local day it was
        created, its curve starts at that moment, so the whole daily budget is spread
        over the rest of the day instead of being "behind" the part of the curve that
        passed before it existed.
        """
        slot = self._slot_of.get(campaign.id)
        if slot is not None and self._slots.version[slot] > campaign.version:
            return
        old_daily = None if slot is None else int(self._slots.daily[slot])
        slot = self._slot(campaign)
        if created_at is not None:
            self._slots.created[slot] = created_at
        now = self._now()
        rows = self._rows_of_slot(slot)
        if old_daily is not None and old_daily != campaign.daily_budget_micros:
            for row in rows:
                self._rescale(row, campaign.daily_budget_micros, now)
        if rows:
            self._refresh(np.array(rows, dtype=np.int64), now)

    def upsert_campaigns(self, campaigns: Sequence[Campaign]) -> None:
        """Campaign records in bulk: new campaigns are added vectorised, known ones go
        through :meth:`upsert_campaign`."""
        new = []
        for c in campaigns:
            if c.id in self._slot_of:
                self.upsert_campaign(c)
            else:
                new.append(c)
        if new:
            self.load_campaigns(CampaignColumns.of(new))
            self._campaigns.update((c.id, c) for c in new)

    def load_campaigns(self, cols: CampaignColumns) -> None:
        """Campaigns not known yet, as columns (start-up reads the store in bulk; no
        record objects are made). Ids already known go through their records
        (:meth:`upsert_campaign`) only; here they are skipped."""
        get = self._slot_of.get
        fresh = np.fromiter((get(c, -1) < 0 for c in cols.ids.tolist()), dtype=bool,
                            count=len(cols))
        ix = np.flatnonzero(fresh)
        if len(ix):
            self._add_slots(cols, ix)

    def campaign(self, campaign_id: int) -> Campaign:
        """The record of a known campaign.

        Raises:
            LookupError: unknown here, or loaded as columns with no ``campaign_loader``.
        """
        c = self._campaigns.get(campaign_id)
        if c is None:
            if campaign_id not in self._slot_of or self.campaign_loader is None:
                raise LookupError(f"campaign {campaign_id}: no record here")
            c = self.campaign_loader(campaign_id)
        return c

    def set_traffic_shape(self, campaign_id: int, hourly: Sequence[float]) -> None:
        """Hourly eligible-request shape (24 local hours, last 7 days) for future curves."""
        if len(hourly) != 24:
            raise ValueError("hourly shape needs 24 values")
        sid = int(self._bank.shapes.add(np.array(hourly, dtype=np.float64))[0])
        slot = self._slot_of.get(campaign_id)
        if slot is None:
            self._pending_shapes[campaign_id] = sid
        else:
            self._slots.shape[slot] = sid
        self._maybe_compact_shapes()

    def set_traffic_shapes(self, campaign_ids: np.ndarray, hourly: np.ndarray,
                           others: Sequence[float] | None = None) -> None:
        """Shapes in bulk: row ``i`` of ``hourly`` (k × 24) for ``campaign_ids[i]``; every
        other campaign known now gets ``others`` (the placement average) when given.
        A campaign added later keeps the default shape until it is given one."""
        if others is not None:
            sid = int(self._bank.shapes.add(np.array(others, dtype=np.float64))[0])
            self._slots.shape[: self._slots.n] = sid
        if len(campaign_ids):
            ids = self._bank.shapes.add(hourly)
            slots = np.array([self._slot_of.get(int(c), -1) for c in campaign_ids.tolist()],
                             dtype=np.int64)
            ok = slots >= 0
            self._slots.shape[slots[ok]] = ids[ok]
            for c, sid2 in zip(campaign_ids[~ok].tolist(), ids[~ok].tolist(), strict=True):
                self._pending_shapes[int(c)] = int(sid2)
        self._maybe_compact_shapes()

    def has_shape(self, campaign_id: int) -> bool:
        """Whether a known campaign was given a traffic shape (else its new days take the
        default)."""
        slot = self._slot_of.get(campaign_id)
        return slot is not None and bool(self._slots.shape[slot] >= 0)

    def seed_yesterday(self, campaign_id: int, day: date, p_by_minute: dict[int, float]) -> None:
        """p by elapsed minute of ``day``'s previous day (restart recovery, simulations)."""
        self._yesterday_p[(campaign_id, day)] = dict(p_by_minute)

    def _slot(self, c: Campaign) -> int:
        slot = self._slot_of.get(c.id)
        if slot is None:
            slot = int(self._slots.take(1)[0])
            self._owned_cache = None
            self._next_roll = -math.inf
            self._slot_of[c.id] = slot
            self._slots.cid[slot] = c.id
            self._slots.shape[slot] = self._pending_shapes.pop(c.id, -1)
        self._campaigns[c.id] = c
        self._write_slot(slot, c)
        return slot

    def _write_slot(self, slot: int, c: Campaign) -> None:
        s = self._slots
        before = (s.owned[slot], s.tz[slot], s.bid[slot], s.lifetime[slot] >= 0)
        s.version[slot] = c.version
        s.bid[slot] = _BID_CODE[c.bid_type]
        s.charge[slot] = c.max_charge_micros
        s.daily[slot] = c.daily_budget_micros
        s.lifetime[slot] = -1 if c.lifetime_budget_micros is None else c.lifetime_budget_micros
        s.even[slot] = c.pacing_mode is PacingMode.EVEN
        s.accel[slot] = c.pacing_mode is PacingMode.ACCELERATED
        s.active[slot] = c.status is CampaignStatus.ACTIVE
        s.owned[slot] = self.owns(c.id)
        s.fstart[slot] = c.flight_start.toordinal()
        s.fend[slot] = NO_END if c.flight_end is None else c.flight_end.toordinal()
        s.tz[slot] = self._tz_id(c.time_zone)
        if (s.owned[slot], s.tz[slot], s.bid[slot], s.lifetime[slot] >= 0) != before:
            self._owned_cache = None
            self._next_roll = -math.inf

    def _add_slots(self, cols: CampaignColumns, ix: np.ndarray) -> None:
        """Vectorised slot creation for the campaigns ``cols[ix]`` (none known yet)."""
        self._owned_cache = None
        self._next_roll = -math.inf
        slots = self._slots.take(len(ix))
        s = self._slots
        ids = cols.ids[ix]
        s.shape[slots] = -1
        s.cid[slots] = ids
        s.version[slots] = cols.versions[ix]
        s.bid[slots] = cols.bid[ix]
        s.charge[slots] = cols.charges()[ix]
        s.daily[slots] = cols.daily[ix]
        s.lifetime[slots] = cols.lifetime[ix]
        s.active[slots] = cols.active[ix]
        s.even[slots] = cols.even[ix]
        s.accel[slots] = cols.accel[ix]
        s.owned[slots] = ids % self.shards == self.shard
        s.fstart[slots] = cols.fstart[ix]
        s.fend[slots] = cols.fend[ix]
        zone_ids = np.array([self._tz_id(z) for z in cols.zones] or [0], dtype=np.int64)
        s.tz[slots] = zone_ids[cols.tz[ix]]
        self._slot_of.update(zip(ids.tolist(), slots.tolist(), strict=True))
        for cid in [c for c in self._pending_shapes if c in self._slot_of]:
            s.shape[self._slot_of[cid]] = self._pending_shapes.pop(cid)

    def owned(self) -> OwnedCampaigns:
        """This shard's campaigns as columns (cached until a campaign record changes)."""
        if self._owned_cache is None:
            s = self._slots
            slots = np.flatnonzero(s.owned[: s.n])
            ids = s.cid[slots].copy()
            self._owned_cache = OwnedCampaigns(
                ids, s.tz[slots].copy(), list(self._tz_names), s.bid[slots].copy(),
                s.lifetime[slots] >= 0, np.argsort(ids, kind="stable"), slots)
        return self._owned_cache

    def _tz_id(self, tz: str) -> int:
        i = self._tz_ids.get(tz)
        if i is None:
            i = self._tz_ids[tz] = len(self._tz_names)
            self._tz_names.append(tz)
        return i

    def _rows_of_slot(self, slot: int) -> list[int]:
        out = []
        r = int(self._slots.head[slot])
        while r >= 0:
            out.append(r)
            r = int(self._rows.nxt[r])
        return out

    def _rescale(self, row: int, budget: int, now: float) -> None:
        """A budget edit: the rest of the day's curve from the spend committed now."""
        t = self._rows
        self._lapse(now)
        in_fl = max(0, int(t.bucket_sum[row] + t.sl_used[row] - t.settled_after[row]))
        spent = int(t.billed[row]) + in_fl
        at = now - float(t.start_s[row])
        one = np.array([row])
        t.plan_budget[row] = budget
        t.anchor_s[row] = at
        t.anchor_spend[row] = spent + int(t.sl_open[row])
        t.plan_ca[row] = self._shares(one, np.array([at]))[0]
        t.plan_peak_rate[row] = budget * t.peak_share[row]
        t.integral[row], t.spend_avg[row], t.target_avg[row], t.charges_avg[row] = 0, -1, -1, -1
        t.target_last[row] = _NAN
        t.last_committed[row] = spent

    # -- curves -------------------------------------------------------------------------
    def _curve(self, shape_id: int, dz: int) -> TargetCurve:
        key = (shape_id, dz)
        c = self._curves.get(key)
        if c is None:
            if len(self._curves) > 256:
                self._curves.clear()
            c = self._curves[key] = self._bank.curve(shape_id, dz)
        return c

    def _acc_at(self, rows: np.ndarray, minute: np.ndarray) -> np.ndarray:
        """The weights of elapsed minutes ``[0, minute)`` of each row's day added in
        order (``build_curve``'s running sum). Each row's cursor moves forward from
        where the last call left it, minute by minute; a row asked for an earlier
        minute, or more than ``CURSOR_WALK`` minutes ahead, has its sum made again from
        its day's facts (once per distinct shape, day-zone and minute). ``rows`` unique;
        ``minute`` below each row's end minute."""
        t = self._rows
        lag = minute - t.cur_m[rows]
        far = (lag < 0) | (lag > CURSOR_WALK)
        if far.any():
            self._place_cursors(rows[far], minute[far])
            lag[far] = 0
        todo = np.flatnonzero(lag > 0)
        while len(todo):
            rr = rows[todo]
            m = t.cur_m[rr]
            t.cur_acc[rr] += self._bank.weights(t.shape[rr], t.dz[rr], m, t.flat[rr])
            t.cur_m[rr] = m + 1
            lag[todo] -= 1
            todo = todo[lag[todo] > 0]
        return t.cur_acc[rows]

    def _place_cursors(self, rows: np.ndarray, minute: np.ndarray) -> None:
        """Put each row's cursor at ``minute`` (its running sum from the day's facts)."""
        t = self._rows
        key = (t.shape[rows] << 35) | (t.dz[rows] << 11) | minute
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        facts = self._bank.facts(t.shape[rows][first], t.dz[rows][first], minute[first])
        t.cur_m[rows] = minute
        t.cur_acc[rows] = facts.acc[inv]

    def _shares(self, rows: np.ndarray, elapsed_s: np.ndarray) -> np.ndarray:
        """``TargetCurve.share_at(elapsed_s)`` of each row's curve, bit for bit (rows
        unique)."""
        t, z = self._rows, self._bank.zones
        e = np.asarray(elapsed_s, dtype=np.float64)
        dz = t.dz[rows]
        n, end = z.minutes[dz], z.end_minute[dz]
        x = e / 60.0
        i = np.where(e > 0, np.floor(np.maximum(x, 0.0)), 0).astype(np.int64)
        f = x - i
        acc = np.zeros(len(rows))
        w = np.zeros(len(rows))
        need = np.flatnonzero((e > 0) & (i < end))
        if len(need):
            rr, ii = rows[need], i[need]
            acc[need] = self._acc_at(rr, ii)
            inner = ii + 1 < end[need]
            if inner.any():
                w[need[inner]] = self._bank.weights(t.shape[rr[inner]], t.dz[rr[inner]],
                                                    ii[inner], t.flat[rr[inner]])
        return share_from(e, i, f, n, end, acc, w, t.total[rows])

    def _targets(self, rows: np.ndarray, elapsed_s: np.ndarray) -> np.ndarray:
        """``TargetPlan.target_micros`` of each row at ``elapsed_s`` (float micros), bit
        for bit (rows unique)."""
        t = self._rows
        b = t.plan_budget[rows].astype(np.float64)
        s = t.anchor_spend[rows].astype(np.float64)
        a, ca = t.anchor_s[rows], t.plan_ca[rows]
        out = np.where(s >= b, s, 0.0)
        before = (s < b) & (elapsed_s <= a) & (a != 0.0)
        after = (s < b) & (elapsed_s > a)
        full = after & (ca >= 1.0)
        out = np.where(full, b, out)
        share = before | (after & ~full)
        if share.any():
            ix = np.flatnonzero(share)
            c = self._shares(rows[ix], elapsed_s[ix])
            sb, bb, cab = s[ix], b[ix], ca[ix]
            out[ix] = np.where(before[ix], sb * c / np.maximum(cab, 1e-12),
                               sb + (bb - sb) * (c - cab) / (1.0 - cab))
        return out

    def _maybe_compact_shapes(self) -> None:
        table = self._bank.shapes
        if table.n < 4096 or table.n < 2 * (self._slots.n + 1):
            return
        live = np.flatnonzero(self._rows.live[: self._rows.n])
        keep = np.concatenate([self._slots.shape[: self._slots.n], self._rows.shape[live],
                               np.array(list(self._pending_shapes.values()), dtype=np.int64),
                               np.array([self._default_sid])])
        remap = table.compact(keep)
        s = self._slots.shape[: self._slots.n]
        self._slots.shape[: self._slots.n] = np.where(s >= 0, remap[np.maximum(s, 0)], -1)
        self._rows.shape[live] = remap[self._rows.shape[live]]
        self._default_sid = int(remap[self._default_sid])
        self._pending_shapes = {c: int(remap[i]) for c, i in self._pending_shapes.items()}
        self._curves.clear()

    # -- campaign-day rows ----------------------------------------------------------------
    def campaign_day(self, campaign_id: int, day: date) -> CampaignDay | None:
        row = self._row_of.get(campaign_id << DAY_BITS | day.toordinal())
        return None if row is None else CampaignDay(self, row)

    def _row(self, campaign_id: int, day: date) -> int:
        """The row of (campaign, local day), made on first use; -1 for an unknown campaign."""
        row = self._row_of.get(campaign_id << DAY_BITS | day.toordinal())
        if row is not None:
            return row
        slot = self._slot_of.get(campaign_id)
        if slot is None:
            return -1
        return int(self._new_rows(np.array([slot]), np.array([day.toordinal()]),
                                  self._now())[0])

    def _new_rows(self, slots: np.ndarray, days: np.ndarray, now: float) -> np.ndarray:
        """Rows for (slot, day ordinal) pairs none of which exists yet (vectorised), with
        their curves, first p and state."""
        t, s = self._rows, self._slots
        rows = t.take(len(slots))
        dz = self._day_zones(s.tz[slots], days)
        z = self._bank.zones
        t.live[rows] = True
        t.slot[rows] = slots
        t.day[rows] = days
        t.dz[rows] = dz
        t.start_s[rows] = z.start_s[dz]
        t.end_s[rows] = z.end_s[dz]
        shape = s.shape[slots]
        t.shape[rows] = np.where(shape >= 0, shape, self._default_sid)
        t.last_step_s[rows] = np.maximum(now, t.start_s[rows])
        self._curve_facts(rows)
        daily = s.daily[slots]
        t.plan_budget[rows] = daily
        created = s.created[slots]
        mid = (t.start_s[rows] < created) & (created < t.end_s[rows])
        t.anchor_s[rows] = np.where(mid, created - t.start_s[rows], 0.0)
        if mid.any():
            t.plan_ca[rows[mid]] = self._shares(rows[mid], t.anchor_s[rows[mid]])
        t.plan_peak_rate[rows] = daily * t.peak_share[rows]
        t.p[rows] = self._first_p(slots, days, rows, now)
        keys = (s.cid[slots] << DAY_BITS) | days
        self._row_of.update(zip(keys.tolist(), rows.tolist(), strict=True))
        t.nxt[rows] = s.head[slots]
        s.head[slots] = rows
        self._first_end = min(self._first_end, float(t.end_s[rows].min()))
        self._refresh(rows, now)
        return rows

    def _curve_facts(self, rows: np.ndarray) -> None:
        """Total weight, flatness and peak share of each row's curve, made once per
        distinct (shape, day-zone) pair; each cursor starts at the minute of the row's
        first step (``last_step_s``: its first target is taken there)."""
        t, z = self._rows, self._bank.zones
        dz = t.dz[rows]
        first_e = t.last_step_s[rows] - t.start_s[rows]
        minute = np.clip(np.floor(first_e / 60.0).astype(np.int64), 0, z.end_minute[dz] - 1)
        key = (t.shape[rows] << 35) | (dz << 11) | minute
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        facts = self._bank.facts(t.shape[rows][first], dz[first], minute[first])
        t.total[rows] = facts.total[inv]
        t.flat[rows] = facts.flat[inv]
        t.peak_share[rows] = facts.peak[inv]
        t.cur_m[rows] = minute
        t.cur_acc[rows] = facts.acc[inv]

    def _day_zones(self, tz: np.ndarray, days: np.ndarray) -> np.ndarray:
        keys = tz * (1 << 24) + days
        uniq, inv = np.unique(keys, return_inverse=True)
        ids = np.array([self._bank.zones.get(self._tz_names[int(k >> 24)],
                                             date.fromordinal(int(k & ((1 << 24) - 1))))
                        for k in uniq], dtype=np.int64)
        return ids[inv]

    def _first_p(self, slots: np.ndarray, days: np.ndarray, rows: np.ndarray,
                 now: float) -> np.ndarray:
        """First p of a day: yesterday's p at the elapsed minute nearest to the one of
        ``now`` (the earlier minute on a tie; the seed of ``seed_yesterday`` first), else
        1."""
        p = np.ones(len(rows))
        elapsed = np.maximum(0, np.floor_divide(now - self._rows.start_s[rows], 60)
                             ).astype(np.int64)
        seeded = np.zeros(len(rows), dtype=bool)
        if self._yesterday_p:
            cids = self._slots.cid[slots]
            for i, (cid, d) in enumerate(zip(cids.tolist(), days.tolist(), strict=True)):
                prev = self._yesterday_p.get((cid, date.fromordinal(d)))
                if prev is not None:
                    seeded[i] = True
                    if prev:
                        m = int(elapsed[i])
                        p[i] = prev[min(prev, key=lambda k, m=m: abs(k - m))]
        yrows = self._find_rows(slots, days - 1)
        has = (yrows >= 0) & ~seeded
        t = self._rows
        if has.any():
            ix = np.flatnonzero(has)
            y = yrows[ix]
            stepped = t.p_first[y] >= 0
            hist = t.p_hist[y]
            const = stepped & (hist < 0)
            p[ix[const]] = t.p_const[y[const]]
            moved = np.flatnonzero(stepped & (hist >= 0))
            for a in range(0, len(moved), 4096):
                part = moved[a:a + 4096]
                h = self._history.data[hist[part]]
                dist = np.abs(np.arange(MAX_MINUTES)[None, :] - elapsed[ix[part]][:, None])
                dist = np.where(np.isnan(h), np.iinfo(np.int64).max, dist)
                best = dist.argmin(axis=1)
                p[ix[part]] = h[np.arange(len(part)), best]
        # a day over whose next day exists has given its p: its minutes are let go (one
        # day of minutes is kept per campaign whose p moved)
        y = yrows[yrows >= 0]
        done = y[(t.end_s[y] <= now) & (t.p_hist[y] >= 0)]
        if len(done):
            self._history.release(t.p_hist[done])
            t.p_hist[done] = -1
            t.p_const[done] = _NAN
            t.p_first[done] = -1
        return p

    def _p_by_minute(self, row: int) -> dict[int, float]:
        t = self._rows
        first = int(t.p_first[row])
        if first < 0:
            return {}
        h = int(t.p_hist[row])
        if h >= 0:
            v = self._history.data[h]
            return {int(m): float(v[m]) for m in np.flatnonzero(~np.isnan(v))}
        marks = self._step_minutes.get(int(t.dz[row]))
        minutes = [first] if marks is None else np.flatnonzero(marks[first:]) + first
        return {int(m): float(t.p_const[row]) for m in minutes}

    def _find_rows(self, slots: np.ndarray, days: np.ndarray) -> np.ndarray:
        """The row of each (slot, day ordinal) pair (-1: none): the slot's newest row
        when it is that day, else looked up (a campaign without rows costs nothing)."""
        t = self._rows
        out = np.full(len(slots), -1, dtype=np.int64)
        head = self._slots.head[slots]
        idx = np.flatnonzero(head >= 0)
        if not len(idx):
            return out
        hd = head[idx]
        match = t.day[hd] == days[idx]
        out[idx[match]] = hd[match]
        other = idx[~match]
        if len(other):
            keys = (self._slots.cid[slots[other]] << DAY_BITS) | days[other]
            out[other] = [self._row_of.get(k, -1) for k in keys.tolist()]
        return out

    def _current_row(self, slot: int, now: float) -> int:
        r = int(self._slots.cur[slot])
        t = self._rows
        if r >= 0 and t.start_s[r] <= now < t.end_s[r]:
            return r
        tz = self._tz_names[int(self._slots.tz[slot])]
        day = local_day(datetime.fromtimestamp(now, tz=UTC), tz)
        cid = int(self._slots.cid[slot])
        r = self._row(cid, day)
        self._slots.cur[slot] = r
        self._roll_lo = max(self._roll_lo, float(t.start_s[r]))
        self._next_roll = min(self._next_roll, float(t.end_s[r]))
        return r

    def current(self, campaign_id: int, now: float) -> CampaignDay | None:
        """The campaign's state on its local day at ``now`` (created on first use)."""
        slot = self._slot_of.get(campaign_id)
        if slot is None:
            return None
        return CampaignDay(self, self._current_row(slot, now))

    def snapshot(self, now: float) -> BudgetSnapshot:
        """Every owned campaign's state on its local day at ``now`` as columns, in one
        vectorised pass (the figures :meth:`CampaignDay.committed` and friends give one
        campaign at a time); days not yet made are made, as :meth:`current` does."""
        cur = self._roll_over(now)
        owned, t = self.owned(), self._rows
        billed = t.billed[cur]  # fancy indexing: copies, safe to hand out
        in_flight = np.maximum(0, t.bucket_sum[cur] + t.sl_used[cur] - t.settled_after[cur])
        return BudgetSnapshot(owned.ids.copy(), t.state[cur], t.p[cur],
                              self._slots.daily[owned.slots], billed,
                              billed + in_flight + self._live_slices(cur, now))

    def _live_slices(self, rows: np.ndarray, now: float) -> np.ndarray:
        """Per entry of ``rows``: the amount of its open, unexpired slices, micros (only
        the few rows with slices are visited)."""
        out = np.zeros(len(rows), dtype=np.int64)
        sparse = self._among(rows, self._slices)
        if not sparse:
            return out
        order = np.argsort(rows, kind="stable")
        keys = np.fromiter(sparse, dtype=np.int64, count=len(sparse))
        at = order[np.searchsorted(rows, keys, sorter=order)]
        out[at] = [sum(s.amount for s in self._slices[int(r)].values()
                       if s.used is None and s.expires_at > now) for r in keys]
        return out

    def _roll_over(self, now: float) -> np.ndarray:
        """Make every owned campaign's current row the one of its local day at ``now``
        (vectorised: new days are made in bulk); the current rows."""
        s, t = self._slots, self._rows
        slots = self.owned().slots
        if self._roll_lo <= now < self._next_roll:
            return s.cur[slots]
        cur = s.cur[slots]
        ok = cur >= 0
        ok[ok] = (t.start_s[cur[ok]] <= now) & (now < t.end_s[cur[ok]])
        need = slots[~ok]
        if len(need):
            days = self._local_days(s.tz[need], now)
            rows = self._find_rows(need, days)
            missing = rows < 0
            if missing.any():
                rows[missing] = self._new_rows(need[missing], days[missing], now)
            s.cur[need] = rows
        cur = s.cur[slots]
        self._next_roll = float(t.end_s[cur].min()) if len(cur) else math.inf
        self._roll_lo = float(t.start_s[cur].max()) if len(cur) else -math.inf
        return cur

    def _local_days(self, tz: np.ndarray, now: float) -> np.ndarray:
        at = datetime.fromtimestamp(now, tz=UTC)
        uniq, inv = np.unique(tz, return_inverse=True)
        days = np.array([local_day(at, self._tz_names[int(z)]).toordinal() for z in uniq],
                        dtype=np.int64)
        return days[inv]

    # -- cold start ---------------------------------------------------------------------
    def warm(self, now: float | None = None) -> bool:
        """True once every live server has synced with this instance (module docstring)."""
        if self._warm:
            return True
        now = self._now() if now is None else now
        if self.expected_servers is not None:
            ok = self.expected_servers <= self._synced
        else:
            live = {s for s, t in self._heard.items() if now - t <= SERVER_STALE_S}
            ok = now - self.started_at >= self.warmup_s and live <= self._synced
        self._warm = ok
        return ok

    def can_grant(self, cd: CampaignDay, now: float) -> bool:
        """Grants need the day's billed spend read and a warm instance."""
        return bool(self._rows.billed_read[cd.row]) and self.warm(now)

    def _refresh(self, rows: np.ndarray, now: float) -> None:
        """Budget state and pacing status of ``rows`` from their spend (vectorised), then
        publish what changed."""
        if not len(rows):
            return
        self._lapse(now)
        t, s = self._rows, self._slots
        sl = t.slot[rows]
        charge = s.charge[sl]
        daily, life = s.daily[sl], s.lifetime[sl]
        budget = np.where(life < 0, daily,
                          np.maximum(0, np.minimum(daily, life - t.lifetime_before[rows])))
        day = t.day[rows]
        flying = (s.fstart[sl] <= day) & (day <= s.fend[sl])
        stopped = ~s.active[sl] | ~flying | (budget <= 0)
        read = t.billed_read[rows]
        # warm() is asked only where a campaign-day has its billed spend read, as the
        # per-campaign rule ``read and warm()`` asks it (a fleet shard's warm-up is
        # decided at the first such question)
        warm = self.warm(now) if (read & ~stopped).any() else self._warm
        cold = ~(read & warm)
        in_fl = np.maximum(0, t.bucket_sum[rows] + t.sl_used[rows] - t.settled_after[rows])
        billed = t.billed[rows]
        committed = billed + in_fl + t.sl_open[rows]
        peak = np.maximum(t.peak_rate[rows], t.plan_peak_rate[rows])
        thr_rate = np.floor(OPEN_RESERVE_S * np.maximum(0.0, peak)).astype(np.int64)
        thr = np.where(t.rate_measured[rows],
                       np.maximum(thr_rate, OPEN_RESERVE_CHARGES * charge), budget)
        g = np.maximum(0, budget - billed - in_fl)
        st = np.where(budget - committed > thr, OPEN,
                      np.where(g < np.maximum(1, charge), EXHAUSTED, METERED)).astype(np.int8)
        normal = ~stopped & ~cold
        ex = t.exhausted_at[rows]
        ex = np.where(normal & (st == EXHAUSTED) & np.isnan(ex), now,
                      np.where(normal & (st != EXHAUSTED), _NAN, ex))
        t.exhausted_at[rows] = ex
        limited = (t.p[rows] >= 1.0) & (t.integral[rows] > 0.002)
        status = np.select([st == EXHAUSTED, st == METERED, limited],
                           [S_EXHAUSTED, S_BUDGET, S_BID], S_PACING)
        t.state[rows] = np.where(stopped, STOPPED, np.where(cold, METERED, st))
        t.status[rows] = np.where(stopped, S_STOPPED, np.where(cold, S_COLD, status))
        if (~stopped & cold & read).any():
            self._maybe_cold = True
        self._publish(rows)

    def _publish(self, rows: np.ndarray) -> None:
        """Directive values of ``rows``; the rows whose (state, p) changed get a new
        version and enter the change log."""
        t, s = self._rows, self._slots
        st = t.state[rows]
        p = np.where(st == STOPPED, 0.0, np.where(s.accel[t.slot[rows]], 1.0, t.p[rows]))
        changed = (st != t.pub_state[rows]) | (p != t.pub_p[rows])
        if not changed.any():
            return
        ch = rows[changed]
        self._version += 1
        t.pub_state[ch] = st[changed]
        t.pub_p[ch] = p[changed]
        t.ver[ch] = self._version
        self._log_vers.append(self._version)
        self._log_rows.append(ch.copy())

    def _refresh_cold(self, rows: np.ndarray, now: float) -> None:
        """Refresh those of the current ``rows`` still cold, as each reply once did for
        every cold campaign-day. Only those with their day's billed spend read can
        leave the cold state here (once the instance is warm); the others' refresh
        would give them again what they hold, so they are skipped."""
        if not self._maybe_cold:
            return
        self._maybe_cold = False
        t = self._rows
        self._refresh(rows[(t.status[rows] == S_COLD) & t.billed_read[rows]], now)

    # -- reports ------------------------------------------------------------------------
    def handle_report(self, report: Report) -> Reply:
        """Apply a server's report; return directives and any new slices.

        Entries already applied (duplicates) are skipped; a message identical to the last
        one from that server (same sequence numbers) gets the same reply, so a retry never
        doubles spend nor grants. Directives: see :class:`~adfunnel.budget.protocol.Reply`.
        Every report makes the new local days of every campaign and refreshes the
        current ones still cold, as a reply carrying every directive did.
        """
        now = self._now()
        self._heard[report.server_id] = now
        if report.epoch == self.epoch:
            self._synced.add(report.server_id)
        seqs = tuple(e.seq for e in report.entries)
        top = max(seqs, default=-1)
        cached = self._last_reply.get(report.server_id)
        if cached is not None and seqs and cached[0] == seqs:
            return cached[1]
        named = self._apply_entries(report, now)
        grants = self._grants(report.server_id, report.wants, now)
        current = self._roll_over(now)
        self._refresh_cold(current, now)
        max_seq = self._seen[report.server_id][0] if report.server_id in self._seen else -1
        directives = self._reply_directives(report, named, current, now)
        reply = Reply(shard=self.shard, at=now, acked_through=max(top, max_seq if top >= 0 else -1),
                      directives=directives, grants=grants, epoch=self.epoch,
                      version=self._version)
        if seqs:
            self._last_reply[report.server_id] = (seqs, reply)
        return reply

    def _apply_entries(self, report: Report, now: float) -> set[int]:
        """Apply the entries not seen yet (each entry's spend, then the state of the days
        it named, then its closed slices); the campaigns they name."""
        named: set[int] = set()
        max_seq, seen = self._seen.get(report.server_id, (-1, set()))
        for entry in report.entries:
            for sp in entry.spend:
                named.add(sp.campaign_id)
            if entry.seq in seen or entry.seq <= max_seq - SEQ_WINDOW:
                continue
            seen.add(entry.seq)
            if entry.seq > max_seq:
                max_seq = entry.seq
            rows = [self._apply_spend(report.server_id, sp, entry.period_end, entry.resent)
                    for sp in entry.spend]
            rows = [r for r in rows if r >= 0]
            if rows:
                self._refresh(np.unique(np.array(rows, dtype=np.int64)), now)
            for use in entry.closed_slices:
                self._close_slice(use)
        if len(seen) > 2 * SEQ_WINDOW:
            seen = {s for s in seen if s > max_seq - SEQ_WINDOW}
        self._seen[report.server_id] = (max_seq, seen)
        return named

    def _apply_spend(self, server_id: str, sp: CampaignSpend, t: float,
                     resent: bool = False) -> int:
        row = self._row(sp.campaign_id, date.fromisoformat(sp.day))
        if row < 0:
            self.unknown_campaign_reports += 1
            return -1
        rows = self._rows
        wm = float(rows.watermark[row])
        if sp.open_micros and not (wm and t < wm):
            self._buckets.setdefault(row, deque()).append((t, sp.open_micros))
            rows.bucket_sum[row] += sp.open_micros
        if resent:  # in flight, but not this period's spend rate
            return row
        spent = sp.open_micros + sp.sliced_micros
        rows.step_spend[row] += spent
        rows.step_charges[row] += sp.charges
        rows.served_total[row] += spent
        rates = self._rates.setdefault(row, {})
        r = rates.get(server_id, float(sp.demand_micros))
        rates[server_id] = 0.7 * r + 0.3 * sp.demand_micros
        return row

    def _close_slice(self, use: SliceUse) -> None:
        """A server closed a slice: its use replaces the amount (or the worst case
        assumed at its expiry). The day's state is refreshed at its next refresh."""
        row = self._slice_row.get(use.slice_id)
        if row is None:
            return
        s = self._slices[row][use.slice_id]
        if s.used is None or s.provisional:
            # a late close replaces the worst case assumed at expiry
            t = self._rows
            if s.used is None:
                if not s.lapsed:
                    t.sl_open[row] -= s.amount
            else:
                t.sl_used[row] -= s.used
            s.used = min(s.amount, use.used_micros)
            t.sl_used[row] += s.used
            s.closed_at = use.closed_at
            s.provisional = False

    def _reply_directives(self, report: Report, named: set[int], current: np.ndarray,
                          now: float) -> list[Directive]:
        """Everything on first contact, after an epoch change or an unknown version; else
        the current campaign-days changed since the server's version, plus those of the
        campaigns it wants or reports spend on."""
        known = report.directives_version
        full = (report.epoch != self.epoch or known < self._log_floor or known < 0
                or known > self._version)
        if full:
            self._ack(report.server_id, self._version, now)
            return self._directives_of(current)
        self._ack(report.server_id, known, now)
        extra = []
        for cid in itertools.chain(report.wants, named):
            slot = self._slot_of.get(cid)
            if slot is not None and self._slots.owned[slot]:
                extra.append(self._current_row(slot, now))
        i = bisect_right(self._log_vers, known)
        parts = self._log_rows[i:]
        if extra:
            parts = [*parts, np.array(extra, dtype=np.int64)]
        if not parts:
            return []
        rows = np.unique(np.concatenate(parts))
        t, s = self._rows, self._slots
        sl = t.slot[rows]
        keep = t.live[rows] & (s.cur[sl] == rows) & s.owned[sl]
        keep &= (t.ver[rows] > known) | np.isin(rows, np.array(extra, dtype=np.int64))
        rows = rows[keep]
        return self._directives_of(rows[np.argsort(sl[keep], kind="stable")])

    def _directives_of(self, rows: np.ndarray) -> list[Directive]:
        t, s = self._rows, self._slots
        cids = s.cid[t.slot[rows]].tolist()
        states = t.pub_state[rows].tolist()
        ps = t.pub_p[rows].tolist()
        days = [self._day_iso(d) for d in t.day[rows].tolist()]
        vals = STATE_VALUES
        return [Directive(c, vals[st], p, d)
                for c, st, p, d in zip(cids, states, ps, days, strict=True)]

    def _day_iso(self, ordinal: int) -> str:
        s = self._days_iso.get(ordinal)
        if s is None:
            s = self._days_iso[ordinal] = date.fromordinal(ordinal).isoformat()
        return s

    def _ack(self, server_id: str, version: int, now: float) -> None:
        """Note the version a server holds; drop change-log entries every recent server
        has (a server coming back later than that gets everything)."""
        self._acked[server_id] = (version, now)
        recent = [v for v, at in self._acked.values() if now - at <= ACK_KEPT_S]
        floor = min(recent) if recent else self._version
        i = bisect_right(self._log_vers, floor)
        if i:
            del self._log_vers[:i]
            del self._log_rows[:i]
            self._log_floor = max(self._log_floor, floor)
        for sid in [k for k, (_, at) in self._acked.items() if now - at > ACK_KEPT_S]:
            del self._acked[sid]

    def _grants(self, server_id: str, campaign_ids: Sequence[int],
                now: float) -> list[SliceGrant]:
        """A slice for each of ``campaign_ids`` that may have one now, in
        their order. Each campaign-day's grant reads and changes its own row only, so
        the rows are refreshed together, before and after, as one grant at a time
        would refresh each (what a report of thousands of wants costs follows them)."""
        rows, cids = [], []
        for cid in dict.fromkeys(campaign_ids):  # a campaign asked twice gets one slice
            slot = self._slot_of.get(cid)
            if slot is None or not self.owns(cid):
                continue
            row = self._current_row(slot, now)
            self._expire(row, now)
            rows.append(row)
            cids.append(cid)
        if not rows:
            return []
        ix = np.array(rows, dtype=np.int64)
        self._refresh(ix, now)
        t = self._rows
        ok = (t.state[ix] == METERED) & t.billed_read[ix]
        if not ok.any() or not self.warm(now):
            return []
        grants, granted = [], []
        for k in np.flatnonzero(ok).tolist():
            g = self._grant_row(server_id, cids[k], rows[k], now)
            if g is not None:
                grants.append(g)
                granted.append(rows[k])
        if granted:
            self._refresh(np.array(granted, dtype=np.int64), now)
        return grants

    def _grant_row(self, server_id: str, campaign_id: int, row: int,
                   now: float) -> SliceGrant | None:
        """A slice of metered, warm campaign-day ``row``, sized by :func:`slice_size`
        (None when that is 0); its outstanding amount counted at once."""
        t = self._rows
        charge = int(self._slots.charge[self._slot_of[campaign_id]])
        cd = CampaignDay(self, row)
        g = grantable(day_budget(cd), int(t.billed[row]), cd.in_flight())
        rate = self._rates.get(row, {}).get(server_id, 0.0)
        size = slice_size(rate, charge, g, int(t.sl_open[row]))
        if size <= 0:
            return None
        sid = f"{self.shard}-{next(self._slice_ids)}"
        self._slices.setdefault(row, {})[sid] = _Slice(server_id, size, now + SLICE_TTL_S)
        self._slice_row[sid] = row
        t.sl_open[row] += size
        heapq.heappush(self._expiry, (now + SLICE_TTL_S, sid))
        return SliceGrant(sid, campaign_id, cd.day.isoformat(), size, now + SLICE_TTL_S,
                          worst_case_regime(g, charge))

    def _lapse(self, now: float) -> None:
        """Open slices past their expiry leave the outstanding amount (``sl_open``)."""
        heap, t = self._expiry, self._rows
        while heap and heap[0][0] <= now:
            _, sid = heapq.heappop(heap)
            row = self._slice_row.get(sid)
            if row is None:
                continue
            s = self._slices[row][sid]
            if s.used is None and not s.lapsed:
                s.lapsed = True
                t.sl_open[row] -= s.amount

    def _expire(self, row: int, now: float) -> None:
        """Slices of ``row`` past their expiry without a close count as fully spent (a
        crashed server may have used them) until billing's watermark passes their
        expiry; used slices the watermark has passed are forgotten."""
        slices = self._slices.get(row)
        if not slices:
            return
        self._lapse(now)
        t = self._rows
        for s in slices.values():
            if s.used is None and s.expires_at <= now:
                if not s.lapsed:
                    s.lapsed = True
                    t.sl_open[row] -= s.amount
                s.used = s.amount
                s.closed_at = s.expires_at
                s.provisional = True
                t.sl_used[row] += s.amount
        w = float(t.watermark[row])
        if w:
            done = [k for k, s in slices.items() if s.used is not None and s.closed_at < w]
            for k in done:
                t.sl_used[row] -= slices.pop(k).used or 0
                del self._slice_row[k]
            if not slices:
                del self._slices[row]

    # -- billing ------------------------------------------------------------------------
    def record_billed(self, update: BilledUpdate) -> None:
        """Billed spend from the ledger: replaces the estimates served before its watermark.
        Idempotent (cumulative values, monotone watermark)."""
        row = self._row(update.campaign_id, date.fromisoformat(update.day))
        if row < 0:
            return
        t = self._rows
        t.billed_read[row] = True
        t.billed[row] = max(int(t.billed[row]), update.billed_micros)
        t.lifetime_before[row] = max(int(t.lifetime_before[row]),
                                     update.lifetime_billed_before_micros)
        wm = float(t.watermark[row])
        if update.complete_before >= wm:
            t.settled_after[row] = max(0, update.settled_after_micros)
        if update.complete_before > wm:
            t.watermark[row] = update.complete_before
            self._pop_buckets(row)
        now = self._now()
        self._expire(row, now)
        self._refresh(np.array([row]), now)

    def record_billed_bulk(self, cols: BilledColumns) -> int:
        """:meth:`record_billed` for many campaign-days at once (the billed feed at start
        and every few seconds), vectorised. A row whose values did not move, that holds
        no spend buckets or slices and is not cold keeps its state as it is (its refresh
        would give it again) and costs no Python work. Returns the rows applied."""
        now = self._now()
        owned = self._owned_cache
        if owned is not None and cols.campaign_ids is owned.ids:
            self._roll_over(now)  # today's rows in bulk, found through their slots
            rows = self._rows_of_slots(owned.slots, cols.days, now)
        else:
            rows = self._rows_for(cols.campaign_ids, cols.days, now)
        ok = rows >= 0
        rows = rows[ok]
        t = self._rows
        billed = np.maximum(t.billed[rows], cols.billed_micros[ok])
        life = np.maximum(t.lifetime_before[rows], cols.lifetime_billed_before_micros[ok])
        wm, cb = t.watermark[rows], cols.complete_before[ok]
        settled = np.where(cb >= wm, np.maximum(0, cols.settled_after_micros[ok]),
                           t.settled_after[rows])
        moved = ((billed != t.billed[rows]) | (life != t.lifetime_before[rows])
                 | (settled != t.settled_after[rows]) | ~t.billed_read[rows]
                 | (t.status[rows] == S_COLD))
        t.billed_read[rows] = True
        t.billed[rows] = billed
        t.lifetime_before[rows] = life
        t.settled_after[rows] = settled
        t.watermark[rows] = np.maximum(wm, cb)
        sparse = self._among(rows, itertools.chain(self._buckets, self._slices))
        for row in sparse:
            self._pop_buckets(row)
            self._expire(row, now)
        if sparse:
            moved |= np.isin(rows, np.fromiter(sparse, dtype=np.int64, count=len(sparse)))
        self._refresh(rows[moved], now)
        return len(rows)

    def _among(self, rows: np.ndarray, sparse: Iterable[int]) -> set[int]:
        """The rows of ``sparse`` (a few) that are in ``rows`` (many), without a set of
        ``rows``."""
        keys = list(sparse)
        if not keys:
            return set()
        mask = np.zeros(self._rows.n, dtype=bool)
        mask[rows] = True
        return {r for r in keys if mask[r]}

    def _pop_buckets(self, row: int) -> None:
        b = self._buckets.get(row)
        if not b:
            return
        w = float(self._rows.watermark[row])
        gone = 0
        while b and b[0][0] < w:
            gone += b.popleft()[1]
        self._rows.bucket_sum[row] -= gone
        if not b:
            del self._buckets[row]

    def _rows_of_slots(self, slots: np.ndarray, days: np.ndarray, now: float) -> np.ndarray:
        """Rows of (slot, day ordinal) pairs: the slot's current row when it is that
        day (no index lookup: the billed feed names today), else :meth:`_rows_for`."""
        cur = self._slots.cur[slots]
        rows = np.full(len(slots), -1, dtype=np.int64)
        has = cur >= 0
        has[has] = self._rows.day[cur[has]] == days[has]
        rows[has] = cur[has]
        rest = np.flatnonzero(~has)
        if len(rest):
            found = self._find_rows(slots[rest], days[rest])
            miss = found < 0
            if miss.any():
                found[miss] = self._new_rows(slots[rest][miss], days[rest][miss], now)
            rows[rest] = found
        return rows

    def _rows_for(self, campaign_ids: np.ndarray, days: np.ndarray, now: float) -> np.ndarray:
        """Rows of (campaign id, day ordinal) pairs, made in bulk where missing; -1 for
        unknown campaigns."""
        keys = (campaign_ids.astype(np.int64) << DAY_BITS) | days.astype(np.int64)
        get = self._row_of.get
        rows = np.array([get(k, -1) for k in keys.tolist()], dtype=np.int64)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            so = self._slot_of.get
            slots = np.array([so(c, -1) for c in campaign_ids[missing].tolist()], dtype=np.int64)
            known = slots >= 0
            if known.any():
                m = missing[known]
                rows[m] = self._new_rows(slots[known], days[m].astype(np.int64), now)
        return rows

    # -- control loop -------------------------------------------------------------------
    def step(self) -> None:
        """One control step for every campaign on its current local day (vectorised)."""
        now = self._now()
        self.steps += 1
        rows = self._roll_over(now)
        t = self._rows
        dt = now - t.last_step_s[rows]
        sel = dt > 0
        rows, dt = rows[sel], dt[sel]
        for row in self._among(rows, self._slices):
            self._expire(row, now)
        for a in range(0, len(rows), STEP_CHUNK):  # temporaries that stay in cache
            self._step_rows(rows[a:a + STEP_CHUNK], dt[a:a + STEP_CHUNK], now)
        if self.on_step is not None:
            for row in rows.tolist():
                self.on_step(CampaignDay(self, row), now)
        if self._first_end < now - FORGET_AFTER_S:
            self._forget_old_days(now)

    def _step_rows(self, rows: np.ndarray, dt: np.ndarray, now: float) -> None:
        t, s = self._rows, self._slots
        rate = t.step_spend[rows] / dt
        ewma = t.rate_ewma[rows]
        ewma = np.where(ewma == 0, rate, 0.5 * ewma + 0.5 * rate)
        t.rate_ewma[rows] = ewma
        t.peak_rate[rows] = np.maximum(t.peak_rate[rows], ewma)
        sl = t.slot[rows]
        even = (t.plan_budget[rows] > 0) & s.even[sl]
        if even.any():
            self._control(rows[even], dt[even], now)
        t.target_last[rows[~even]] = _NAN  # uncontrolled: no step's target to keep
        t.rate_measured[rows] |= t.step_charges[rows] > 0
        t.step_spend[rows] = 0
        t.step_charges[rows] = 0
        t.last_step_s[rows] = now
        self._record_p(rows, now)
        paced = s.even[sl] & (t.state[rows] != STOPPED)
        if paced.any():
            low = float(t.p[rows[paced]].min())
            self.p_min = low if self.p_min is None else min(self.p_min, low)
        self._refresh(rows, now)

    def _record_p(self, rows: np.ndarray, now: float) -> None:
        """Note p at this step's elapsed minute of each row's day (the last step of a
        minute wins), for the next day's first p."""
        t = self._rows
        minute = np.floor_divide(now - t.start_s[rows], 60).astype(np.int64)
        for key in np.unique(t.dz[rows] * MAX_MINUTES + minute).tolist():
            d, m = divmod(key, MAX_MINUTES)
            marks = self._step_minutes.get(d)
            if marks is None:
                marks = self._step_minutes[d] = np.zeros(MAX_MINUTES, dtype=bool)
            marks[m] = True
        p = t.p[rows]
        first = t.p_first[rows] < 0
        if first.any():
            t.p_first[rows[first]] = minute[first]
            t.p_const[rows[first]] = p[first]
        hist = t.p_hist[rows]
        moved = (hist < 0) & (p != t.p_const[rows])
        if moved.any():
            # p moved for the first time today: from now on its minutes are kept
            rr = rows[moved]
            idx = self._history.take(len(rr))
            t.p_hist[rr] = idx
            for r, h in zip(rr.tolist(), idx.tolist(), strict=True):
                marks = self._step_minutes[int(t.dz[r])]
                first_m = int(t.p_first[r])
                self._history.data[h, first_m:][marks[first_m:]] = t.p_const[r]
            hist = t.p_hist[rows]
        keep = hist >= 0
        if keep.any():
            self._history.data[hist[keep], minute[keep]] = p[keep]

    def _control(self, rows: np.ndarray, dt: np.ndarray, now: float) -> None:
        """The PI controller of evenly paced rows (``controller.step_arrays``)."""
        t, s = self._rows, self._slots
        start = t.start_s[rows]
        target0 = t.target_last[rows]  # the last step's target, while the plan holds
        unknown = np.isnan(target0)
        if unknown.any():
            r0 = rows[unknown]
            target0[unknown] = self._targets(r0, t.last_step_s[r0] - t.start_s[r0])
        target1 = self._targets(rows, now - start)
        t.target_last[rows] = target1
        target = target1 - target0
        in_fl = np.maximum(0, t.bucket_sum[rows] + t.sl_used[rows] - t.settled_after[rows])
        spent = t.billed[rows] + in_fl
        last = t.last_committed[rows]
        t.last_committed[rows] = spent
        budget = t.plan_budget[rows]
        charge = s.charge[t.slot[rows]]
        state = controller.ControllerArrays(t.p[rows], t.integral[rows], t.spend_avg[rows],
                                            t.target_avg[rows], t.charges_avg[rows])
        new = controller.step_arrays(
            state, t.step_spend[rows], target, dt, budget_micros=budget,
            charges=t.step_charges[rows], committed_delta_micros=(spent - last).astype(float),
            has_delta=last >= 0, behind_micros=target1 - spent,
            hold_band_micros=hold_bands(spent - t.anchor_spend[rows], charge, budget),
            charge_micros=charge, gains=self.gains)
        t.p[rows], t.integral[rows] = new.p, new.integral
        t.spend_avg[rows], t.target_avg[rows] = new.spend_avg, new.target_avg
        t.charges_avg[rows] = new.charges_avg

    def _forget_old_days(self, now: float) -> None:
        """Drop the rows of days that ended more than two days ago."""
        t, s = self._rows, self._slots
        n = t.n
        live = t.live[:n]
        old = np.flatnonzero(live & (t.end_s[:n] < now - FORGET_AFTER_S))
        if len(old):
            cids = s.cid[t.slot[old]]
            for k in ((cids << DAY_BITS) | t.day[old]).tolist():
                self._row_of.pop(k, None)
            for row in old.tolist():
                self._buckets.pop(row, None)
                self._rates.pop(row, None)
                for sid in self._slices.pop(row, {}):
                    self._slice_row.pop(sid, None)
            hist = t.p_hist[old]
            self._history.release(hist[hist >= 0])
            sl = t.slot[old]
            s.cur[sl] = np.where(s.cur[sl] == old, -1, s.cur[sl])
            t.live[old] = False
            t.free.extend(old.tolist())
            self._relink()
        alive = np.flatnonzero(t.live[:n])
        self._first_end = float(t.end_s[alive].min()) if len(alive) else math.inf
        used = set(t.dz[alive].tolist())
        for d in [d for d in self._step_minutes if d not in used]:
            del self._step_minutes[d]

    def _relink(self) -> None:
        """Rebuild each campaign's list of rows from the live rows."""
        t, s = self._rows, self._slots
        live = np.flatnonzero(t.live[: t.n])
        order = live[np.argsort(t.slot[live], kind="stable")]
        sl = t.slot[order]
        s.head[: s.n] = -1
        t.nxt[: t.n] = -1
        if len(order):
            same = np.append(sl[1:] == sl[:-1], False)
            t.nxt[order[:-1]] = np.where(same[:-1], order[1:], -1)
            first = np.append(True, sl[1:] != sl[:-1])
            s.head[sl[first]] = order[first]

    def census(self, now: float) -> dict[str, int]:
        """Campaign-days of this shard on their local day by budget state, and how many
        are paced (p < 1)."""
        rows = self._roll_over(now)
        counts = np.bincount(self._rows.state[rows], minlength=len(STATES))
        out = {STATE_VALUES[i]: int(counts[i]) for i in range(len(STATES))}
        out["paced"] = int((self._rows.p[rows] < 1.0).sum())
        return out

    def directives(self, now: float | None = None) -> list[Directive]:
        """Current state and p of every campaign of this shard on its local day."""
        now = self._now() if now is None else now
        rows = self._roll_over(now)
        self._refresh_cold(rows, now)
        return self._directives_of(rows)

    def _now(self) -> float:
        return self.clock.now().timestamp()
