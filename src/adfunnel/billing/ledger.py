"""The ledger interface and its in-memory implementation.

Rules (DESIGN.md §Events and billing, §Money and budgets):
- one row per (impression id, event type): the same beacon twice bills once;
- a click bills only when its impression was billed (has a ledger row), a conversion
  only when its click was;
- invalid traffic is recorded once per (impression id, event type) with its reason
  (:meth:`Ledger.record_invalid`), never billed: an invalid impression's click and an
  invalid click's conversion are not billable;
- nothing above a campaign's daily budget is billed: the part of a charge above the
  remaining budget of its local day is recorded as absorbed overspend;
- nor above its lifetime budget: remaining = min(daily budget − billed today,
  lifetime budget − billed on every day), the rest absorbed likewise;
- no charge is rounded against the advertiser: a per-mille (CPM) charge bills
  floor((carry + price) / 1000) micros and carries the remainder per campaign and local
  day, so a day's billed + absorbed total is within one micro below the exact total.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import date, datetime
from typing import Protocol

from adfunnel.billing.model import (
    DayTotals,
    EventType,
    LedgerEvent,
    LedgerStats,
    Outcome,
    Recorded,
)
from adfunnel.money import MoneyError, bill_per_mille, micros

_INT64_MAX = 2**63 - 1

#: The event that must have a ledger row before an event of this type bills, and the
#: counter of those that came without it.
PREREQUISITE = {EventType.CLICK: EventType.IMPRESSION, EventType.CONVERSION: EventType.CLICK}
WITHOUT_PREREQUISITE = {EventType.CLICK: "clicks_without_impression",
                        EventType.CONVERSION: "conversions_without_click"}
#: The counter of conversions that came after their click's attribution window.
OUTSIDE_WINDOW = "conversions_outside_window"
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


def outside_window(event: LedgerEvent, prerequisite_at: datetime) -> bool:
    """True when ``event`` (a conversion) came later than its attribution window after
    its click at ``prerequisite_at``."""
    window = event.attribution_window_s
    return window is not None and (
        (event.occurred_at - prerequisite_at).total_seconds() > window)


def split_charge(
    charge: int, billed_so_far: int, daily_budget: int, lifetime_remaining: int | None = None
) -> tuple[int, int]:
    """(billed, absorbed) for a ``charge`` on a day already billed ``billed_so_far``.

    ``lifetime_remaining``: what the lifetime budget has left (None: no lifetime budget).
    Invariant: billed + absorbed == charge, billed_so_far + billed <= daily_budget and
    billed <= lifetime_remaining.
    """
    remaining = max(0, daily_budget - billed_so_far)
    if lifetime_remaining is not None:
        remaining = min(remaining, max(0, lifetime_remaining))
    billed = min(charge, remaining)
    return billed, charge - billed


def lifetime_left(lifetime_budget: int | None, lifetime_billed: int) -> int | None:
    """Micros the lifetime budget has left (≥ 0), or None without a lifetime budget."""
    return None if lifetime_budget is None else max(0, lifetime_budget - lifetime_billed)


def checked_charge(event: LedgerEvent) -> int:
    """``event``'s exact charge in thousandths of a micro, validated.

    Raises:
        MoneyError: for a negative or non-integer charge, or one too large to store.
    """
    micros(event.charge_micros, field="charge_micros")
    exact = event.charge_millimicros
    if exact > _INT64_MAX:
        raise MoneyError(f"charge_micros: too large, got {event.charge_micros}")
    return exact


class MemoryLedger:
    """In-process ledger (embedded default and tests); one lock serialises writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, EventType], tuple[LedgerEvent, int, int]] = {}
        self._invalid: dict[tuple[str, EventType], tuple[LedgerEvent, str]] = {}
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
        """See :meth:`Ledger.record`.

        Raises:
            MoneyError: for a negative or non-integer charge or budget.
        """
        exact = checked_charge(event)
        micros(daily_budget_micros, field="daily_budget_micros")
        if lifetime_budget_micros is not None:
            micros(lifetime_budget_micros, field="lifetime_budget_micros")
        event_type = EventType(event.event_type)
        key = (event.impression_id, event_type)
        with self._lock:
            if key in self._rows:
                self._counters["duplicates_rejected"] += 1
                return Recorded(Outcome.DUPLICATE)
            needs = PREREQUISITE.get(event_type)
            before = self._rows.get((event.impression_id, needs)) if needs else None
            if needs is not None and before is None:
                self._counters[WITHOUT_PREREQUISITE[event_type]] += 1
                return Recorded(Outcome.NOT_BILLABLE)
            if before is not None and outside_window(event, before[0].occurred_at):
                self._counters[OUTSIDE_WINDOW] += 1
                return Recorded(Outcome.NOT_BILLABLE)
            if key in self._invalid:  # recorded before, as invalid traffic
                self._counters["duplicates_rejected"] += 1
                return Recorded(Outcome.DUPLICATE)
            totals = self._days[(event.campaign_id, event.day)]
            due, totals[4] = bill_per_mille(totals[4], exact)
            life = self._lifetime[event.campaign_id]
            left = lifetime_left(lifetime_budget_micros, life[0])
            billed, absorbed = split_charge(due, totals[2], daily_budget_micros, left)
            self._rows[key] = (event, billed, absorbed)
            totals[_COUNT_COLUMN[event_type]] += 1
            totals[2] += billed
            totals[3] += absorbed
            life[0] += billed
            life[1] += absorbed
            settles = billed if event.expected_micros is None else event.expected_micros
            if settles:
                ts = (event.served_at or event.occurred_at).timestamp()
                minute = int(ts // 60)
                self._by_serve[event.day][event.campaign_id][minute].append((ts, settles))
                k = (event.day, event.campaign_id)
                self._last_minute[k] = max(minute, self._last_minute.get(k, minute))
            return Recorded(Outcome.BILLED, billed, absorbed,
                            lifetime_left(lifetime_budget_micros, life[0]))

    def record_invalid(self, event: LedgerEvent, reason: str) -> bool:
        event_type = EventType(event.event_type)
        key = (event.impression_id, event_type)
        with self._lock:
            if key in self._invalid or key in self._rows:
                return False
            self._invalid[key] = (event, reason)
            self._counters[f"ivt_{event_type.value}"] += 1
            self._counters[f"ivt_{event_type.value}_{reason}"] += 1
            return True

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
            return LedgerStats(len(self._rows), self._counters.get("duplicates_rejected", 0))

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)
