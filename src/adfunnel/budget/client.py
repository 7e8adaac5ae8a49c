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

The transport is swappable (:class:`ReportTransport`): in memory with delays in the
day simulation, HTTP between processes (``adfunnel.budget.http``). Thread-safe.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Protocol

import numpy as np

from adfunnel.budget.bulk_view import UNKNOWN_LAMBDA, BulkView, bulk_answers
from adfunnel.budget.demand import Demand, DemandBook
from adfunnel.budget.gate import BUDGET_EXHAUSTED, DENSE_IDS, NO_SLICE, Served
from adfunnel.budget.held import Acc, HeldSlice
from adfunnel.budget.protocol import (
    CampaignSpend,
    Directive,
    Reply,
    Report,
    ReportEntry,
    SliceUse,
)
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.clock import Clock

#: Seconds without a reply after which every campaign of a shard is treated as metered.
FAIL_CLOSED_AFTER_S = 60.0
#: Seconds a metered campaign's last demand keeps a slice requested (low-rate campaigns
#: would otherwise see every slice expire before their next request).
DEMAND_MEMORY_S = 600.0
#: Most unacknowledged entries kept per shard (older ones are merged into the newest).
MAX_PENDING_ENTRIES = 300
#: Seconds of acknowledged spend kept to re-send to a new service instance: the token's
#: life, after which no impression or click of a serve can bill.
RESEND_WINDOW_S = 3600.0
#: Resolution of the kept spend, seconds.
HISTORY_BUCKET_S = 60.0
#: Directives applied per hold of the client's lock (a long reply is applied in chunks).
REPLY_CHUNK = 2048
#: Seconds between prunes of campaign-days long over; days of refusal counts kept.
PRUNE_EVERY_S = 3600.0
REFUSALS_KEPT_DAYS = 8


class ReportTransport(Protocol):
    """Carries a report to the shard it names and the reply back.

    ``send_report`` must not raise: on failure it simply never calls ``on_reply``
    (the entries stay pending and go again with the next report). It may call
    ``on_reply`` before returning (HTTP) or later (simulated delays).
    """

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None: ...


