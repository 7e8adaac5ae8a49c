"""The tracked event: what the tracker appends to the event log and the aggregator reads.

One :class:`Event` is one impression beacon, click or conversion postback that passed
the tracker's token check. It carries what the signed token vouched for (ids, placement,
price in the bid's unit, billing type, serve time, expected cost) plus what the tracker
saw (when, from which address, which user agent), so the aggregator never needs the
token again.

Wire form: a msgspec JSON object (field names as below). Readers ignore fields they do
not know and fill absent optional fields with their defaults, so a field added later
with a default is compatible both ways.
"""

from __future__ import annotations

import math
import re
import threading
from enum import StrEnum
from typing import Annotated

import msgspec

from adfunnel.clock import LATEST_INSTANT

#: Billing types an event may carry (the token's).
BILLING_TYPES = frozenset({"CPM", "CPC", "CPA"})
#: Longest impression id or click id (the ledger column is 64 characters).
MAX_ID_CHARS = 64
#: Longest placement name (the ledger column is 200 characters).
MAX_PLACEMENT_CHARS = 200
#: Longest client address kept (an IPv6 text with a zone fits easily).
MAX_CLIENT_IP_CHARS = 64
#: Longest user agent kept; the tracker truncates longer ones before building an event.
MAX_USER_AGENT_CHARS = 1_024

_INT64_MAX = 2**63 - 1
#: Latest Unix second an event's times may name: the domain's latest instant. A time
#: past any calendar date (year > 9999) once decoded, and the aggregator, unable to
#: date it, retried its batch for ever, blocking every event behind it.
MAX_UNIX_S = int(LATEST_INSTANT.timestamp())
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_REASON = re.compile(r"[a-z0-9_]{1,32}")

# The same domains as msgspec constraints, checked in C while decoding (``\Z``, not
# ``$``: msgspec searches, and ``$`` would let a trailing newline through); an event
# built in Python is checked by ``Event.__post_init__`` instead.
_Id = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z")]
_Int64 = Annotated[int, msgspec.Meta(ge=0, le=_INT64_MAX)]
_BillingType = Annotated[str, msgspec.Meta(pattern=r"^(?:CPM|CPC|CPA)\Z")]
_Placement = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PLACEMENT_CHARS)]
_Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_UNIX_S)]  # finite, datable
_UnixS = Annotated[int, msgspec.Meta(ge=0, le=MAX_UNIX_S)]
_ClientIp = Annotated[str, msgspec.Meta(max_length=MAX_CLIENT_IP_CHARS)]
_UserAgent = Annotated[str, msgspec.Meta(max_length=MAX_USER_AGENT_CHARS)]
_Reason = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_]{1,32}\Z")]


class _Decoding(threading.local):
    """Set on a thread while :func:`decode` runs: the decoder has checked every field's
    domain already, so ``Event.__post_init__`` need not check it again."""

    active = False


_DECODING = _Decoding()


class EventType(StrEnum):
    """What happened. Values equal ``adfunnel.billing.model.EventType`` where both exist.

    ``render`` (``/i``: the ad was rendered in the page) and ``viewable`` (``/vi``: it met
    the MRC viewable standard) are measurement: recorded once, never billed. The
    ``impression`` is the billed one, appended beside the campaign's billable event.
    ``win`` and ``loss`` are an exchange's OpenRTB win and loss notices
    (:mod:`adfunnel.tracking.notice_desk`): measurement too, never billed; a loss
    settles its bid's in-flight expected cost.
    """

    IMPRESSION = "impression"
    CLICK = "click"
    CONVERSION = "conversion"
    RENDER = "render"
    VIEWABLE = "viewable"
    WIN = "win"
    LOSS = "loss"


