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
columns (:mod:`adfunnel.budget.rows`), so a control step, the billed feed and a state refresh are
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

The service is one class over parts of one job each, mixed in and sharing the state
``__init__`` declares: :mod:`~adfunnel.budget.catalogue` (campaign records),
:mod:`~adfunnel.budget.plans` (shapes, curves, targets), :mod:`~adfunnel.budget.periods`
(flight and average-day budgets of each day), :mod:`~adfunnel.budget.day_rows`
(campaign-day rows and their view), :mod:`~adfunnel.budget.states` (state rules, warm-up),
:mod:`~adfunnel.budget.multipliers` (λ of automatic campaigns),
:mod:`~adfunnel.budget.lam_resume` (λ kept across a restart),
:mod:`~adfunnel.budget.reports` (the report protocol), :mod:`~adfunnel.budget.grants`
(slices), :mod:`~adfunnel.budget.billed_spend` (the billed feed) and
:mod:`~adfunnel.budget.control` (the control loop).
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from datetime import date

import numpy as np

from adfunnel.budget.billed_spend import BilledSpend
from adfunnel.budget.catalogue import Catalogue
from adfunnel.budget.columns import OwnedCampaigns
from adfunnel.budget.control import Control
from adfunnel.budget.day_rows import DAY_BITS, CampaignDay, DayRows
from adfunnel.budget.grants import Grants
from adfunnel.budget.lam_resume import ResumeMultipliers
from adfunnel.budget.multipliers import LamHistory, Multipliers
from adfunnel.budget.periods import Periods, PeriodSlot
from adfunnel.budget.plans import Plans
from adfunnel.budget.protocol import Directive, Reply
from adfunnel.budget.reports import Reports
from adfunnel.budget.rows import (
    ROW_COLUMNS,
    SLOT_COLUMNS,
    STATE_VALUES,
    STATES,
    Columns,
    History,
    Slice,
)
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.budget.states import WARMUP_S, States
from adfunnel.campaigns.model import Campaign, Daypart
from adfunnel.clock import Clock
from adfunnel.pacing import controller
from adfunnel.pacing.curve import TargetCurve
from adfunnel.pacing.curve_bank import CurveBank


class BudgetService(Catalogue, Plans, Periods, DayRows, States, Reports, Grants, BilledSpend,
                    Control, Multipliers, ResumeMultipliers):
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
        self._slots = Columns(SLOT_COLUMNS)
        self._rows = Columns(ROW_COLUMNS)
        self._row_of: dict[int, int] = {}  # campaign id << DAY_BITS | day ordinal -> row
        self._pending_shapes: dict[int, int] = {}  # shapes of campaigns not yet known
        self._dayparts: dict[int, tuple[Daypart, ...]] = {}  # slot -> dayparts (if any)
        # (shape id, dayparts, weekday) -> id of that shape restricted to the dayparts
        self._dp_shapes: dict[tuple[int, tuple[Daypart, ...], int], int] = {}
        #: slots of campaigns with a budget period, dayparts or frontloading
        self._period: dict[int, PeriodSlot] = {}
        self._owned_cache: OwnedCampaigns | None = None
        self._yesterday_p: dict[tuple[int, date], dict[int, float]] = {}
        self._history = History()
        self._lam_history = LamHistory()  # λ by quarter hour of automatic campaign-days
        # campaign-day key -> λ state read back at a restart, until its row is made
        # (adfunnel.budget.lam_resume)
        self._kept: dict[int, tuple] = {}
        self._step_minutes: dict[int, np.ndarray] = {}  # day-zone -> minutes with a step
        # sparse per-row state: only rows that have any
        self._buckets: dict[int, deque[tuple[float, int]]] = {}
        self._slices: dict[int, dict[str, Slice]] = {}
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

    def campaign_day(self, campaign_id: int, day: date) -> CampaignDay | None:
        row = self._row_of.get(campaign_id << DAY_BITS | day.toordinal())
        return None if row is None else CampaignDay(self, row)

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
                              billed + in_flight + self._live_slices(cur, now),
                              self._lam_published(cur)[0])

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
