"""The vocabulary of a ledger batch: a write, a held event, the rows and day changes a plan
adds, the plan itself, the view of the ledger a planner reads, and the counter names a
batch adds to (micros; a per-mille carry in thousandths of a micro).

Pure data, no rules: :func:`adfunnel.billing.batch.plan_batch` decides a batch,
:mod:`adfunnel.billing.charges` holds the money rules of one write.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Protocol

from adfunnel.billing.limits import PeriodLimits, PeriodView
from adfunnel.billing.model import EventType, LedgerEvent, Recorded

Key = tuple[str, EventType]
DayKey = tuple[int, date]

#: The event that must have a ledger row before an event of this type bills, and the
#: counter of those that came without it (counted once per event, when it is held).
PREREQUISITE = {EventType.CLICK: EventType.IMPRESSION, EventType.CONVERSION: EventType.CLICK}
WITHOUT_PREREQUISITE = {EventType.CLICK: "clicks_without_impression",
                        EventType.CONVERSION: "conversions_without_click"}
#: The events waiting for one of this type.
DEPENDENTS = {EventType.IMPRESSION: EventType.CLICK, EventType.CLICK: EventType.CONVERSION}
#: Counter (and held reason) of conversions that came after their click's window.
OUTSIDE_WINDOW = "conversions_outside_window"
#: Counter (and held reason) of conversions whose click was invalid traffic: never billed.
OF_INVALID_CLICK = "conversions_of_invalid_click"
#: Counter (and held reason) of beacon impressions of an OpenRTB bid whose loss notice
#: came first (``exchange_beacon`` mode: the exchange said the bid lost, so a page
#: firing its markup's ``/i`` bills nothing).
AFTER_LOSS = "impressions_after_loss"
#: Held reasons that never bill (the others wait for their prerequisite).
NEVER_BILLED = frozenset({OUTSIDE_WINDOW, OF_INVALID_CLICK, AFTER_LOSS})
#: Counter of held events billed when their prerequisite came.
RELEASED = "held_released"
DUPLICATES_REJECTED = "duplicates_rejected"
#: Counter of re-sent render and viewable events (kept apart from the billing duplicates).
DUPLICATES_MEASURED = "duplicates_measured"
#: Column of the day totals each event type counts in (impressions, clicks, conversions).
COUNT_FIELD = {EventType.IMPRESSION: "impressions", EventType.CLICK: "clicks",
               EventType.CONVERSION: "conversions"}


@dataclass(frozen=True, slots=True)
class LedgerWrite:
    """One event for :meth:`Ledger.record_many`.

    ``ivt_reason`` set: the event is invalid traffic with that reason code, recorded
    once and never billed. Otherwise it is billed within ``daily_budget_micros`` (the
    campaign's budget for ``event.day``), ``lifetime_budget_micros`` (None: none) and
    ``period``'s month and goal limits (None: none).
    """

    event: LedgerEvent
    daily_budget_micros: int = 0
    lifetime_budget_micros: int | None = None
    ivt_reason: str | None = None
    #: the month and goal limits of its budget period (:mod:`adfunnel.billing.limits`)
    period: PeriodLimits | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """An event recorded but not billed: waiting for its prerequisite (reason
    ``clicks_without_impression`` / ``conversions_without_click``), or never billed:
    past its attribution window (``conversions_outside_window``) or the conversion of
    an invalid-traffic click (``conversions_of_invalid_click``)."""

    write: LedgerWrite
    reason: str

    @property
    def waiting(self) -> bool:
        return self.reason not in NEVER_BILLED


@dataclass(slots=True)
class DayChange:
    """What a batch adds to one campaign-day's totals (``carry``: the day's new carried
    fraction of per-mille charges, thousandths of a micro)."""

    carry: int
    impressions: int = 0
    clicks: int = 0
    conversions: int = 0
    billed: int = 0
    absorbed: int = 0


@dataclass(frozen=True, slots=True)
class NewRow:
    """A new valid ledger row: ``charge`` whole micros made due (``billed + absorbed``)
    of the exact charge ``exact`` (thousandths of a micro)."""

    event: LedgerEvent
    charge: int
    exact: int
    billed: int
    absorbed: int


@dataclass
class BatchPlan:
    """Everything a batch writes, decided in log order by :func:`plan_batch`."""

    #: one per write, aligned: BILLED, DUPLICATE, NOT_BILLABLE, HELD, or INVALID (new
    #: invalid traffic)
    recorded: list[Recorded] = field(default_factory=list)
    #: held events this batch billed because their prerequisite came, with what it did
    released: list[tuple[LedgerEvent, Recorded]] = field(default_factory=list)
    rows: list[NewRow] = field(default_factory=list)
    invalid: list[tuple[LedgerEvent, str]] = field(default_factory=list)
    #: the held events the batch changed: key -> its held event now, or None when it
    #: left the held set (billed); a redelivered held event is not held again
    held: dict[Key, Held | None] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)
    days: dict[DayKey, DayChange] = field(default_factory=dict)
    #: campaign id -> [billed, absorbed] added to its lifetime totals
    lifetime: dict[int, list[int]] = field(default_factory=dict)


class LedgerView(PeriodView, Protocol):
    """The ledger state a batch reads, as it was before the batch (period totals too:
    :class:`~adfunnel.billing.limits.PeriodView`)."""

    def row_time(self, key: Key) -> datetime | None:
        """When the valid ledger row ``key`` occurred; None: there is none."""
        ...

    def invalid_reason(self, key: Key) -> str | None:
        """The reason of the invalid-traffic record ``key``; None: there is none."""
        ...

    def held(self, key: Key) -> Held | None: ...

    def day(self, key: DayKey) -> tuple[int, int]:
        """(billed micros, carry in thousandths of a micro) of a campaign-day."""
        ...

    def lifetime_billed(self, campaign_id: int) -> int: ...
