"""A ``BidRequest`` as our ad request: one :class:`SelectRequest`, one slot per imp we can
fill. Pure (no clock, no I/O): the endpoint hands in what it knows (:class:`MappingConfig`).

- **Slots**: one per imp with a ``banner`` (format ``banner``), sized by the first of
  its sizes (``w``×``h``, then each ``format[]`` entry with both sides) that the
  catalogue holds ads of (``has_shape``), else the first; one per imp with only a
  ``native`` (format ``native``, sized by its main image asset: :mod:`.native`; an
  unreadable native request: ``no_markup``). An imp with only ``video`` or ``audio``
  gets no slot (no bid, ``unsupported_media``): we hold no such creatives; nor does one
  whose ``pmp.private_auction`` is 1 (``deals_only``: bids restricted to its deals). No size, or
  one over the select limit: no slot (``no_size``). Slot ids are
  the imp ids (``#<index>`` for one over 64 characters or starting with ``#``);
  positions run 1, 2, … over the imps that became slots, in request order; at most
  ``max_slots`` slots (the rest: ``too_many_imps``).
- **Placement**: the first of the imps' ``tagid``, the ``site.id``/``app.id``, the
  site's domain (``site.domain``, else the host of ``site.page``) or the app's
  ``bundle`` that the operator has configured as a placement (so its reserves, sizes,
  formats and first-price setting apply); none configured: the first of them given,
  else ``openrtb``. One placement per request (its imps share a decision).
- **Floors**: ``bidfloor`` (CPM in ``bidfloorcur``) in the deployment currency, micros,
  rounded UP (never bid under a floor): the slot's ``reserve_cpm_micros``. A currency
  neither ours nor in the rates table: no slot (``unknown_currency``). Our currency not
  among ``cur`` (when given): no bid at all (``currency_not_accepted``).
- **User**: ``user.id``, else ``user.buyeruid``: the frequency-cap key. ``regs.coppa=1``,
  or GDPR applying (``regs.gdpr``, else ``regs.ext.gdpr``) without a consent string
  (``user.consent``, else ``user.ext.consent``): no user key and no ``interests`` or
  ``audiences`` (the consent string is not decoded: any non-empty one counts).
- **Interests and audiences** (:mod:`.interests`, with consent only): ``user.data``
  segments → ``audiences``; ``user``, ``site``/``app`` and ``content`` keywords and
  categories → ``interests``.
- **Attributes**: ``geo.country`` (alpha-3 → our alpha-2), ``geo.region``
  (``CC-REGION``), ``geo.city`` from ``device.geo``, else ``user.geo``, else the country
  of ``device.ip``/``ipv6`` (``country_of``); ``device_type`` from ``devicetype``;
  ``os``, ``browser`` (and the device type, when not given) from ``device.ua``;
  ``os`` from ``device.os``; ``language`` from ``device.language``.
- **Blocks**: ``bcat``, ``badv``, ``bapp`` → ``blocked_categories``, ``blocked_domains``,
  ``blocked_apps`` (the funnel never serves an ad that declares a blocked one,
  :mod:`adfunnel.targeting.blocks`); a list over the funnel's limit: no bid at all
  (``too_many_blocks``).
- **Deadline**: ``tmax`` (default :data:`DEFAULT_TMAX_MS`) less the network margin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from urllib.parse import urlsplit

import pycountry

from adfunnel.money import MICROS_PER_UNIT
from adfunnel.openrtb.interests import interest_attributes
from adfunnel.openrtb.native import NativeAsk, native_assets, native_size
from adfunnel.openrtb.request import BidRequest, Geo, Imp
from adfunnel.serving.derived import OS_NAMES, user_agent_facts
from adfunnel.serving.request import (
    MAX_BLOCKED,
    MAX_BLOCKED_CHARS,
    MAX_DEADLINE_MS,
    MAX_ID_CHARS,
    MAX_RESERVE_CPM_MICROS,
    MAX_SLOT_PIXELS,
    ExchangeSelect,
    PlacementIn,
    SelectRequest,
    SlotIn,
    UserIn,
)

DEFAULT_TMAX_MS = 100
FALLBACK_PLACEMENT = "openrtb"
#: OpenRTB ``devicetype`` (AdCOM Device Types) → our ``device_type``.
DEVICE_TYPES = {1: "mobile", 2: "desktop", 3: "ctv", 4: "mobile", 5: "tablet", 6: "ctv",
                7: "ctv"}
#: Attributes a privacy-limited request never carries.
PERSONAL_ATTRIBUTES = ("interests", "audiences")
# No-bid reasons per imp (our words; the response's ``ext.adfunnel.reasons``).
UNSUPPORTED_MEDIA = "unsupported_media"
NO_SIZE = "no_size"
UNKNOWN_CURRENCY = "unknown_currency"
FLOOR_TOO_HIGH = "floor_too_high"
TOO_MANY_IMPS = "too_many_imps"
CURRENCY_NOT_ACCEPTED = "currency_not_accepted"
TOO_MANY_BLOCKS = "too_many_blocks"
NO_MARKUP = "no_markup"
DEALS_ONLY = "deals_only"


@dataclass(frozen=True, slots=True)
class MappingConfig:
    """What the mapping needs of the deployment.

    ``currency``: ours (ISO 4217); ``rates``: our units per 1 unit of another currency;
    ``has_placement``: whether the operator configured a placement id; ``country_of``:
    an address → ISO alpha-2 country (None: not derived); ``exchange``: the calling
    exchange's name (from its key), the ``exchange`` targeting attribute.
    """

    currency: str = "USD"
    rates: Mapping[str, Decimal] = field(default_factory=dict)
    max_slots: int = 10
    network_margin_ms: int = 10
    has_placement: Callable[[str], bool] = lambda _: False
    country_of: Callable[[str], str | None] | None = None
    exchange: str | None = None
    #: whether the catalogue holds ads of a shape (format, width, height): an imp's
    #: size is the first of its sizes that does (default: its first size)
    has_shape: Callable[[str, int, int], bool] = lambda *_: True


@dataclass(frozen=True, slots=True)
class ImpTerms:
    """One imp that became a slot: its index and id, floor and sizes."""

    index: int
    imp_id: str
    floor_micros: int  # CPM micros in our currency, rounded up
    sizes: tuple[tuple[int, int], ...]  # every size the imp allows (w, h)
    secure: bool = False  # the imp needs https markup and URLs (``imp.secure = 1``)
    #: a native imp's assets (None: a banner imp)
    native: NativeAsk | None = None

    @property
    def format(self) -> str:
        """The slot's format: ``native`` or ``banner``."""
        return "banner" if self.native is None else "native"


