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

The transport is swappable (:class:`ReportTransport`): in memory with delays in the
day simulation, HTTP between processes (``adfunnel.budget.http``). Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

from adfunnel.budget.gate import BUDGET_EXHAUSTED, NO_SLICE, Served
from adfunnel.budget.protocol import CampaignSpend, Reply, Report, ReportEntry, SliceUse
from adfunnel.budget.slices import BudgetState
from adfunnel.campaigns.model import Campaign
from adfunnel.clock import Clock

#: Seconds without a reply after which every campaign of a shard is treated as metered.
FAIL_CLOSED_AFTER_S = 60.0
#: Seconds a metered campaign's last demand keeps a slice requested (low-rate campaigns
#: would otherwise see every slice expire before their next request).
DEMAND_MEMORY_S = 600.0
#: Most unacknowledged entries kept per shard (older ones are merged into the newest).
MAX_PENDING_ENTRIES = 300


class ReportTransport(Protocol):
    """Carries a report to the shard it names and the reply back.

    ``send_report`` must not raise: on failure it simply never calls ``on_reply``
    (the entries stay pending and go again with the next report). It may call
    ``on_reply`` before returning (HTTP) or later (simulated delays).
    """

    def send_report(self, report: Report, on_reply: Callable[[Reply], None]) -> None: ...


@dataclass(slots=True)
class HeldSlice:
    slice_id: str
    campaign_id: int
    day: date
    amount: int
    expires_at: float
    used: int = 0
    last_used: float = 0.0
    worst_case: bool = False


