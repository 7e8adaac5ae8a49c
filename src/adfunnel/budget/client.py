"""The ad server's budget client: the fleet implementation of ``SpendGate``.

DESIGN.md §Money and budgets. The client holds, per campaign, the last budget state
and p from the service, the slices it leases, and the expected spend recorded since
its last report. Once a second ``report(now)`` sends to each shard every entry not
yet acknowledged (so a lost reply is repaired by the next send; the service dedupes
by sequence number).

- open campaign: admitted freely;
- metered campaign: admitted only when a held slice has room for the worst-case
  charge; the serve then takes its expected cost from the slice (its worst-case charge
  when the grant says so: the last few charges of a budget);
- exhausted: only from slices still held; stopped: never;
- no reply from a shard for ``fail_closed_after_s`` (60 s): every campaign of that
  shard is treated as metered, so it spends only from slices held, which expire
  within 30 s (fail closed, with a bound).

Budget state is kept per campaign and local day: a campaign-day the service has not
yet spoken about is metered (ask for a slice), so yesterday's "exhausted" never stops
today. A reply from a new service instance (``Reply.epoch``: a restart or a standby
taking over) makes the client drop the slices of the old instance and re-send, marked
``resent``, the spend the old instance had acknowledged within ``resend_window_s`` (the
billing window: until then that spend may still bill), so the new instance counts it in
flight before it grants anything.

The transport is swappable (:class:`~adfunnel.budget.client_reports.ReportTransport`):
in memory with delays in the day simulation, HTTP between processes
(``adfunnel.budget.http``). Thread-safe.

The client is one class over parts of one job each, mixed in and sharing the state
``__init__`` declares: this module keeps the ``SpendGate`` side (admit, fits, refusals,
p and λ, recording serves) and the state rules; :mod:`~adfunnel.budget.client_slices`
(held slices and demand: room, release, expiry, wants), :mod:`~adfunnel.budget.client_reports`
(reports and replies: pending entries, directives, epochs, re-sends) and
:mod:`~adfunnel.budget.client_bulk` (the ``BulkGate`` view).
"""

from __future__ import annotations

import itertools
import math
import threading
from datetime import date, datetime, timedelta

from adfunnel.budget.bulk_view import UNKNOWN_LAMBDA, BulkView
from adfunnel.budget.client_bulk import ClientBulk
from adfunnel.budget.client_reports import RESEND_WINDOW_S, ClientReports, ReportTransport
from adfunnel.budget.client_slices import ClientSlices
from adfunnel.budget.demand import DemandBook
from adfunnel.budget.gate import BUDGET_EXHAUSTED, NO_SLICE, Served, budget_lowered
from adfunnel.budget.held import Acc, HeldSlice
from adfunnel.budget.multipliers import lam_restarts
from adfunnel.budget.protocol import ReportEntry, SliceUse
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import Clock

#: Seconds without a reply after which every campaign of a shard is treated as metered.
FAIL_CLOSED_AFTER_S = 60.0