@dataclass(frozen=True, slots=True)
class Mapped:
    """The request as ours: ``select`` (None: no imp can get a bid), the slots' imps by
    slot id, each other imp's no-bid reason by imp id, and the auction type."""

    select: SelectRequest | None
    imps: dict[str, ImpTerms]
    no_bid: dict[str, str]
    first_price: bool
    deadline_ms: int


def map_request(req: BidRequest, config: MappingConfig) -> Mapped:
    """``req`` as our ad request (module doc)."""
    # tmax at or below the network margin leaves no time: 0, answered late (204) at once
    deadline = max(0, min((req.tmax or DEFAULT_TMAX_MS) - config.network_margin_ms,
                          MAX_DEADLINE_MS))
    first_price = req.at == 1
    refused = _refused(req, config)
    if refused is not None:
        return Mapped(None, {}, {imp.id: refused for imp in req.imp}, first_price, deadline)
    slots: list[SlotIn] = []
    imps: dict[str, ImpTerms] = {}
    no_bid: dict[str, str] = {}
    for i, imp in enumerate(req.imp):
        terms, reason = _imp_terms(i, imp, config)
        if terms is None or len(slots) >= config.max_slots:
            no_bid[imp.id] = reason or TOO_MANY_IMPS
            continue
        # "#<index>" for an id a slot cannot carry: no imp id kept as is starts with "#"
        slot_id = imp.id if len(imp.id) <= 64 and not imp.id.startswith("#") else f"#{i}"
        w, h = next((s for s in terms.sizes if config.has_shape(terms.format, *s)),
                    terms.sizes[0])
        slots.append(SlotIn(id=slot_id, position=len(slots) + 1, width=w, height=h,
                            format=terms.format,
                            reserve_cpm_micros=terms.floor_micros))
        imps[slot_id] = terms
    if not slots:
        return Mapped(None, {}, no_bid, first_price, deadline)
    placement = PlacementIn(id=_placement_id(req, [t.index for t in imps.values()], config),
                            exchange=config.exchange, domain=_domain(req))
    select = ExchangeSelect(user=_user(req, config), placement=placement, slots=slots,
                           deadline_ms=deadline, request_id=_short(req.id, 128),
                           blocked_categories=_block_list(req.bcat),
                           blocked_domains=_block_list(req.badv),
                           blocked_apps=_block_list(req.bapp))
    return Mapped(select, imps, no_bid, first_price, deadline)