@dataclass(slots=True)
class _Acc:
    open: int = 0
    sliced: int = 0
    demand: int = 0
    charges: int = 0


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
                 shards: int = 1, fail_closed_after_s: float = FAIL_CLOSED_AFTER_S) -> None:
        self.server_id = server_id
        self.clock = clock
        self.transport = transport
        self.shards = shards
        self.fail_closed_after_s = fail_closed_after_s
        self._lock = threading.Lock()
        self._state: dict[int, tuple[BudgetState, float]] = {}
        self._last_reply: list[float] = [clock.now().timestamp()] * shards
        self._seq = [0] * shards
        self._pending: list[list[ReportEntry]] = [[] for _ in range(shards)]
        self._acc: dict[tuple[int, date], _Acc] = {}
        self._slices: dict[int, list[HeldSlice]] = {}
        self._closed: list[list[SliceUse]] = [[] for _ in range(shards)]
        self._wants: set[int] = set()
        self._demand: dict[int, tuple[float, int]] = {}  # cid -> (last metered demand, charge)
        self.stats = {"sent": 0, "replies": 0, "refused_no_slice": 0, "unsliced_serves": 0}

    # -- SpendGate ------------------------------------------------------------------------
    def admit(self, campaign: Campaign, now: datetime, max_charge_micros: int) -> str | None:
        """None when ``campaign`` may take part now; else ``budget_exhausted`` or ``no_slice``."""
        cid = campaign.id
        t = now.timestamp()
        with self._lock:
            state = self._effective_state(cid, t)
            if state is BudgetState.OPEN:
                return None
            if state is BudgetState.STOPPED:
                return BUDGET_EXHAUSTED
            self._demand[cid] = (t, max_charge_micros)
            s = self._slice_with_room(cid, t, max_charge_micros)
            if s is not None:
                return None
            if state is BudgetState.METERED:
                self._wants.add(cid)
                self.stats["refused_no_slice"] += 1
                self._note_demand(campaign, now, max_charge_micros)
                return NO_SLICE
            return BUDGET_EXHAUSTED

    def pacing_rate(self, campaign_id: int) -> float:
        """p from the service's last reply (1.0 before the first)."""
        with self._lock:
            st = self._state.get(campaign_id)
        return 1.0 if st is None else st[1]

    def state(self, campaign_id: int, now: float | None = None) -> BudgetState:
        """The state the client acts on now (after fail-closed)."""
        t = self.clock.now().timestamp() if now is None else now
        with self._lock:
            return self._effective_state(campaign_id, t)

    def record_served(self, served: Served) -> None:
        """Record a serve's expected cost; metered campaigns take it from a slice (the
        worst-case ``served.max_charge_micros`` from a ``worst_case`` slice)."""
        cid = served.campaign_id
        worst = getattr(served, "max_charge_micros", 0) or served.expected_micros
        with self._lock:
            acc = self._acc.setdefault((cid, served.day), _Acc())
            acc.charges += 1
            acc.demand += worst
            t = self.clock.now().timestamp()
            if self._effective_state(cid, t) is BudgetState.OPEN:
                acc.open += served.expected_micros
                return
            s = self._slice_with_room(cid, t, worst)
            if s is None:
                # admitted before a state change: count it as open spend (the service
                # counts it as in-flight cost), never lose it
                self.stats["unsliced_serves"] += 1
                acc.open += served.expected_micros
                return
            s.used += worst if s.worst_case else served.expected_micros
            s.last_used = t
            acc.sliced += served.expected_micros
            if s.amount - s.used < worst:
                # no room for another charge: release it now, so what it did not use
                # returns to the budget at once rather than when it expires
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
            for cid, (at, charge) in list(self._demand.items()):
                if now - at > DEMAND_MEMORY_S:
                    del self._demand[cid]
                elif (self._effective_state(cid, now) is BudgetState.METERED
                      and self._slice_with_room(cid, now, charge) is None):
                    self._wants.add(cid)
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
                out.append(Report(self.server_id, sh, now, list(pend), wants[sh]))
            return out

    def handle_reply(self, reply: Reply) -> None:
        """Apply a reply: drop acknowledged entries, take states, p and slices."""
        with self._lock:
            self.stats["replies"] += 1
            sh = reply.shard
            if reply.at >= self._last_reply[sh]:
                self._last_reply[sh] = reply.at
            self._pending[sh] = [e for e in self._pending[sh] if e.seq > reply.acked_through]
            for d in reply.directives:
                self._state[d.campaign_id] = (BudgetState(d.state), d.p)
            for g in reply.grants:
                self._slices.setdefault(g.campaign_id, []).append(HeldSlice(
                    g.slice_id, g.campaign_id, date.fromisoformat(g.day), g.amount_micros,
                    g.expires_at, worst_case=g.worst_case))

    def held_slices(self) -> list[HeldSlice]:
        with self._lock:
            return [s for lst in self._slices.values() for s in lst]

    # -- internals ------------------------------------------------------------------------
    def _effective_state(self, cid: int, t: float) -> BudgetState:
        st = self._state.get(cid)
        if st is None:
            return BudgetState.METERED  # unknown to us yet: ask for a slice
        state = st[0]
        if state is BudgetState.OPEN and t - self._last_reply[cid % self.shards] > (
                self.fail_closed_after_s):
            return BudgetState.METERED
        return state

    def _slice_with_room(self, cid: int, t: float, charge: int) -> HeldSlice | None:
        for s in self._slices.get(cid, ()):
            if s.expires_at > t and s.amount - s.used >= charge:
                return s
        return None

    def _note_demand(self, campaign: Campaign, now: datetime, charge: int) -> None:
        from adfunnel.campaigns.schedule import local_day

        acc = self._acc.setdefault((campaign.id, local_day(now, campaign.time_zone)), _Acc())
        acc.demand += charge

    def _release(self, s: HeldSlice) -> None:
        lst = self._slices.get(s.campaign_id, [])
        if s in lst:
            lst.remove(s)
            if not lst:
                del self._slices[s.campaign_id]
            self._closed[s.campaign_id % self.shards].append(
                SliceUse(s.slice_id, s.used, s.last_used or s.expires_at))

    def _expire_slices(self, now: float) -> None:
        for cid, lst in list(self._slices.items()):
            keep = []
            for s in lst:
                if s.expires_at <= now:
                    self._closed[cid % self.shards].append(
                        SliceUse(s.slice_id, s.used, s.last_used or s.expires_at))
                else:
                    keep.append(s)
            if keep:
                self._slices[cid] = keep
            else:
                del self._slices[cid]


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
    return ReportEntry(entries[-1].seq, entries[-1].period_end, spend, closed)

