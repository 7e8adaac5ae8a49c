"""A log event as its ledger row: which event each billing type bills (CPM the impression,
CPC the click, CPA the conversion), the charge it carries (micros; a CPM price per
mille), and the campaign's local day it falls on.

Pure, apart from a one-entry cache of the last serve time converted. The aggregator
(:mod:`adfunnel.billing.aggregator`) makes one row per event it records.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from adfunnel.billing.model import EVENT_TYPES, EventType, LedgerEvent
from adfunnel.campaigns.model import BidType, Campaign
from adfunnel.campaigns.schedule import local_day
from adfunnel.events.model import Event


def bills_on(billing_type: str) -> EventType | None:
    """The event a billing type bills: CPM the impression, CPC the click, CPA the
    conversion (None for an unknown type)."""
    return _BILLS_ON.get(billing_type)


_BILLS_ON = {BidType.CPM.value: EventType.IMPRESSION, BidType.CPC.value: EventType.CLICK,
             BidType.CPA.value: EventType.CONVERSION}


def ledger_event(event: Event, campaign: Campaign) -> LedgerEvent:
    """The ledger row of ``event`` for ``campaign``: charged its price when it is the
    event its billing type bills (a CPM price per mille, exactly), else 0; its day is
    the campaign's local day of its serve (:func:`_day`). A loss carries the bid's expected cost: it
    settles the reservation (the ledger settles it once, :mod:`adfunnel.billing.batch`)."""
    event_type = EVENT_TYPES[event.event_type]  # a StrEnum member hashes as its value
    occurred = datetime.fromtimestamp(event.occurred_at, tz=UTC)
    served = _served(event.served_at)
    billing_type = event.billing_type
    billable = _BILLS_ON.get(billing_type) is event_type
    return LedgerEvent(
        impression_id=event.impression_id,
        event_type=event_type,
        campaign_id=event.campaign_id,
        ad_id=event.ad_id,
        placement=event.placement,
        billing_type=billing_type,
        charge_micros=event.price_micros if billable else 0,
        occurred_at=occurred,
        day=_day(event_type, occurred, served, campaign),
        served_at=served,
        # the billable event settles its serve's in-flight estimate, as does an OpenRTB
        # loss notice (the bid will never bill); others nothing
        expected_micros=event.expected_micros if billable or event_type is _LOSS else 0,
        charge_per_mille=billing_type == _CPM,
        attribution_window_s=(campaign.attribution_window_s
                              if event_type is EventType.CONVERSION else None),
        notice_micros=event.notice_micros if event_type in _NOTICES else None,
        loss_reason=event.loss_reason if event_type is _LOSS else None,
        billing_notice=event.billing_notice,
    )


_CPM = BidType.CPM.value
_LOSS = EventType.LOSS
_NOTICES = frozenset({EventType.WIN, EventType.LOSS})


def _day(event_type: EventType, occurred: datetime, served: datetime,
         campaign: Campaign) -> date:
    """The ledger day of an event: the campaign's local day of its serve, the budget day
    that admitted the serve and holds its cost in flight. Dated by its arrival, a beacon
    of 23:59 served after midnight billed the new day, whose budget the gate had just
    handed out afresh: the ledger absorbed the old day's serves as overspend and they
    went free. A conversion (days after its click, within its attribution window) is
    dated by its arrival, but into the flight when it arrives after the flight's last
    day for a serve inside it (its flight's money and goal count it)."""
    zone = campaign.time_zone
    served_day = local_day(served, zone)
    if event_type is not EventType.CONVERSION:
        return served_day
    day = local_day(occurred, zone)
    end = campaign.flight_end
    if end is not None and day > end >= served_day:
        return served_day
    return day


def _served(served_at: int) -> datetime:
    """``served_at`` (Unix seconds) as an aware UTC datetime; the last one is kept, as
    a batch's events were mostly served in the same second."""
    global _LAST_SERVED
    last = _LAST_SERVED  # one tuple: safe to share between aggregator threads
    if last[0] == served_at:
        return last[1]
    at = datetime.fromtimestamp(served_at, tz=UTC)
    _LAST_SERVED = (served_at, at)
    return at


_LAST_SERVED: tuple[int, datetime] = (-1, datetime.fromtimestamp(0, tz=UTC))