class BudgetClient(ClientReports, ClientSlices, ClientBulk):
    """Budget client of one ad server (implements ``adfunnel.budget.gate.SpendGate``).

    Args:
        server_id: unique per ad-server process (a restarted process takes a new id).
        clock: injected domain clock.
        transport: carries reports to the service.
        shards: number of budget shards (routing is ``campaign_id % shards``).
        fail_closed_after_s: see module docstring.
    """

    def __init__(self, server_id: str, clock: Clock, transport: ReportTransport, *,
                 shards: int = 1, fail_closed_after_s: float = FAIL_CLOSED_AFTER_S,
                 resend_window_s: float = RESEND_WINDOW_S) -> None:
        self.server_id = server_id
        self.clock = clock
        self.transport = transport
        self.shards = shards
        self.fail_closed_after_s = fail_closed_after_s
        self.resend_window_s = resend_window_s
        self._lock = threading.Lock()
        self._state: dict[tuple[int, date], BudgetState] = {}
        self._p: dict[int, float] = {}
        self._lam: dict[int, float] = {}  # λ of automatic campaigns (absent: 1)
        self._epoch = [""] * shards
        # acknowledged spend by (campaign, day, bucket end): re-sent to a new instance
        self._history: list[dict[tuple[int, str, float], int]] = [{} for _ in range(shards)]
        self._last_reply: list[float] = [clock.now().timestamp()] * shards
        self._seq = [0] * shards
        self._pending: list[list[ReportEntry]] = [[] for _ in range(shards)]
        self._acc: dict[tuple[int, date], Acc] = {}
        self._slices: dict[int, list[HeldSlice]] = {}
        self._closed: list[list[SliceUse]] = [[] for _ in range(shards)]
        self._wants: set[int] = set()
        #: campaign id -> version of a budget cut applied here: directives and slices
        #: the service sent under an earlier version are not taken (campaign_changed)
        self._cut_version: dict[int, int] = {}
        #: campaign id -> version of new bid strategy terms applied here: λ the service
        #: sent under an earlier version is not taken (campaign_changed)
        self._terms_version: dict[int, int] = {}
        # cid -> (time of last metered demand, charge, local day); an entry older than
        # DEMAND_MEMORY_S at the last report is gone (``_live_demand``)
        self._demand = DemandBook()
        self._reported_at = -math.inf
        # campaigns of _demand that may want a slice: every other one has a state, or a
        # slice with room, that nothing has changed since a report found it so; a report
        # looks at these only (else each ask would cost every campaign ever demanded)
        self._asking: set[int] = set()
        # held slices by expiry (a report closes the expired ones without a scan)
        self._expiry: list[tuple[float, int, HeldSlice]] = []
        self._expiry_seq = itertools.count()
        self.stats = {"sent": 0, "replies": 0, "refused_no_slice": 0, "unsliced_serves": 0,
                      "resyncs": 0, "directives_before_cut": 0, "slices_before_cut": 0}
        #: (campaign, local day) -> admits refused for budget (exhausted or no slice)
        self.refusals: dict[tuple[int, date], int] = {}
        self._pruned_at = clock.now().timestamp()
        # the bulk view (BulkGate): per campaign id, the local day (ordinal) whose state
        # is open, and p; written with every directive applied
        # and per campaign id its held slice with the most room on its latest day
        self._bulk = BulkView()
        self.generation = 0

    # -- SpendGate ------------------------------------------------------------------------
    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int, *,
              count_refusal: bool = True) -> str | None:
        """None when ``campaign`` may take part now; else ``budget_exhausted`` or ``no_slice``
        (counted in ``refusals`` unless ``count_refusal`` is False: the caller retries)."""
        cid = campaign.id
        t = now.timestamp()
        day = local_day(now, campaign.time_zone)
        with self._lock:
            state = self._effective_state(cid, day, t)
            if state is BudgetState.OPEN:
                return None
            if state is BudgetState.STOPPED:
                return self._refuse(cid, day, BUDGET_EXHAUSTED, count_refusal)
            self._demand.set(cid, t, max_charge_micros, day)
            self._asking.add(cid)
            s = self._slice_with_room(cid, day, t, max_charge_micros)
            if s is not None:
                return None
            if state is BudgetState.METERED:
                self._wants.add(cid)
                self.stats["refused_no_slice"] += 1
                self._acc.setdefault((cid, day), Acc()).demand += max_charge_micros
                return self._refuse(cid, day, NO_SLICE, count_refusal)
            return self._refuse(cid, day, BUDGET_EXHAUSTED, count_refusal)

    def fits(self, campaign: Campaign, now: datetime, charge_micros: int) -> bool:
        """:func:`~adfunnel.budget.gate.fits`: :meth:`admit`'s answer for a serve about to
        be committed, without its side effects (no demand, no slice wanted, no refusal
        counted): open, or not stopped with a held slice of the day with room."""
        day, t = local_day(now, campaign.time_zone), now.timestamp()
        with self._lock:
            state = self._effective_state(campaign.id, day, t)
            return state is BudgetState.OPEN or (
                state is not BudgetState.STOPPED
                and self._slice_with_room(campaign.id, day, t, charge_micros) is not None)

    def _refuse(self, cid: int, day: date, reason: str, count: bool) -> str:
        if count:
            key = (cid, day)
            self.refusals[key] = self.refusals.get(key, 0) + 1
        return reason

    def note_refusal(self, campaign_id: int, day: date) -> None:
        """Count one admit of ``campaign_id`` on local ``day`` refused for budget."""
        with self._lock:
            key = (campaign_id, day)
            self.refusals[key] = self.refusals.get(key, 0) + 1

    def refusals_on(self, campaign_id: int, day: date) -> int:
        """Admits of ``campaign_id`` on its local ``day`` this client refused for budget."""
        with self._lock:
            return self.refusals.get((campaign_id, day), 0)

    def pacing_rate(self, campaign_id: int) -> float:
        """p from the service's last reply (1.0 before the first)."""
        with self._lock:
            return self._p.get(campaign_id, 1.0)

    def bid_multiplier(self, campaign_id: int) -> float:
        """λ from the service's last reply (``UNKNOWN_LAMBDA``, the lowest bids, before
        the first): an automatic campaign bids pCTR × v ÷ λ."""
        with self._lock:
            return self._lam.get(campaign_id, UNKNOWN_LAMBDA)


    def state(self, campaign_id: int, day: date, now: float | None = None) -> BudgetState:
        """The state the client acts on now for the campaign's local ``day``
        (after fail-closed)."""
        t = self.clock.now().timestamp() if now is None else now
        with self._lock:
            return self._effective_state(campaign_id, day, t)

    def record_served(self, served: Served) -> None:
        """Record a serve's expected cost; metered campaigns take it from a slice (the
        worst-case ``served.max_charge_micros`` from a ``worst_case`` slice)."""
        cid = served.campaign_id
        worst = getattr(served, "max_charge_micros", 0) or served.expected_micros
        with self._lock:
            acc = self._acc.setdefault((cid, served.day), Acc())
            acc.charges += 1
            acc.demand += worst
            t = self.clock.now().timestamp()
            if self._effective_state(cid, served.day, t) is BudgetState.OPEN:
                acc.open += served.expected_micros
                return
            s = self._slice_with_room(cid, served.day, t, worst)
            if s is None:
                # admitted before a state change: count it as open spend (the service
                # counts it as in-flight cost), never lose it
                self.stats["unsliced_serves"] += 1
                acc.open += served.expected_micros
                return
            s.used += worst if s.worst_case else served.expected_micros
            s.last_used = t
            self._index_slices(cid)
            self._note_slices_changed(cid)
            acc.sliced += served.expected_micros
            demand = self._live_demand(cid)
            need = max(worst, demand[1]) if demand is not None else worst
            if s.amount - s.used < need:
                # no room for another admit (which asks room for the campaign's largest
                # charge, its bid — a GSP price may be lower): release it now, so what it
                # did not use returns to the budget at once rather than when it expires
                self._release(s)
                self._wants.add(cid)

    def campaign_changed(self, old: Campaign | None, new: Campaign) -> None:
        """The ad server applied a campaign record (``old``: the one it held). After a
        budget cut (:func:`~adfunnel.budget.gate.budget_lowered`) the open state and the
        slices the service gave under the old budget no longer hold: an open campaign
        would spend freely, and a slice past the new budget, until the next reply (about
        a second; the service refuses nothing it cannot see). So its open states around
        today are dropped (it is metered: it asks), its held slices released (their use
        goes with the next report) and its directive asked for, until a reply under the
        new budget says again. The service may not have read the cut yet when it answers
        (it polls the change log): its directives and slices name the campaign version
        they were made under, and those from before the cut are not taken (asked for
        again) until one of the cut's version or later comes.

        New bid strategy terms (:func:`~adfunnel.budget.multipliers.lam_restarts`: a new
        strategy, cap or target, or a manual campaign gone automatic) make λ of the old
        terms meaningless: a raised cap at the old λ bids the whole raise until the next
        reply. So λ is ``UNKNOWN_LAMBDA`` (the lowest bids) and asked for until a
        directive of the new terms' version or later comes."""
        restarts, lowered = lam_restarts(old, new), budget_lowered(old, new)
        if restarts:
            with self._lock:
                cid = new.id
                self._terms_version[cid] = max(self._terms_version.get(cid, 0), new.version)
                self._lam[cid] = UNKNOWN_LAMBDA
                self._bulk.set(cid, "lam", UNKNOWN_LAMBDA)
                self._wants.add(cid)
                self.generation += 1
        if not lowered:
            return
        cid = new.id
        today = local_day(self.clock.now(), new.time_zone)
        with self._lock:
            self._cut_version[cid] = max(self._cut_version.get(cid, 0), new.version)
            for day in (today - timedelta(days=1), today, today + timedelta(days=1)):
                if self._state.get((cid, day)) is BudgetState.OPEN:
                    del self._state[(cid, day)]
            self._bulk.set(cid, "open_day", -1)
            for s in list(self._slices.get(cid, ())):
                self._release(s)
            self._wants.add(cid)
            if cid in self._demand:
                self._asking.add(cid)
            self.generation += 1

    def record_billed(self, campaign_id: int, day: date, billed_micros: int, impression_id: str,
                      settles: bool) -> None:
        """No-op: in the fleet, billed spend reaches the service from the ledger."""

    # -- internals ------------------------------------------------------------------------
    def _effective_state(self, cid: int, day: date, t: float) -> BudgetState:
        state = self._state.get((cid, day))
        if state is None:
            return BudgetState.METERED  # this campaign-day unknown to us yet: ask for a slice
        if state is BudgetState.OPEN and t - self._last_reply[cid % self.shards] > (
                self.fail_closed_after_s):
            return BudgetState.METERED
        return state
