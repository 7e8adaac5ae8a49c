"""The OpenRTB 2.6 ``BidResponse`` we answer (§3.3), and the no-bid reasons.

One seat (:data:`SEAT`), one bid per imp we bid on. ``price`` is CPM in ``cur`` (our
currency), a float only here (:func:`adfunnel.openrtb.pricing.spec_price`: rounded down).

No bid: 204 with no body; when the request asks for reasons (``?nbr=1`` on the URL, or
``"ext": {"adfunnel": {"nbr": true}}`` in the request), 200 with ``{"id", "nbr"}`` and
our reason per imp in ``ext.adfunnel.reasons``. ``nbr`` (§5.24 allows codes 500+ for a
party's own) is :data:`NBR_CODES` of the first imp's reason.
"""

from __future__ import annotations

import msgspec

#: Our seat id in every ``seatbid``.
SEAT = "adfunnel"
#: OpenRTB no-bid reason codes (§5.24) of our reasons: 0 Unknown Error for "no ad won";
#: 500+ our own.
NBR_CODES = {
    "no_fill": 0,
    "currency_not_accepted": 501,
    "unsupported_media": 502,
    "no_size": 503,
    "unknown_currency": 504,
    "below_floor": 505,
    "floor_too_high": 505,
    "too_many_imps": 506,
    "no_markup": 507,
    "too_many_blocks": 508,
    # 509 (``blocked``, a landing host in badv found after the auction) is retired: the
    # funnel judges such an ad by its landing host (never reuse the code)
    "not_secure": 510,
    "budget_exhausted": 511,
    "deals_only": 512,
    "direct_line": 513,
}


class Bid(msgspec.Struct, omit_defaults=True):
    id: str
    impid: str
    price: float
    adid: str
    crid: str
    w: int
    h: int
    adm: str
    nurl: str
    burl: str
    lurl: str
    adomain: list[str] = []
    cat: list[str] = []


class SeatBid(msgspec.Struct):
    seat: str
    bid: list[Bid]


class BidResponse(msgspec.Struct, omit_defaults=True):
    id: str
    seatbid: list[SeatBid] = []
    bidid: str | None = None
    cur: str | None = None
    nbr: int | None = None
    ext: dict[str, object] | None = None


encode = msgspec.json.Encoder().encode


def bid_response(request_id: str, bids: list[Bid], currency: str, bidid: str) -> bytes:
    """The JSON of a response with ``bids`` (at least one)."""
    return encode(BidResponse(id=request_id, seatbid=[SeatBid(SEAT, bids)], bidid=bidid,
                              cur=currency))


def no_bid_response(request_id: str, reasons: dict[str, str]) -> bytes:
    """The JSON of a no-bid answer with reasons (imp id -> our reason)."""
    first = next(iter(reasons.values()), "no_fill")
    return encode(BidResponse(id=request_id, nbr=NBR_CODES.get(first, 0),
                              ext={"adfunnel": {"reasons": reasons}}))
