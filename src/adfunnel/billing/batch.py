"""Planning a batch of ledger writes: pure logic, no I/O.

DESIGN.md §Events and billing. The aggregator records a whole batch of the event log in
one ledger transaction. A ledger loads what the batch touches (the rows and held events
of its impression ids, its campaigns' and campaign-days' totals) into a
:class:`LedgerView`, :func:`plan_batch` decides every write in log order, and the
ledger applies the resulting :class:`BatchPlan` — the in-memory ledger to its dicts, the
SQL ledger with a few set-based statements. The rules are those of
:mod:`adfunnel.billing.ledger`, plus one: an event that comes before its prerequisite
(a click before its impression — beacons race, and a crashed reader's batch is
redelivered after later events) is **held**, once, and billed when the prerequisite is
recorded, in the same transaction; so replaying any part of the log bills exactly what
the first pass billed. A measurement event (``render``, ``viewable``, an OpenRTB ``win``
or ``loss``) gets its row once, with no money, and touches no day or lifetime total
(:data:`MEASURED`). The expected cost of an OpenRTB bid is settled once: by the first of
its billed impression and its loss notice (the other's row settles 0).

A batch's types (writes, held events, the plan, the view) are in
:mod:`adfunnel.billing.batch_model`; the money rules of one write in
:mod:`adfunnel.billing.charges`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import date, datetime

from adfunnel.billing.batch_model import (
    AFTER_LOSS,
    DEPENDENTS,
    DUPLICATES_MEASURED,
    DUPLICATES_REJECTED,
    OF_INVALID_CLICK,
    OUTSIDE_WINDOW,
    PREREQUISITE,
    RELEASED,
    WITHOUT_PREREQUISITE,
    BatchPlan,
    DayChange,
    DayKey,
    Held,
    Key,
    LedgerView,
    LedgerWrite,
    NewRow,
)
from adfunnel.billing.charges import outside_window, validate
from adfunnel.billing.limits import (
    GOAL_OVER_DELIVERY,
    PeriodLimits,
    month_of,
    split_period,
)
from adfunnel.billing.model import (
    EVENT_TYPES,
    MEASUREMENT,
    EventType,
    LedgerEvent,
    Outcome,
    Recorded,
)
from adfunnel.ivt.reasons import TIER2_REASONS
from adfunnel.money import MILLE, bill_per_mille


def plan_batch(view: LedgerView, writes: Sequence[LedgerWrite]) -> BatchPlan:
    """Decide every write of ``writes`` in order against ``view``.

    Raises:
        MoneyError: see :func:`validate` (nothing is planned).
    """
    validate(writes)
    planner = _Planner(view)
    write, recorded = planner.write, planner.plan.recorded
    for w in writes:
        recorded.append(write(w))
    return planner.plan


def _reversed(reason: str | None) -> bool:
    """True for the reason of a billed event tier 2 reversed (it keeps its slot)."""
    return reason is not None and reason in TIER2_REASONS


# Outcomes without amounts, shared (Recorded is frozen).
_DUPLICATE = Recorded(Outcome.DUPLICATE)
_HELD = Recorded(Outcome.HELD)
_NOT_BILLABLE = Recorded(Outcome.NOT_BILLABLE)
_INVALID = Recorded(Outcome.INVALID)
#: A new measurement row (render, viewable): never billed, so no amounts.
MEASURED = Recorded(Outcome.MEASURED)


class _Planner:
    """Applies writes to an overlay over the view; the overlay becomes the plan."""

    def __init__(self, view: LedgerView) -> None:
        self.view = view
        self.plan = BatchPlan()
        self._rows: dict[Key, datetime] = {}
        self._invalid: dict[Key, str] = {}  # key -> reason
        self._held = self.plan.held  # overlay: None = left the held set
        self._days: dict[DayKey, tuple[int, int]] = {}  # billed, carry
        self._life: dict[int, int] = {}
        self._months: dict[tuple[int, date], int] = {}  # (campaign, month's 1st) -> billed
        self._goals: dict[tuple[int, EventType], int] = {}  # goal events recorded
        # the view's lookups, bound once (called a few times per write)
        self._view_row_time = view.row_time
        self._view_invalid_reason = view.invalid_reason
        self._view_held = view.held

    def write(self, w: LedgerWrite) -> Recorded:
        event = w.event
        key = (event.impression_id, EVENT_TYPES[event.event_type])
        if w.ivt_reason is not None:
            return self._invalid_traffic(key, w)
        # a flagged event (a link-preview bot fetching the beacon first) does not take
        # the slot of the valid one; a reversed one does (it never bills again)
        if self._row_time(key) is not None or _reversed(self._invalid_reason(key)):
            self.plan.counters[DUPLICATES_MEASURED if key[1] in MEASUREMENT
                               else DUPLICATES_REJECTED] += 1
            return _DUPLICATE
        held = self._held_event(key)
        if held is not None:  # redelivered: it was counted when it was held
            return _HELD if held.waiting else _NOT_BILLABLE
        if key[1] in MEASUREMENT:
            return self._measure(key, w)
        if (key[1] is EventType.IMPRESSION
                and self._row_time((key[0], EventType.LOSS)) is not None):
            if not w.event.billing_notice:
                # the exchange said this bid lost: its markup's beacon bills nothing
                self._hold(key, Held(w, AFTER_LOSS))
                return _NOT_BILLABLE
            # a loss notice settled the bid's expected cost already: bill, settle nothing
            w = replace(w, event=replace(w.event, expected_micros=0))
        return self._valid(key, w)

    def _measure(self, key: Key, w: LedgerWrite) -> Recorded:
        """A new measurement row (render, viewable, OpenRTB win or loss): no charge, no
        prerequisite, no day or lifetime total (it is counted by the rollups, never
        billed). A loss settles its bid's expected cost, unless its impression (billed
        by the billing notice) settled it already: the reservation is released once."""
        event = w.event
        if (key[1] is EventType.LOSS and event.expected_micros
                and self._row_time((key[0], EventType.IMPRESSION)) is not None):
            event = replace(event, expected_micros=0)
        self._rows[key] = event.occurred_at
        self.plan.rows.append(NewRow(event, 0, 0, 0, 0))
        return MEASURED

    def _invalid_traffic(self, key: Key, w: LedgerWrite) -> Recorded:
        if self._row_time(key) is not None or self._invalid_reason(key) is not None:
            return _DUPLICATE
        self._invalid[key] = str(w.ivt_reason)
        self.plan.invalid.append((w.event, str(w.ivt_reason)))
        self.plan.counters[f"ivt_{key[1].value}"] += 1
        self.plan.counters[f"ivt_{key[1].value}_{w.ivt_reason}"] += 1
        return _INVALID

    def _valid(self, key: Key, w: LedgerWrite) -> Recorded:
        needs = PREREQUISITE.get(key[1])
        before = self._row_time((key[0], needs)) if needs is not None else None
        if needs is not None and before is None:
            if needs is EventType.CLICK and _reversed(self._invalid_reason((key[0], needs))):
                # a click tier 2 reversed attributes no conversion, ever; a click only
                # flagged at tier 1 (a bot fetched /c first) leaves the slot to the valid
                # click the conversion's click id came from: the conversion waits for it
                self._hold(key, Held(w, OF_INVALID_CLICK))
                return _NOT_BILLABLE
            self._hold(key, Held(w, WITHOUT_PREREQUISITE[key[1]]))
            return _HELD
        if before is not None and outside_window(w.event, before):
            self._hold(key, Held(w, OUTSIDE_WINDOW))
            return _NOT_BILLABLE
        recorded = self._bill(key, w)
        if key[1] in DEPENDENTS:
            self._release(key, w)
        return recorded

    def _bill(self, key: Key, w: LedgerWrite) -> Recorded:
        """A new row for ``key``: its charge with the day's carry, split between billed
        (within the daily and lifetime budgets left) and absorbed; the totals updated.
        (:func:`bill_per_mille`, :func:`lifetime_left` and :func:`split_charge`,
        inlined: this runs once per billed event.)"""
        event = w.event
        campaign_id = event.campaign_id
        dk = (campaign_id, event.day)
        found = self._days.get(dk)
        billed_so_far, carry = found if found is not None else self.view.day(dk)
        exact = event.charge_micros if event.charge_per_mille else event.charge_micros * MILLE
        if 0 <= carry < MILLE and type(exact) is int and exact >= 0:
            charge, carry = divmod(carry + exact, MILLE)
        else:  # raises for what it refuses
            charge, carry = bill_per_mille(carry, exact)
        life_billed = self._life.get(campaign_id)
        if life_billed is None:
            life_billed = self.view.lifetime_billed(campaign_id)
        lifetime = w.lifetime_budget_micros
        remaining = max(0, w.daily_budget_micros - billed_so_far)
        if lifetime is not None:
            remaining = min(remaining, max(0, lifetime - life_billed))
        goal_met = False
        if w.period is None:
            billed = min(charge, remaining)
        else:
            billed, goal_met = self._period_room(w.period, event, key[1], charge, remaining)
        absorbed = charge - billed
        self._rows[key] = event.occurred_at
        self.plan.rows.append(NewRow(event, charge, exact, billed, absorbed))
        self._days[dk] = (billed_so_far + billed, carry)
        change = self.plan.days.get(dk)
        if change is None:
            change = self.plan.days[dk] = DayChange(carry)
        change.carry = carry
        event_type = key[1]
        if event_type is EventType.IMPRESSION:
            change.impressions += 1
        elif event_type is EventType.CLICK:
            change.clicks += 1
        else:
            change.conversions += 1
        change.billed += billed
        change.absorbed += absorbed
        life_billed += billed
        self._life[campaign_id] = life_billed
        life = self.plan.lifetime.get(campaign_id)
        if life is None:
            life = self.plan.lifetime[campaign_id] = [0, 0]
        life[0] += billed
        life[1] += absorbed
        return Recorded(Outcome.BILLED, billed, absorbed,
                        None if lifetime is None else max(0, lifetime - life_billed),
                        goal_met=goal_met)

    def _period_room(self, limits: PeriodLimits, event: LedgerEvent, event_type: EventType,
                     charge: int, remaining: int) -> tuple[int, bool]:
        """What of ``charge`` bills under the period's month and goal limits besides
        ``remaining`` (day and lifetime), micros, and whether the goal is met with this
        event (its goal events now reach the total: the money limit, the goal × the rate
        now, may still leave room after a rate change, so the count says it); the
        month's and goal's running totals move with it
        (:func:`~adfunnel.billing.limits.split_period`)."""
        cid = event.campaign_id
        mk = None
        month_billed = 0
        if limits.month_budget_micros is not None:
            first, last = month_of(event.day)
            mk = (cid, first)
            found = self._months.get(mk)
            month_billed = (found if found is not None
                            else self.view.month_billed(cid, first, last))
        gk = None
        count = 0
        if limits.counts_goal(event_type, event.day):
            gk = (cid, event_type)
            found = self._goals.get(gk)
            count = found if found is not None else self.view.goal_events(
                cid, event_type, limits.flight_first, limits.flight_last)
        billed, over = split_period(charge, remaining, limits, event_type, event.day,
                                    month_billed, count)
        if mk is not None:
            self._months[mk] = month_billed + billed
        if gk is not None:
            self._goals[gk] = count + 1
        if over:
            self.plan.counters[GOAL_OVER_DELIVERY] += 1
        met = (gk is not None and limits.goal_total is not None
               and count + 1 >= limits.goal_total)
        return billed, met

    def _release(self, key: Key, by: LedgerWrite) -> None:
        """``key`` was just billed by ``by``: bill what was held waiting for it (and so
        on), within the budgets ``by`` carries (the same campaign's, as they are now)."""
        dependent = DEPENDENTS.get(key[1])
        if dependent is None:
            return
        dkey = (key[0], dependent)
        held = self._held_event(dkey)
        if held is None or not held.waiting:
            return
        self._held[dkey] = None
        write = LedgerWrite(held.write.event, by.daily_budget_micros,
                            by.lifetime_budget_micros, period=by.period)
        recorded = self._valid(dkey, write)
        if recorded.outcome is Outcome.BILLED:
            self.plan.counters[RELEASED] += 1
            self.plan.released.append((held.write.event, recorded))

    def _hold(self, key: Key, held: Held) -> None:
        self._held[key] = held
        self.plan.counters[held.reason] += 1

    def _row_time(self, key: Key) -> datetime | None:
        at = self._rows.get(key)
        return at if at is not None else self._view_row_time(key)

    def _invalid_reason(self, key: Key) -> str | None:
        found = self._invalid.get(key)
        return found if found is not None else self._view_invalid_reason(key)

    def _held_event(self, key: Key) -> Held | None:
        held = self._held
        return held[key] if key in held else self._view_held(key)

    def _day(self, dk: DayKey) -> tuple[int, int]:
        found = self._days.get(dk)
        return found if found is not None else self.view.day(dk)

    def _lifetime(self, campaign_id: int) -> int:
        found = self._life.get(campaign_id)
        return found if found is not None else self.view.lifetime_billed(campaign_id)
