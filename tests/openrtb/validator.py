"""Our own check of a ``BidResponse`` against the OpenRTB 2.6 object model (§3.3) and the
request it answers. Independent of the code under test: it reads the JSON as plain data.

:func:`response_problems` lists every problem (empty: well formed):

- ``BidResponse``: ``id`` a string equal to the request's; ``seatbid`` an array of
  objects; ``cur`` a 3-capital code among the request's ``cur`` (when given); ``bidid``
  a string; ``nbr`` an integer, only without bids;
- ``SeatBid``: ``bid`` a non-empty array, ``seat`` a string;
- ``Bid``: ``id``, ``impid`` strings, ``price`` a finite number > 0; ids unique; ``impid``
  of an imp of the request, at most one bid per imp; ``price`` ≥ that imp's
  ``bidfloor`` (when in the response's currency); ``w``/``h`` positive integers that fit
  the imp's banner (``w``×``h`` or a ``format`` entry); ``adid``, ``crid``, ``adm``,
  ``nurl``, ``burl``, ``lurl`` strings; ``adomain``, ``cat`` arrays of strings;
  ``nurl``/``burl`` carry ``${AUCTION_PRICE}``; on a native imp (no banner), ``adm``
  a Native Ads response (JSON with ``assets`` and ``link``) instead of a size;
- blocks: no ``cat`` of a bid is a blocked category (``bcat``) or one of its
  subcategories (``IAB7`` blocks ``IAB7-39``); no ``adomain`` is a blocked domain
  (``badv``) or one of its sub-domains.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_CURRENCY = re.compile(r"[A-Z]{3}")
_STRINGS = ("adid", "crid", "adm", "nurl", "burl", "lurl")


def response_problems(response: Any, request: dict[str, Any]) -> list[str]:
    """Every way ``response`` (decoded JSON) breaks the 2.6 object model for ``request``."""
    if not isinstance(response, dict):
        return ["response: not an object"]
    out: list[str] = []
    if response.get("id") != request.get("id") or not isinstance(response.get("id"), str):
        out.append("id: not the request's id")
    cur = response.get("cur", "USD")
    if not isinstance(cur, str) or not _CURRENCY.fullmatch(cur):
        out.append(f"cur: not an ISO 4217 code: {cur!r}")
    elif request.get("cur") and cur not in request["cur"]:
        out.append(f"cur: {cur} not among the request's {request['cur']}")
    if "bidid" in response and not isinstance(response["bidid"], str):
        out.append("bidid: not a string")
    seatbids = response.get("seatbid", [])
    if not isinstance(seatbids, list):
        return [*out, "seatbid: not an array"]
    if "nbr" in response and (not isinstance(response["nbr"], int) or seatbids):
        out.append("nbr: not an integer, or given with bids")
    imps = {imp["id"]: imp for imp in request.get("imp", [])}
    seen_bids: set[str] = set()
    seen_imps: set[str] = set()
    for s, seat in enumerate(seatbids):
        where = f"seatbid[{s}]"
        if not isinstance(seat, dict) or not isinstance(seat.get("bid"), list) or not seat["bid"]:
            out.append(f"{where}.bid: not a non-empty array")
            continue
        if "seat" in seat and not isinstance(seat["seat"], str):
            out.append(f"{where}.seat: not a string")
        for b, bid in enumerate(seat["bid"]):
            out += _bid_problems(f"{where}.bid[{b}]", bid, imps, cur, seen_bids, seen_imps,
                                 request)
    return out


def _blocked(value: str, blocked: list[str], sep: str) -> bool:
    """``value`` is a blocked entry or below one (``sep``: ``-`` for categories, whose
    parent is the prefix before it; ``.`` for domains, whose parent is the suffix)."""
    value = value.lower()
    for b in (x.strip().lower() for x in blocked):
        if value == b or (sep == "-" and value.startswith(b + "-")) or (
                sep == "." and value.endswith("." + b)):
            return True
    return False


def _block_problems(where: str, bid: dict[str, Any], request: dict[str, Any]) -> list[str]:
    out = [f"{where}.cat: {c} is blocked by bcat" for c in bid.get("cat", [])
           if isinstance(c, str) and _blocked(c, request.get("bcat", []), "-")]
    out += [f"{where}.adomain: {d} is blocked by badv" for d in bid.get("adomain", [])
            if isinstance(d, str) and _blocked(d, request.get("badv", []), ".")]
    return out


def _bid_problems(where: str, bid: Any, imps: dict[str, Any], cur: str,
                  seen_bids: set[str], seen_imps: set[str],
                  request: dict[str, Any]) -> list[str]:
    if not isinstance(bid, dict):
        return [f"{where}: not an object"]
    out: list[str] = []
    for name in ("id", "impid"):
        if not isinstance(bid.get(name), str) or not bid[name]:
            out.append(f"{where}.{name}: required string")
    if bid.get("id") in seen_bids:
        out.append(f"{where}.id: duplicate bid id")
    seen_bids.add(bid.get("id"))
    price = bid.get("price")
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(
            price) or price <= 0:
        out.append(f"{where}.price: required positive number, got {price!r}")
        price = None
    imp = imps.get(bid.get("impid"))
    if imp is None:
        return [*out, f"{where}.impid: no such imp"]
    if bid["impid"] in seen_imps:
        out.append(f"{where}.impid: a second bid for one imp")
    seen_imps.add(bid["impid"])
    floor = imp.get("bidfloor", 0)
    if price is not None and imp.get("bidfloorcur", "USD") == cur and price < floor:
        out.append(f"{where}.price: {price} under the imp's bidfloor {floor}")
    out += _size_problems(where, bid, imp)
    for name in _STRINGS:
        if name in bid and not isinstance(bid[name], str):
            out.append(f"{where}.{name}: not a string")
    for name in ("adomain", "cat"):
        value = bid.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            out.append(f"{where}.{name}: not an array of strings")
    out += _block_problems(where, bid, request)
    for name in ("nurl", "burl"):
        if name in bid and "${AUCTION_PRICE}" not in bid[name]:
            out.append(f"{where}.{name}: without the ${{AUCTION_PRICE}} macro")
    return out


def _native_problems(where: str, bid: dict[str, Any]) -> list[str]:
    """A native bid's ``adm``: a Native Ads response (JSON, ``assets`` and ``link``)."""
    try:
        doc = json.loads(bid.get("adm", ""))
    except ValueError:
        return [f"{where}.adm: not a native response (JSON)"]
    native = doc.get("native", doc) if isinstance(doc, dict) else None
    if not isinstance(native, dict) or not isinstance(native.get("assets"), list) or (
            not isinstance(native.get("link"), dict)):
        return [f"{where}.adm: a native response needs assets and link"]
    return []


def _size_problems(where: str, bid: dict[str, Any], imp: dict[str, Any]) -> list[str]:
    if imp.get("banner") is None and isinstance(imp.get("native"), dict):
        return _native_problems(where, bid)
    w, h = bid.get("w"), bid.get("h")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (w, h)):
        return [f"{where}.w/h: positive integers required for a banner, got {w!r}x{h!r}"]
    banner = imp.get("banner")
    if not isinstance(banner, dict):
        return [f"{where}: a banner bid on an imp without a banner"]
    sizes = {(f.get("w"), f.get("h")) for f in banner.get("format", [])}
    sizes.add((banner.get("w"), banner.get("h")))
    if (w, h) not in sizes:
        return [f"{where}.w/h: {w}x{h} is none of the imp's sizes"]
    return []