class MalformedEvent(ValueError):
    """Bytes that are not an encoded :class:`Event` (bad JSON, a missing or mistyped
    field, or a value outside its domain). The message says which, without the bytes."""


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One tracked event; immutable.

    Fields:
        event_type: impression, click, conversion, render, viewable, win or loss.
        impression_id: the served impression (token), 1-64 of ``[A-Za-z0-9_-]``.
        campaign_id, ad_id: ids from the token, ints in [0, 2**63 - 1].
        placement: the token's placement, 1-200 characters.
        price_micros: the auction price in the bid's unit, integer micros (per mille
            for CPM, per click for CPC, per conversion for CPA), as the token carries it.
        billing_type: ``CPM``, ``CPC`` or ``CPA``.
        served_at: the token's issue time, Unix seconds (int, ≤ :data:`MAX_UNIX_S`).
        expected_micros: the serve's expected cost the budget counted (token v3), or
            None for older tokens.
        occurred_at: when the tracker received it, Unix seconds (float,
            ≤ :data:`MAX_UNIX_S`) from the tracker's injected clock.
        client_ip: the client address as the tracker resolved it (text, ≤ 64 chars;
            not parsed here).
        user_agent: the request's User-Agent (≤ 1,024 chars; may be empty).
        conversion_value_micros: a conversion's reported value in micros, if any.
        click_id: the click a conversion is attributed to (≤ 64 of
            ``[A-Za-z0-9_-]``), if any.
        ivt_reason: the tier-1 invalid-traffic reason code the tracker found
            (:class:`adfunnel.ivt.reasons.Reason`), or None for a valid event. An
            invalid event is logged all the same, so IVT is counted by reason exactly
            once, and never billed.
        tracked_ns: wall-clock nanoseconds when the tracker appended it (not a domain
            time: only the beacon-to-ledger lag is measured from it), or None.
        notice_micros: the price an exchange's OpenRTB notice named, CPM micros
            (rounded down): a win's or a billed notice's clearing price, a loss's
            minimum bid to win (None: the loss named none; other events).
        loss_reason: a loss notice's OpenRTB loss reason code (OpenRTB 2.6 §5.25;
            None: not given), else None.
        billing_notice: True for the impression of an exchange's OpenRTB billing notice
            (``/rtb/bill``): the aggregator counts what the ledger did with it
            (:mod:`adfunnel.tracking.notice_desk`). Left out of the wire while False.

    Invariant: :attr:`msg_id` = ``f"{impression_id}:{event_type}"`` (with ``:ivt``
    appended for invalid traffic) is the log's dedupe key and matches the ledger's
    unique (impression id, event type) of valid events: a flagged event does not use
    up the slot of a valid one that comes after it.

    Field domains are checked twice over, alike: by msgspec's decoder (the annotated
    constraints, in C) in :func:`decode`, by ``__post_init__`` for an event built in
    Python. Its fields are scalars, so it is left out of the cyclic GC (``gc=False``).

    Raises:
        ValueError: on construction (and :class:`MalformedEvent` from :func:`decode`)
            for a field outside its domain.
    """

    event_type: EventType
    impression_id: _Id
    campaign_id: _Int64
    ad_id: _Int64
    placement: _Placement
    price_micros: _Int64
    billing_type: _BillingType
    served_at: _UnixS
    occurred_at: _Seconds
    client_ip: _ClientIp
    user_agent: _UserAgent
    expected_micros: _Int64 | None = None
    conversion_value_micros: _Int64 | None = None
    click_id: _Id | None = None
    ivt_reason: _Reason | None = None
    tracked_ns: _Int64 | None = None
    notice_micros: _Int64 | None = None
    loss_reason: _Int64 | None = None
    billing_notice: bool = False

    def __post_init__(self) -> None:
        if _DECODING.active:  # the decoder checked the same constraints
            return
        if not _ID.fullmatch(self.impression_id):
            raise ValueError(
                f"impression_id: 1-64 of [A-Za-z0-9_-], got {self.impression_id!r:.80}"
            )
        if (type(self.served_at) is int
                and not 0 <= self.served_at <= MAX_UNIX_S):  # checked as int64 below
            raise ValueError(f"served_at: Unix seconds in [0, {MAX_UNIX_S}]")
        ints = (self.campaign_id, self.ad_id, self.price_micros, self.served_at)
        optional = (self.expected_micros, self.conversion_value_micros, self.tracked_ns,
                    self.notice_micros, self.loss_reason)
        if not (all(type(v) is int and 0 <= v <= _INT64_MAX for v in ints)  # not bool
                and all(v is None or (type(v) is int and 0 <= v <= _INT64_MAX)
                        for v in optional)):
            for name in ("campaign_id", "ad_id", "price_micros", "served_at"):
                _check_int64(name, getattr(self, name))
            for name in ("expected_micros", "conversion_value_micros", "tracked_ns",
                         "notice_micros", "loss_reason"):
                value = getattr(self, name)
                if value is not None:
                    _check_int64(name, value)
        if type(self.billing_notice) is not bool:
            raise ValueError(f"billing_notice: a bool, got {self.billing_notice!r:.20}")
        if self.billing_type not in BILLING_TYPES:
            raise ValueError(f"billing_type: CPM, CPC or CPA, got {self.billing_type!r:.20}")
        if not self.placement or len(self.placement) > MAX_PLACEMENT_CHARS:
            raise ValueError(f"placement: 1-{MAX_PLACEMENT_CHARS} characters")
        if isinstance(self.occurred_at, bool) or not (
            isinstance(self.occurred_at, int | float)
            and math.isfinite(self.occurred_at)
            and 0 <= self.occurred_at <= MAX_UNIX_S
        ):
            raise ValueError(
                f"occurred_at: Unix seconds in [0, {MAX_UNIX_S}], got {self.occurred_at!r}")
        if len(self.client_ip) > MAX_CLIENT_IP_CHARS:
            raise ValueError(f"client_ip: at most {MAX_CLIENT_IP_CHARS} characters")
        if len(self.user_agent) > MAX_USER_AGENT_CHARS:
            raise ValueError(f"user_agent: at most {MAX_USER_AGENT_CHARS} characters")
        if self.ivt_reason is not None and not _REASON.fullmatch(self.ivt_reason):
            raise ValueError(f"ivt_reason: 1-32 of [a-z0-9_], got {self.ivt_reason!r:.40}")
        if self.click_id is not None and not _ID.fullmatch(self.click_id):
            raise ValueError(f"click_id: 1-64 of [A-Za-z0-9_-], got {self.click_id!r:.80}")

    @property
    def msg_id(self) -> str:
        """The log's dedupe key: ``"<impression_id>:<event_type>"``, and
        ``"<impression_id>:<event_type>:ivt"`` for invalid traffic (a bot's fetch of a
        beacon must not make the log drop the viewer's own)."""
        if self.ivt_reason is not None:
            return f"{self.impression_id}:{self.event_type.value}:ivt"
        return f"{self.impression_id}:{self.event_type.value}"


def _check_int64(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT64_MAX:
        raise ValueError(f"{name}: an int in [0, 2**63 - 1], got {value!r:.40}")


def partition_of(campaign_id: int, partitions: int) -> int:
    """The partition of a campaign's events: ``campaign_id mod partitions``.

    Stable for a given partition count, so one campaign's events stay in order on one
    partition; campaign ids are dense, so partitions fill evenly.

    Raises:
        ValueError: ``partitions`` < 1 or ``campaign_id`` < 0.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if campaign_id < 0:
        raise ValueError(f"campaign_id must be >= 0, got {campaign_id}")
    return campaign_id % partitions


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Event)


def encode(event: Event) -> bytes:
    """The wire bytes of ``event``: compact UTF-8 JSON (about 250-400 bytes), optional
    fields left out while None."""
    return _ENCODER.encode(event)


def decode(data: bytes | bytearray | memoryview) -> Event:
    """The event encoded in ``data``.

    Raises:
        MalformedEvent: ``data`` is not valid JSON, lacks a required field, has a field
            of the wrong type, or a value outside its domain.
    """
    _DECODING.active = True
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise MalformedEvent(f"not an encoded event: {exc}") from None
    finally:
        _DECODING.active = False
