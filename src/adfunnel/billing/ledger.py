"""The ledger interface and its in-memory implementation.

Rules (DESIGN.md §Events and billing, §Money and budgets):
- one row per (impression id, event type): the same beacon twice bills once;
- a click bills only when its impression was billed (has a ledger row), a conversion
  only when its click was; one that comes first is held (counted once) and billed
  when its prerequisite is recorded (:mod:`adfunnel.billing.batch`);
- invalid traffic is recorded once per (impression id, event type) with its reason
  (:meth:`Ledger.record_invalid`), never billed: an invalid impression's click and an
  invalid click's conversion are not billable. A flagged event does not use up the slot
  of a valid one that comes after it (a link-preview bot fetches the beacon before the
  viewer's browser): the valid one still bills, once; an event tier 2 reversed keeps
  its slot;
- nothing above a campaign's daily budget is billed: the part of a charge above the
  remaining budget of its local day is recorded as absorbed overspend;
- nor above its lifetime budget: remaining = min(daily budget − billed today,
  lifetime budget − billed on every day), the rest absorbed likewise;
- nor above its budget period's limits (:mod:`adfunnel.billing.limits`): a flight's
  money (as its lifetime limit), an average-day month's 30.4×, a goal's event count —
  an event past its goal is absorbed whole and counted ``goal_over_delivery``;
- no charge is rounded against the advertiser: a per-mille (CPM) charge bills
  floor((carry + price) / 1000) micros and carries the remainder per campaign and local
  day, so a day's billed + absorbed total is within one micro below the exact total.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from datetime import date, datetime
from typing import Protocol

from adfunnel.billing.batch import plan_batch
from adfunnel.billing.batch_model import (
    OUTSIDE_WINDOW,
    PREREQUISITE,
    WITHOUT_PREREQUISITE,
    BatchPlan,
    DayKey,
    Held,
    Key,
    LedgerWrite,
)
from adfunnel.billing.charges import lifetime_left, outside_window, split_charge
from adfunnel.billing.model import (
    MEASUREMENT,
    DayTotals,
    EventType,
    LedgerEvent,
    LedgerStats,
    Outcome,
    Recorded,
)

__all__ = ["OUTSIDE_WINDOW", "PREREQUISITE", "WITHOUT_PREREQUISITE", "Ledger", "LedgerWrite",
           "MemoryLedger", "lifetime_left", "outside_window", "split_charge"]

_COUNT_COLUMN = {EventType.IMPRESSION: 0, EventType.CLICK: 1, EventType.CONVERSION: 5}


class Ledger(Protocol):
    """Billing ledger; every implementation passes tests/contract/test_ledger_contract.py."""

    def record(
        self, event: LedgerEvent, daily_budget_micros: int,
        lifetime_budget_micros: int | None = None,
    ) -> Recorded:
        """Record ``event`` at most once, billing no more than the remaining budget:
        min(daily − billed on its day, lifetime − billed on all days) (no lifetime
        budget: None). ``Recorded.lifetime_remaining_micros`` is what is left after it."""
        ...

    def record_many(self, writes: Sequence[LedgerWrite]) -> BatchPlan:
        """Record a batch in ONE transaction, in order, with the rules of
        :mod:`adfunnel.billing.batch`: ``recorded`` holds one :class:`Recorded` per
        write (BILLED, DUPLICATE, NOT_BILLABLE, HELD, or INVALID for new invalid
        traffic), ``released`` the held events that this batch billed. Equal to
        recording the writes one by one.

        Raises:
            MoneyError: for a negative or non-integer charge or budget (nothing is
                recorded).
        """
        ...

    def record_invalid(self, event: LedgerEvent, reason: str) -> bool:
        """Record ``event`` as invalid traffic with ``reason`` (an IVT reason code), at
        most once per (impression id, event type), never billed. True when it is new:
        then the durable counters ``ivt_<event type>`` and ``ivt_<event type>_<reason>``
        are increased by one (a redelivered event counts nothing again). An event that
        already has a valid ledger row is left alone (False)."""
        ...

    def reverse(self, impression_id: str, event_type: EventType, reason: str,
                now: datetime, hold_s: float) -> Recorded | None:
        """Tier 2 found a recorded event invalid: while it is still pending (``now`` <
        its ``occurred_at`` + ``hold_s``), move it to invalid traffic with ``reason`` —
        its row leaves the ledger, its billed and absorbed micros and its count leave
        the day's and the lifetime totals, counters ``ivt_<event type>``,
        ``ivt_<event type>_<reason>`` and ``ivt_reversed`` grow by one. Returns what was
        taken back (``Recorded(INVALID, billed, absorbed)``), or None when there is no
        such row or it is final. A reversed event never bills again (a redelivery of it
        is a duplicate)."""
        ...

    def lifetime_billed(self, campaign_id: int | None = None) -> dict[int, int]:
        """campaign id -> billed micros over every day (one campaign, or all; none
        without billed spend)."""
        ...

    def day_totals(self, campaign_id: int, first: date, last: date) -> list[DayTotals]:
        """Totals for local days ``first``..``last`` inclusive that have any row, by day."""
        ...

    def billed_on(self, day: date) -> dict[int, int]:
        """campaign id -> billed micros on local ``day`` (what budgets count as spent)."""
        ...

    def settled_since(self, day: date, since: datetime) -> dict[int, int]:
        """campaign id -> expected cost settled (``LedgerEvent.expected_micros``; the
        billed micros where unknown) by the events on local ``day`` of serves at or after
        ``since`` (serve time, ``LedgerEvent.served_at``; event time where unknown): what
        the budget service takes out of its in-flight estimates."""
        ...

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a named durable counter (e.g. ``invalid_tokens``)."""
        ...

    def stats(self) -> LedgerStats: ...

    def counters(self) -> dict[str, int]: ...


