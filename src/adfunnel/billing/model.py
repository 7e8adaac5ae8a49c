"""Ledger records: what a billable event is and what recording it did."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum


class EventType(StrEnum):
    IMPRESSION = "impression"
    CLICK = "click"
    CONVERSION = "conversion"
    #: measurement (README, "Viewable impressions"): recorded once per impression id,
    #: never billed, never counted as impressions, clicks or conversions
    RENDER = "render"
    VIEWABLE = "viewable"
    #: an exchange's OpenRTB win and loss notices (README, "OpenRTB notices"): measured
    #: once per impression id, never billed; a new loss row settles its bid's expected
    #: cost (``LedgerEvent.expected_micros``) unless the impression settled it already
    WIN = "win"
    LOSS = "loss"


#: The event types that are measurement only (their ledger rows carry no money).
MEASUREMENT = frozenset({EventType.RENDER, EventType.VIEWABLE, EventType.WIN, EventType.LOSS})


#: value (or member: a StrEnum member hashes and compares as its value) -> member, a
#: dict lookup where ``EventType(x)`` would cost an enum call on hot paths
EVENT_TYPES: dict[str, EventType] = {t.value: t for t in EventType}


class Outcome(StrEnum):
    BILLED = "billed"  # a new ledger row; billed_micros may be 0 when the budget was spent
    DUPLICATE = "duplicate"  # the (impression id, event type) row exists already
    NOT_BILLABLE = "not_billable"  # e.g. a conversion after its attribution window
    HELD = "held"  # waiting for its prerequisite (a click before its impression)
    INVALID = "invalid"  # invalid traffic (IVT): recorded with its reason, never billed
    MEASURED = "measured"  # a new render or viewable row: counted, never billed


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """A validated beacon ready for the ledger.

    ``charge_micros`` is what this event costs when it is the billable event of its
    billing type (per impression for CPM, per click for CPC), else 0. With
    ``charge_per_mille`` it is a price per thousand events (the CPM price, exactly as
    the token carries it) and the ledger bills it with the campaign-day's carried
    fraction (:func:`adfunnel.money.bill_per_mille`), never rounding it up.
    ``day`` is the campaign's local budget day of ``occurred_at``.
    """

    impression_id: str
    event_type: EventType
    campaign_id: int
    ad_id: int
    placement: str
    billing_type: str
    charge_micros: int
    occurred_at: datetime
    day: date
    charge_per_mille: bool = False
    #: when the impression was served (the token's issue time); None = ``occurred_at``.
    #: The budget service's billed feed counts billed spend by serve time.
    served_at: datetime | None = None
    #: the serve's expected cost this event settles in the budget (micros): its billable
    #: event carries the token's expected cost, other events 0; None = unknown (an
    #: older token), and the billed amount stands in for it
    expected_micros: int | None = None
    #: a conversion bills only within this many seconds after its click (None: any time)
    attribution_window_s: int | None = None
    #: an OpenRTB win's clearing price or a loss's minimum bid to win (CPM micros), and a
    #: loss's reason code (OpenRTB 2.6 §5.25): the win-price history; None elsewhere
    notice_micros: int | None = None
    loss_reason: int | None = None
    #: an impression from an exchange's OpenRTB billing notice (it bills even after a
    #: loss notice: the exchange bills us); False for a beacon's
    billing_notice: bool = False

    @property
    def charge_millimicros(self) -> int:
        """The exact charge in thousandths of a micro (a CPM price is exactly that)."""
        return self.charge_micros if self.charge_per_mille else self.charge_micros * 1000


@dataclass(frozen=True, slots=True)
class Recorded:
    """What ``Ledger.record`` did. For a new billed row ``billed + absorbed`` is the whole
    micros the event made due: its charge, or for a per-mille charge
    floor((carry + price) / 1000)."""

    outcome: Outcome
    billed_micros: int = 0
    absorbed_micros: int = 0
    #: what the lifetime budget has left after this event (None: no lifetime budget, or
    #: not billed); 0 means the lifetime budget is spent
    lifetime_remaining_micros: int | None = None
    #: the campaign's goal is met with this event (its count of goal events reached the
    #: goal's total): like a spent lifetime budget, nothing more of it bills
    goal_met: bool = False


@dataclass(frozen=True, slots=True)
class DayTotals:
    """One campaign's ledger totals for one local day."""

    day: date
    impressions: int
    clicks: int
    billed_micros: int
    absorbed_micros: int
    conversions: int = 0


@dataclass(frozen=True, slots=True)
class LedgerStats:
    """``rows``: ledger rows of impressions, clicks and conversions (the billing rows);
    ``duplicates_rejected``: re-sent ones of those; ``measured_rows``: render and
    viewable rows (measurement, never billed; their re-sends are counted apart, as
    ``duplicates_measured``)."""

    rows: int
    duplicates_rejected: int
    measured_rows: int = 0


#: an outcome's or event type's value (a plain str) by member or value: a dict lookup,
#: where ``.value`` costs an enum property call
PLAIN: dict[str, str] = {m.value: m.value for m in (*Outcome, *EventType)}