def _refused(req: BidRequest, config: MappingConfig) -> str | None:
    """Why no imp of ``req`` can get a bid (None: each imp is judged on its own)."""
    if req.cur and config.currency not in req.cur:
        return CURRENCY_NOT_ACCEPTED
    if max(len(req.bcat), len(req.badv), len(req.bapp)) > MAX_BLOCKED:
        return TOO_MANY_BLOCKS  # never truncate a block list: bid on nothing instead
    return None


def _block_list(values: list[str]) -> list[str]:
    """A block list as the funnel takes it: blank entries and those longer than any
    category, domain or bundle an ad can declare are dropped (they block nothing)."""
    if not values:
        return []
    return [v for v in values if v.strip() and len(v) <= MAX_BLOCKED_CHARS]


def _imp_terms(index: int, imp: Imp, config: MappingConfig) -> tuple[ImpTerms | None, str]:
    """The imp's slot terms, or None and the reason it gets no bid."""
    if imp.pmp is not None and imp.pmp.private_auction == 1:
        return None, DEALS_ONLY  # bids restricted to its deals, and we bid in none
    native = None
    if imp.banner is not None:
        found = _sizes(imp)
    elif imp.native is not None:
        native = native_assets(imp.native.request)
        if native is None:
            return None, NO_MARKUP
        size = native_size(native)
        found = [size] if size else []
    else:
        return None, UNSUPPORTED_MEDIA
    sizes = tuple((w, h) for w, h in found if 0 < w <= MAX_SLOT_PIXELS
                  and 0 < h <= MAX_SLOT_PIXELS)
    if not sizes:
        return None, NO_SIZE
    floor = floor_micros(imp.bidfloor, imp.bidfloorcur, config.currency, config.rates)
    if floor is None:
        return None, UNKNOWN_CURRENCY
    if floor > MAX_RESERVE_CPM_MICROS:
        return None, FLOOR_TOO_HIGH
    return ImpTerms(index, imp.id, floor, sizes, secure=imp.secure == 1, native=native), ""


def _sizes(imp: Imp) -> list[tuple[int, int]]:
    banner = imp.banner
    assert banner is not None
    out = [(banner.w, banner.h)] if banner.w and banner.h else []
    out += [(f.w, f.h) for f in banner.format if f.w and f.h]
    return out


def floor_micros(bidfloor: float, currency: str, ours: str,
                 rates: Mapping[str, Decimal]) -> int | None:
    """A floor (CPM in ``currency``) as CPM micros in ``ours``, rounded up; None when
    ``currency`` is neither ours nor in ``rates``. The float is read as its shortest
    decimal text (``1.1`` is 1.1, not 1.100000000000000088…)."""
    if currency == ours:
        return _own_floor_micros(bidfloor)
    rate = rates.get(currency)
    if rate is None:
        return None
    amount = Decimal(repr(bidfloor)) * rate
    return int((amount * MICROS_PER_UNIT).to_integral_value(rounding=ROUND_CEILING))


@functools.lru_cache(maxsize=1024)
def _own_floor_micros(bidfloor: float) -> int:
    """A floor in our currency as micros, rounded up (:func:`floor_micros`): exchanges
    send a few distinct floors, so each is read as a decimal once, not once per imp."""
    amount = Decimal(repr(bidfloor))
    return int((amount * MICROS_PER_UNIT).to_integral_value(rounding=ROUND_CEILING))