class MemoryLedger:
    """In-process ledger (embedded default and tests); one lock serialises writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, EventType], tuple[LedgerEvent, int, int]] = {}
        self._invalid: dict[tuple[str, EventType], tuple[LedgerEvent, str]] = {}
        self._held: dict[Key, Held] = {}
        # (campaign, day) -> [impressions, clicks, billed, absorbed, carry in 1/1000 µ,
        # conversions]
        self._days: dict[tuple[int, date], list[int]] = defaultdict(
            lambda: [0, 0, 0, 0, 0, 0])
        self._counters: dict[str, int] = defaultdict(int)
        self._lifetime: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # billed, absorbed
        # day -> campaign -> serve minute -> [(serve time, settled)]: settled_since reads
        # only the minutes from ``since`` on (the budget feed asks every few seconds)
        self._by_serve: dict[date, dict[int, dict[int, list[tuple[float, int]]]]] = (
            defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
        self._last_minute: dict[tuple[date, int], int] = {}

    def record(
        self, event: LedgerEvent, daily_budget_micros: int,
        lifetime_budget_micros: int | None = None,
    ) -> Recorded:
        """See :meth:`Ledger.record` (a batch of one).

        Raises:
            MoneyError: for a negative or non-integer charge or budget.
        """
        write = LedgerWrite(event, daily_budget_micros, lifetime_budget_micros)
        return self.record_many([write]).recorded[0]

    def record_invalid(self, event: LedgerEvent, reason: str) -> bool:
        write = LedgerWrite(event, ivt_reason=reason)
        return self.record_many([write]).recorded[0].outcome is Outcome.INVALID

    def record_many(self, writes: Sequence[LedgerWrite]) -> BatchPlan:
        """See :meth:`Ledger.record_many`.

        Raises:
            MoneyError: for a negative or non-integer charge or budget.
        """
        with self._lock:
            plan = plan_batch(_MemoryView(self), writes)
            self._apply(plan)
            return plan

    def _apply(self, plan: BatchPlan) -> None:
        for row in plan.rows:
            event = row.event
            self._rows[(event.impression_id, EventType(event.event_type))] = (
                event, row.billed, row.absorbed)
            settles = row.billed if event.expected_micros is None else event.expected_micros
            if settles:
                ts = (event.served_at or event.occurred_at).timestamp()
                minute = int(ts // 60)
                self._by_serve[event.day][event.campaign_id][minute].append((ts, settles))
                k = (event.day, event.campaign_id)
                self._last_minute[k] = max(minute, self._last_minute.get(k, minute))
        for event, reason in plan.invalid:
            self._invalid[(event.impression_id, EventType(event.event_type))] = (event, reason)
        for key, held in plan.held.items():
            if held is None:
                self._held.pop(key, None)
            else:
                self._held[key] = held
        for dk, change in plan.days.items():
            totals = self._days[dk]
            totals[0] += change.impressions
            totals[1] += change.clicks
            totals[5] += change.conversions
            totals[2] += change.billed
            totals[3] += change.absorbed
            totals[4] = change.carry
        for cid, (billed, absorbed) in plan.lifetime.items():
            life = self._lifetime[cid]
            life[0] += billed
            life[1] += absorbed
        for name, n in plan.counters.items():
            self._counters[name] += n

    def reverse(self, impression_id: str, event_type: EventType, reason: str,
                now: datetime, hold_s: float) -> Recorded | None:
        key = (impression_id, EventType(event_type))
        with self._lock:
            held = self._rows.get(key)
            if held is None or (now - held[0].occurred_at).total_seconds() >= hold_s:
                return None
            event, billed, absorbed = self._rows.pop(key)
            totals = self._days[(event.campaign_id, event.day)]
            totals[_COUNT_COLUMN[key[1]]] -= 1
            totals[2] -= billed
            totals[3] -= absorbed
            life = self._lifetime[event.campaign_id]
            life[0] -= billed
            life[1] -= absorbed
            self._invalid[key] = (event, reason)
            for name in (f"ivt_{key[1].value}", f"ivt_{key[1].value}_{reason}", "ivt_reversed"):
                self._counters[name] += 1
            return Recorded(Outcome.INVALID, billed, absorbed)

    def day_totals(self, campaign_id: int, first: date, last: date) -> list[DayTotals]:
        with self._lock:
            out = [
                DayTotals(day, *vals[:4], conversions=vals[5])
                for (cid, day), vals in self._days.items()
                if cid == campaign_id and first <= day <= last
            ]
        return sorted(out, key=lambda t: t.day)

    def rows_between(
        self, start: datetime, end: datetime
    ) -> tuple[list[tuple[LedgerEvent, int, int]], list[tuple[LedgerEvent, str]]]:
        """The rows whose ``occurred_at`` is in [start, end): valid ones as (event, billed
        micros, absorbed micros), invalid ones as (event, reason). Read-only; scans every
        row (the hourly rollups of :mod:`adfunnel.billing.rollups` read it)."""
        with self._lock:
            valid = [r for r in self._rows.values() if start <= r[0].occurred_at < end]
            invalid = [r for r in self._invalid.values() if start <= r[0].occurred_at < end]
        return valid, invalid

    def billed_on(self, day: date) -> dict[int, int]:
        with self._lock:
            return {cid: v[2] for (cid, d), v in self._days.items() if d == day}

    def settled_since(self, day: date, since: datetime) -> dict[int, int]:
        out: dict[int, int] = {}
        t = since.timestamp()
        first = int(t // 60)
        with self._lock:
            for cid, minutes in self._by_serve.get(day, {}).items():
                total = sum(b for ts, b in minutes.get(first, ()) if ts >= t)
                last = self._last_minute[(day, cid)]
                if last - first <= len(minutes):
                    later = (minutes.get(m, ()) for m in range(first + 1, last + 1))
                else:  # a long window (conversions): fewer minutes held than in it
                    later = (rows for m, rows in minutes.items() if m > first)
                for rows in later:
                    total += sum(b for _, b in rows)
                if total:
                    out[cid] = total
        return out

    def lifetime_billed(self, campaign_id: int | None = None) -> dict[int, int]:
        with self._lock:
            return {cid: v[0] for cid, v in self._lifetime.items()
                    if v[0] and (campaign_id is None or cid == campaign_id)}

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counters[name] += n

    def stats(self) -> LedgerStats:
        with self._lock:
            measured = sum(1 for _, kind in self._rows if kind in MEASUREMENT)
            return LedgerStats(len(self._rows) - measured,
                               self._counters.get("duplicates_rejected", 0), measured)

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)


class _MemoryView:
    """A :class:`~adfunnel.billing.batch.LedgerView` over a memory ledger's dicts (read
    under its lock)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self._l = ledger

    def row_time(self, key: Key) -> datetime | None:
        row = self._l._rows.get(key)
        return None if row is None else row[0].occurred_at

    def invalid_reason(self, key: Key) -> str | None:
        found = self._l._invalid.get(key)
        return None if found is None else found[1]

    def held(self, key: Key) -> Held | None:
        return self._l._held.get(key)

    def day(self, key: DayKey) -> tuple[int, int]:
        totals = self._l._days.get(key)
        return (0, 0) if totals is None else (totals[2], totals[4])

    def lifetime_billed(self, campaign_id: int) -> int:
        life = self._l._lifetime.get(campaign_id)
        return 0 if life is None else life[0]

    def month_billed(self, campaign_id: int, first: date, last: date) -> int:
        return sum(v[2] for (cid, day), v in self._l._days.items()
                   if cid == campaign_id and first <= day <= last)

    def goal_events(self, campaign_id: int, event_type: EventType, first: date | None,
                    last: date | None) -> int:
        col = _COUNT_COLUMN[EventType(event_type)]
        return sum(v[col] for (cid, day), v in self._l._days.items()
                   if cid == campaign_id and (first is None or first <= day)
                   and (last is None or day <= last))
