"""Native imps: the Native Ads request inside ``imp.native.request`` (IAB Native Ads 1.x,
a separate spec), and the native response our bid carries as ``adm``.

**Request** (:func:`native_assets`): the assets asked for (id, required, and one of
``title`` (``len``), ``img`` (``type`` 1 icon / 3 main, ``w``/``h``), ``data``
(``type`` 1 sponsored / 2 description / 12 call to action, ``len``), ``video``).
Read leniently: a request text that is not JSON (or nests deeper than 64 levels), or
assets of an unknown shape, give no assets (the imp gets no bid, ``no_markup``), never
a refusal (nor a 500). The slot's size is the main image's ``w``×``h``
(:func:`native_size`); none: no slot (``no_size``).

**Response** (:func:`native_adm`): from the ad's native creative (title, body, sponsor,
call to action, image, icon), each asset by the id the request gave it, texts cut to
the asset's ``len``; ``link`` the click URL; the impression beacon in ``imptrackers``
and as an ``eventtrackers`` impression image. A required asset we cannot fill (a video,
an image the creative lacks): no markup (None). Wrapped in ``{"native": …}`` when the
request was (Native 1.0/1.1), bare otherwise (1.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from adfunnel.campaigns.creative import NativeCreative
from adfunnel.campaigns.model import Ad
from adfunnel.json_depth import nesting_problem
from adfunnel.tracking.notices import NoticeUrls

#: Native image asset types (Native 1.2 §7.4) and data asset types (§7.3) we fill.
ICON, MAIN = 1, 3
SPONSORED, DESC, CTATEXT = 1, 2, 12
#: Most assets read from one native request.
MAX_ASSETS = 32


@dataclass(frozen=True, slots=True)
class NativeAsset:
    """One asset the request asks for: ``kind`` ``title``, ``img``, ``data`` or
    ``other``; ``type`` the img/data type; ``length`` the most characters (0: any);
    ``w``/``h`` an image's exact size (0: not given)."""

    id: int
    required: bool
    kind: str
    type: int = 0
    length: int = 0
    w: int = 0
    h: int = 0


@dataclass(frozen=True, slots=True)
class NativeAsk:
    """A native request's assets, and whether it came wrapped in ``{"native": …}``."""

    assets: tuple[NativeAsset, ...]
    wrapped: bool


def native_assets(request_text: str) -> NativeAsk | None:
    """The assets of a Native Ads request (module doc); None when it cannot be read."""
    raw = request_text.encode()[:65_536]
    # a string inside the bid request: the body's depth check never saw its brackets
    if nesting_problem(raw) is not None:
        return None
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    wrapped = isinstance(doc, dict) and isinstance(doc.get("native"), dict)
    body = doc["native"] if wrapped else doc
    raw = body.get("assets") if isinstance(body, dict) else None
    if not isinstance(raw, list) or not raw or len(raw) > MAX_ASSETS:
        return None
    assets = [_asset(a) for a in raw]
    if any(a is None for a in assets):
        return None
    return NativeAsk(tuple(a for a in assets if a is not None), wrapped)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _asset(raw: Any) -> NativeAsset | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), int):
        return None
    required = raw.get("required") == 1
    for kind in ("title", "img", "data"):
        part = raw.get(kind)
        if isinstance(part, dict):
            return NativeAsset(raw["id"], required, kind, _int(part.get("type")),
                               _int(part.get("len")), _int(part.get("w")), _int(part.get("h")))
    return NativeAsset(raw["id"], required, "other")


def native_size(ask: NativeAsk) -> tuple[int, int] | None:
    """The main image's exact size, the slot's (None: not given)."""
    for a in ask.assets:
        if a.kind == "img" and a.type == MAIN and a.w and a.h:
            return a.w, a.h
    return None


def native_adm(ad: Ad, urls: NoticeUrls, ask: NativeAsk) -> str | None:
    """The native response (JSON text) of ``ad`` for ``ask``; None when the ad has no
    native creative or a required asset cannot be filled."""
    c = ad.creative
    if not isinstance(c, NativeCreative):
        return None
    out: list[dict[str, Any]] = []
    for a in ask.assets:
        filled = _fill(a, c)
        if filled is None:
            if a.required:
                return None
            continue
        out.append({"id": a.id, **filled})
    native = {"ver": "1.2", "assets": out, "link": {"url": urls.click},
              "imptrackers": [urls.impression],
              "eventtrackers": [{"event": 1, "method": 1, "url": urls.impression}]}
    return msgspec.json.encode({"native": native} if ask.wrapped else native).decode()


def _fill(a: NativeAsset, c: NativeCreative) -> dict[str, Any] | None:
    if a.kind == "title":
        return {"title": {"text": _cut(c.title, a.length)}}
    if a.kind == "img":
        url = c.image_url if a.type in (MAIN, 0) else c.icon_url if a.type == ICON else None
        return {"img": {"url": url}} if url else None
    if a.kind == "data":
        text = {SPONSORED: c.sponsor, DESC: c.body, CTATEXT: c.cta}.get(a.type)
        return {"data": {"value": _cut(text, a.length)}} if text else None
    return None


def _cut(text: str, length: int) -> str:
    return text[:length] if length else text