def privacy_limited(req: BidRequest) -> bool:
    """COPPA applies, or GDPR applies without a consent string."""
    regs, user = req.regs, req.user
    if regs is not None and regs.coppa == 1:
        return True
    gdpr = regs.gdpr if regs is not None and regs.gdpr is not None else (
        _ext(regs.ext, "gdpr") if regs is not None else None)
    if gdpr != 1:
        return False
    consent = user.consent if user is not None and user.consent else (
        _ext(user.ext, "consent") if user is not None else None)
    return not (isinstance(consent, str) and consent)


def _ext(ext: object, key: str) -> object:
    return ext.get(key) if isinstance(ext, dict) else None


def _user(req: BidRequest, config: MappingConfig) -> UserIn:
    limited = privacy_limited(req)
    user = req.user
    key = None
    if user is not None and not limited:
        key = _short(user.id or user.buyeruid, MAX_ID_CHARS["user.key"])
    attrs = _attributes(req, config)
    if limited:
        for name in PERSONAL_ATTRIBUTES:
            attrs.pop(name, None)
    else:  # segments, keywords and categories: only with consent
        attrs.update(interest_attributes(req))
    return UserIn(key=key, attributes=attrs)


def _attributes(req: BidRequest, config: MappingConfig) -> dict[str, object]:
    attrs: dict[str, object] = {}
    device = req.device
    geo = (device.geo if device is not None else None) or (
        req.user.geo if req.user is not None else None)
    if geo is not None:
        attrs.update(_geo(geo))
    if "geo.country" not in attrs and device is not None and config.country_of is not None:
        ip = device.ip or device.ipv6
        country = config.country_of(ip) if ip else None
        if country:
            attrs["geo.country"] = country
    if device is None:
        return attrs
    if device.ua:
        attrs.update(p for p in user_agent_facts(device.ua[:1024]) if p[1])
    if device.devicetype in DEVICE_TYPES:
        attrs["device_type"] = DEVICE_TYPES[device.devicetype]
    if device.os:
        attrs["os"] = OS_NAMES.get(device.os, device.os.lower())
    if device.language:
        attrs["language"] = [device.language.lower()]
    return attrs


def _geo(geo: Geo) -> dict[str, object]:
    out: dict[str, object] = {}
    country = alpha2(geo.country) if geo.country else None
    if country:
        out["geo.country"] = country
        if geo.region:
            region = geo.region.upper()
            out["geo.region"] = region if "-" in region else f"{country}-{region}"
    if geo.city:
        out["geo.city"] = geo.city
    return out


@functools.lru_cache(maxsize=512)
def alpha2(code: str) -> str | None:
    """ISO 3166-1 alpha-3 (OpenRTB's) → alpha-2 (ours); an alpha-2 given is kept; None
    for an unknown code."""
    upper = code.strip().upper()
    if len(upper) == 3:
        found = pycountry.countries.get(alpha_3=upper)
    elif len(upper) == 2:
        found = pycountry.countries.get(alpha_2=upper)
    else:
        return None
    return found.alpha_2 if found is not None else None


def _site_names(req: BidRequest) -> list[str | None]:
    if req.site is not None:
        return [req.site.id, _domain(req)]
    if req.app is not None:
        return [req.app.id, req.app.bundle]
    return []


def _placement_id(req: BidRequest, indexes: list[int], config: MappingConfig) -> str:
    names = [req.imp[i].tagid for i in indexes] + _site_names(req)
    given = [n for n in names  # a NUL would reach the ledger, which PostgreSQL refuses
             if n and len(n) <= MAX_ID_CHARS["placement.id"] and "\x00" not in n]
    return next((n for n in given if config.has_placement(n)),
                given[0] if given else FALLBACK_PLACEMENT)


def _domain(req: BidRequest) -> str | None:
    domain = None
    if req.site is not None:
        domain = req.site.domain or _host(req.site.page)
    elif req.app is not None:
        domain = req.app.domain
    return _short(domain, MAX_ID_CHARS["placement.domain"])


def _host(page: str | None) -> str | None:
    if not page:
        return None
    try:
        return urlsplit(page if "//" in page else f"//{page}").hostname
    except ValueError:
        return None


def _short(text: str | None, limit: int) -> str | None:
    """``text`` when it is non-empty, at most ``limit`` characters and free of NUL, else
    None."""
    return text if text and len(text) <= limit and "\x00" not in text else None