class BudgetClient:
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
                      "resyncs": 0}
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

    def bulk_admit(self, campaign_ids: np.ndarray, day_ordinals: np.ndarray,
                   charges: np.ndarray, budgets: np.ndarray, t: float) -> np.ndarray:
        """:class:`~adfunnel.budget.gate.BulkGate`: ADMIT where :meth:`admit` would answer
        None — the campaign's state on its local day is open and its shard has replied
        recently, or it is not stopped and holds a slice of that day with room for the
        charge (recording its demand, as ``admit`` does); ASK everywhere else."""
        cids = campaign_ids.astype(np.int64, copy=False)
        with self._lock:
            stale = np.array([t - last > self.fail_closed_after_s for last in self._last_reply])
            view = self._bulk.values
            # not added to _asking: each admitted by its slice holds one with room for this
            # charge, and what could take that away (expiry, use, release, a directive)
            # adds it
            dem_t, dem_charge, dem_day = self._demand.arrays(len(view))
            return bulk_answers(view, cids, day_ordinals.astype(np.int32, copy=False),
                                charges.astype(np.int64, copy=False), float(t), stale,
                                dem_t, dem_charge, dem_day)

    def _index_slices(self, cid: int) -> None:
        """Keep the bulk view's best slice of ``cid`` in step (under the lock): the one
        with the most room on the latest day it holds slices for."""
        best = max(self._slices.get(cid, ()), key=lambda s: (s.day, s.amount - s.used),
                   default=None)
        if best is None:
            self._bulk.set(cid, "slice_day", -1)
            return
        self._bulk.set(cid, "slice_room", best.amount - best.used)
        self._bulk.set(cid, "slice_exp", best.expires_at)
        self._bulk.set(cid, "slice_day", best.day.toordinal())

    def bulk_pacing(self, campaign_ids: np.ndarray) -> np.ndarray:
        """p of each campaign (float64[n]), as :meth:`pacing_rate` answers."""
        return self._bulk_read(self._bulk.pacing, self._p, campaign_ids)

    def bulk_multiplier(self, campaign_ids: np.ndarray) -> np.ndarray:
        """λ of each campaign (float64[n]), as :meth:`bid_multiplier` answers."""
        return self._bulk_read(self._bulk.multipliers, self._lam, campaign_ids, UNKNOWN_LAMBDA)

    def _bulk_read(self, read: Callable[[np.ndarray], np.ndarray], held: dict[int, float],
                   campaign_ids: np.ndarray, unknown: float = 1.0) -> np.ndarray:
        """The bulk view's values (ids < ``DENSE_IDS``), else ``held``'s (or ``unknown``)."""
        out = read(campaign_ids)
        big = campaign_ids >= DENSE_IDS
        if big.any():
            with self._lock:
                out[big] = [held.get(int(c), unknown) for c in campaign_ids[big]]
        return out

    def _note_directive(self, campaign_id: int, day: date | None, state: BudgetState,
                        p: float, lam: float = 1.0) -> None:
        """Keep the bulk view in step with one directive (called under the lock)."""
        bulk = self._bulk
        bulk.set(campaign_id, "p", p)
        bulk.set(campaign_id, "lam", lam)
        if day is None:
            return
        ordinal = day.toordinal()
        if state is BudgetState.STOPPED:
            bulk.set(campaign_id, "stopped_day", ordinal)
        elif bulk.get_one(campaign_id, "stopped_day") == ordinal:
            bulk.set(campaign_id, "stopped_day", -1)
        held = bulk.get_one(campaign_id, "open_day")
        if state is BudgetState.OPEN:
            if ordinal >= held:
                bulk.set(campaign_id, "open_day", ordinal)
        elif held == ordinal:
            bulk.set(campaign_id, "open_day", -1)

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

    def record_billed(self, campaign_id: int, day: date, billed_micros: int, impression_id: str,
                      settles: bool) -> None:
        """No-op: in the fleet, billed spend reaches the service from the ledger."""

    # -- reporting ------------------------------------------------------------------------
    def report(self, now: float | None = None) -> None:
        """Close this second's entries and send each shard its pending report."""
        t = self.clock.now().timestamp() if now is None else now
        reports = self.build_reports(t)
        for r in reports:
            self.stats["sent"] += 1
            self.transport.send_report(r, self.handle_reply)

    def build_reports(self, now: float) -> list[Report]:
        """One report per shard: pending entries plus a new one for the spend since the
        last call; campaigns wanting a slice."""
        with self._lock:
            self._expire_slices(now)
            per_shard: list[list[CampaignSpend]] = [[] for _ in range(self.shards)]
            for (cid, day), a in self._acc.items():
                per_shard[cid % self.shards].append(CampaignSpend(
                    cid, day.isoformat(), a.open, a.sliced, a.demand, a.charges))
            self._acc.clear()
            self._collect_wants(now)
            wants: list[list[int]] = [[] for _ in range(self.shards)]
            for cid in self._wants:
                wants[cid % self.shards].append(cid)
            self._wants.clear()
            out = []
            for sh in range(self.shards):
                pend = self._pending[sh]
                if per_shard[sh] or self._closed[sh]:
                    self._seq[sh] += 1
                    pend.append(ReportEntry(self._seq[sh], now, per_shard[sh], self._closed[sh]))
                    self._closed[sh] = []
                if len(pend) > MAX_PENDING_ENTRIES:
                    pend[:] = [_merge(pend[: len(pend) - MAX_PENDING_ENTRIES + 1]),
                               *pend[len(pend) - MAX_PENDING_ENTRIES + 1:]]
                out.append(Report(self.server_id, sh, now, list(pend), wants[sh],
                                  epoch=self._epoch[sh],
                                  directives_version=self._directive_versions()[sh]))
            self._trim_history_when_due(now)
            return out

    def handle_reply(self, reply: Reply) -> None:
        """Apply a reply: drop acknowledged entries, take states, p and slices.

        Directives are changes (``adfunnel.budget.protocol``): the reply's version is
        sent back with the next report. A reply older than one already applied (same
        epoch) only fills in campaign-days this server knows nothing of. A long list
        (a first reply, a control step's p) is applied ``REPLY_CHUNK`` directives per
        hold of the lock, so admits on the request path wait for one chunk at most."""
        with self._lock:
            self.stats["replies"] += 1
            sh = reply.shard
            versions = self._directive_versions()
            if reply.at >= self._last_reply[sh]:
                self._last_reply[sh] = reply.at
            if reply.epoch and reply.epoch != self._epoch[sh]:
                self._resync(sh, reply.epoch)
                versions[sh] = -1
            stale = 0 <= reply.version < versions[sh]
            kept = []
            for e in self._pending[sh]:
                if e.seq > reply.acked_through:
                    kept.append(e)
                elif not e.resent:
                    self._remember(sh, e)
            self._pending[sh] = kept
        directives = reply.directives
        for a in range(0, len(directives), REPLY_CHUNK):
            with self._lock:
                self._apply_directives(directives[a:a + REPLY_CHUNK], stale)
                self.generation += 1
        with self._lock:
            if reply.version > versions[sh]:
                versions[sh] = reply.version
            self.generation += 1
            for g in reply.grants:
                held = HeldSlice(g.slice_id, g.campaign_id, date.fromisoformat(g.day),
                                 g.amount_micros, g.expires_at, worst_case=g.worst_case)
                self._slices.setdefault(g.campaign_id, []).append(held)
                heapq.heappush(self._expiry, (held.expires_at, next(self._expiry_seq), held))
                self._index_slices(g.campaign_id)

    def _apply_directives(self, directives: list[Directive], stale: bool) -> None:
        """Take the states and p of ``directives`` (under the lock); from a stale reply
        only those of campaign-days not known here."""
        for d in directives:
            day = self._day_of(d.day)
            if stale and (day is None or (d.campaign_id, day) in self._state):
                continue  # a newer reply already said (or changed) it
            state = BudgetState(d.state)
            if day is not None:
                self._state[(d.campaign_id, day)] = state
                if d.campaign_id in self._demand:
                    self._asking.add(d.campaign_id)
            self._p[d.campaign_id] = d.p
            self._lam[d.campaign_id] = d.lam
            self._note_directive(d.campaign_id, day, state, d.p, d.lam)

    def _day_of(self, iso: str) -> date | None:
        """``date.fromisoformat`` with a small cache (a reply names few distinct days)."""
        if not iso:
            return None
        days: dict[str, date] | None = getattr(self, "_days_seen", None)
        if days is None or len(days) > 64:
            days = self._days_seen = {}
        day = days.get(iso)
        if day is None:
            day = days[iso] = date.fromisoformat(iso)
        return day

    def _directive_versions(self) -> list[int]:
        """Per shard, the highest ``Reply.version`` applied in the current epoch (-1:
        none yet: the next reply carries every directive). Called under the lock."""
        versions: list[int] | None = getattr(self, "_dir_versions", None)
        if versions is None:
            versions = self._dir_versions = [-1] * self.shards
        return versions

    def _trim_history_when_due(self, now: float) -> None:
        """:meth:`_trim_history` at most once per history bucket (it walks every kept
        bucket), not on every report. Called under the lock."""
        due: float = getattr(self, "_history_trimmed_at", -math.inf)
        if now - due >= HISTORY_BUCKET_S or now < due:
            self._history_trimmed_at = now
            self._trim_history(now)

    def held_slices(self) -> list[HeldSlice]:
        with self._lock:
            return [s for lst in self._slices.values() for s in lst]

    # -- internals ------------------------------------------------------------------------
    def _effective_state(self, cid: int, day: date, t: float) -> BudgetState:
        state = self._state.get((cid, day))
        if state is None:
            return BudgetState.METERED  # this campaign-day unknown to us yet: ask for a slice
        if state is BudgetState.OPEN and t - self._last_reply[cid % self.shards] > (
                self.fail_closed_after_s):
            return BudgetState.METERED
        return state

    def _slice_with_room(self, cid: int, day: date, t: float, charge: int) -> HeldSlice | None:
        for s in self._slices.get(cid, ()):
            if s.day == day and s.expires_at > t and s.amount - s.used >= charge:
                return s
        return None

    def _remember(self, sh: int, e: ReportEntry) -> None:
        """Keep an acknowledged entry's spend for a possible re-send."""
        bucket = math.ceil(e.period_end / HISTORY_BUCKET_S) * HISTORY_BUCKET_S
        hist = self._history[sh]
        for sp in e.spend:
            spent = sp.open_micros + sp.sliced_micros
            if spent:
                key = (sp.campaign_id, sp.day, bucket)
                hist[key] = hist.get(key, 0) + spent

    def _trim_history(self, now: float) -> None:
        for hist in self._history:
            for key in [k for k in hist if k[2] < now - self.resend_window_s]:
                del hist[key]
        if now - self._pruned_at >= PRUNE_EVERY_S:
            # campaign-days long over: their state can no longer be asked for
            self._pruned_at = now
            self._forget_old_demand()
            state_cut = datetime.fromtimestamp(now - 2 * 86_400, tz=UTC).date()
            for key in [k for k in self._state if k[1] < state_cut]:
                del self._state[key]
            refusal_cut = datetime.fromtimestamp(now - REFUSALS_KEPT_DAYS * 86_400, tz=UTC).date()
            for key in [k for k in self.refusals if k[1] < refusal_cut]:
                del self.refusals[key]

    def _resync(self, sh: int, epoch: str) -> None:
        """A new service instance: forget the old one's slices, re-send what it had
        acknowledged (as in-flight spend, by the time it was served)."""
        if self._epoch[sh]:
            self.stats["resyncs"] += 1
            for cid in [c for c in self._slices if c % self.shards == sh]:
                del self._slices[cid]
                self._index_slices(cid)
                self._note_slices_changed(cid)
            self._closed[sh] = []
            by_time: dict[float, list[CampaignSpend]] = {}
            for (cid, day, bucket), spent in sorted(self._history[sh].items()):
                by_time.setdefault(bucket, []).append(CampaignSpend(cid, day, open_micros=spent))
            for bucket, spend in sorted(by_time.items()):
                self._seq[sh] += 1
                self._pending[sh].append(ReportEntry(self._seq[sh], bucket, spend, resent=True))
            self._history[sh] = {}
        self._epoch[sh] = epoch

    def _release(self, s: HeldSlice) -> None:
        """Close held slice ``s`` (its use goes with the next report); nothing when it is
        no longer held."""
        lst = self._slices.get(s.campaign_id)
        if lst is None or not any(x is s for x in lst):
            return
        lst[:] = [x for x in lst if x is not s]
        if not lst:
            del self._slices[s.campaign_id]
        self._closed[s.campaign_id % self.shards].append(
            SliceUse(s.slice_id, s.used, s.last_used or s.expires_at))
        self._index_slices(s.campaign_id)
        self._note_slices_changed(s.campaign_id)

    def _expire_slices(self, now: float) -> None:
        """Close every held slice past its expiry (popped from ``_expiry``: a slice
        released or dropped before is no longer held, and is skipped)."""
        heap = self._expiry
        while heap and heap[0][0] <= now:
            self._release(heapq.heappop(heap)[2])

    def _note_slices_changed(self, cid: int) -> None:
        """A held slice of ``cid`` changed: the next report looks at its demand again."""
        if cid in self._demand:
            self._asking.add(cid)

    def _live_demand(self, cid: int) -> Demand | None:
        """``cid``'s demand unless the last report found it older than DEMAND_MEMORY_S."""
        d = self._demand.get(cid)
        if d is None or self._reported_at - d[0] > DEMAND_MEMORY_S:
            return None
        return d

    def _collect_wants(self, now: float) -> None:
        """Add to ``_wants`` every campaign with demand in the last DEMAND_MEMORY_S that
        is metered and holds no slice with room for its charge; forget older demand.

        Looks at ``_asking`` only, unless a shard is past ``fail_closed_after_s``
        (every open campaign of it is then metered): then at every demand."""
        self._reported_at = max(self._reported_at, now)
        stale = any(now - last > self.fail_closed_after_s for last in self._last_reply)
        for cid in self._demand.ids() if stale else list(self._asking):
            entry = self._demand.get(cid)
            if entry is None or now - entry[0] > DEMAND_MEMORY_S:
                self._demand.pop(cid)
                self._asking.discard(cid)
                continue
            _, charge, day = entry
            if (self._effective_state(cid, day, now) is BudgetState.METERED
                    and self._slice_with_room(cid, day, now, charge) is None):
                self._wants.add(cid)
                self._asking.add(cid)
            else:
                self._asking.discard(cid)

    def _forget_old_demand(self) -> None:
        """Drop demand the last report found older than DEMAND_MEMORY_S (bounded memory;
        ``_live_demand`` already ignores it)."""
        for cid in self._demand.older_than(self._reported_at - DEMAND_MEMORY_S):
            self._demand.pop(cid)
            self._asking.discard(cid)


def _merge(entries: list[ReportEntry]) -> ReportEntry:
    """Entries folded into one, keeping the newest sequence number (the service has
    applied none of them, or their seqs are below its window)."""
    acc: dict[tuple[int, str], list[int]] = {}
    closed: list[SliceUse] = []
    for e in entries:
        for sp in e.spend:
            v = acc.setdefault((sp.campaign_id, sp.day), [0, 0, 0, 0])
            v[0] += sp.open_micros
            v[1] += sp.sliced_micros
            v[2] += sp.demand_micros
            v[3] += sp.charges
        closed.extend(e.closed_slices)
    spend = [CampaignSpend(cid, d, *v) for (cid, d), v in acc.items()]
    return ReportEntry(entries[-1].seq, entries[-1].period_end, spend, closed,
                       resent=all(e.resent for e in entries))

