"""The OpenRTB 2.6 ``BidRequest`` subset we read (msgspec structs), and its validation.

Field names and meanings are the spec's (IAB Tech Lab, OpenRTB 2.6, §3.2). Unknown
fields are ignored, as the spec requires; ``ext`` objects are kept as raw values
(:data:`Ext`) and read only where we look (``user.ext.consent``, ``regs.ext.gdpr``,
``ext.adfunnel.nbr``), never validated, so a malformed ``ext`` is never a refusal.

Refused (:class:`BidRequestError`, answered 400 naming the field path, e.g.
``imp[1].id``): malformed JSON or not an object; a wrong type; a field the spec makes
required missing (``id``, ``imp`` with at least one imp, ``imp.id``, ``native.request``,
``video.mimes``, ``audio.mimes``, ``pmp.deals[].id``, ``metric.type`` and ``value``,
``schain``'s ``complete``, ``nodes``, ``ver`` and each node's ``asi`` and ``sid``; a
node's ``hp``, required too, is often left out by exchanges: not refused); a duplicate
or empty imp id; a negative size, floor, bitrate or ``tmax``; a 0/1 flag outside 0/1;
more than one of ``site``, ``app`` and ``dooh``; nesting too deep; more than :data:`MAX_IMPS` imps.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from adfunnel.json_depth import nesting_problem
from adfunnel.serving.request import msgspec_field

#: Most imps one request may carry (far above any exchange's: each imp is a slot).
MAX_IMPS = 100
#: ``ext`` and other free objects: read by hand where we look, never validated.
Ext = object
NonNeg = Annotated[int, msgspec.Meta(ge=0)]
Flag = Annotated[int, msgspec.Meta(ge=0, le=1)]
Money = Annotated[float, msgspec.Meta(ge=0)]
Currency = Annotated[str, msgspec.Meta(pattern=r"^[A-Z]{3}$")]
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class Format(msgspec.Struct):
    w: NonNeg | None = None
    h: NonNeg | None = None
    wratio: NonNeg | None = None
    hratio: NonNeg | None = None
    wmin: NonNeg | None = None


class Banner(msgspec.Struct):
    """Sizes in device-independent pixels."""

    w: NonNeg | None = None
    h: NonNeg | None = None
    format: list[Format] = []


class Native(msgspec.Struct):
    request: NonEmpty  # the Native Ads request, a JSON text (a separate IAB spec)
    ver: str | None = None


class Video(msgspec.Struct):
    mimes: Annotated[list[str], msgspec.Meta(min_length=1)]
    w: NonNeg | None = None
    h: NonNeg | None = None
    minduration: NonNeg | None = None
    maxduration: NonNeg | None = None
    minbitrate: NonNeg | None = None
    maxbitrate: NonNeg | None = None


class Audio(msgspec.Struct):
    mimes: Annotated[list[str], msgspec.Meta(min_length=1)]
    minbitrate: NonNeg | None = None
    maxbitrate: NonNeg | None = None
    maxseq: NonNeg | None = None
    sequence: NonNeg | None = None


class Deal(msgspec.Struct):
    id: NonEmpty
    bidfloor: Money = 0.0


class Pmp(msgspec.Struct):
    private_auction: Flag = 0
    deals: list[Deal] = []


class Metric(msgspec.Struct):
    type: NonEmpty
    value: Annotated[float, msgspec.Meta(ge=0, le=1)]


class Imp(msgspec.Struct):
    id: str
    banner: Banner | None = None
    native: Native | None = None
    video: Video | None = None
    audio: Audio | None = None
    pmp: Pmp | None = None
    metric: list[Metric] = []
    bidfloor: Money = 0.0  # CPM in ``bidfloorcur``
    bidfloorcur: Currency = "USD"
    tagid: str | None = None
    secure: Flag | None = None
    instl: Flag = 0


class Publisher(msgspec.Struct):
    id: str | None = None
    name: str | None = None
    domain: str | None = None


class Segment(msgspec.Struct):
    id: str | None = None
    name: str | None = None
    value: str | None = None


class Data(msgspec.Struct):
    """A data provider's segments of the user (§3.2.21)."""

    id: str | None = None
    name: str | None = None
    segment: list[Segment] = []


class Content(msgspec.Struct):
    """What the page or app shows (§3.2.16): its categories and keywords."""

    cat: list[str] = []
    keywords: str | None = None  # comma-separated
    kwarray: list[str] = []  # 2.6: the keywords as an array


class Site(msgspec.Struct):
    id: str | None = None
    domain: str | None = None
    page: str | None = None
    publisher: Publisher | None = None
    cat: list[str] = []  # IAB content categories of the site
    sectioncat: list[str] = []
    pagecat: list[str] = []
    keywords: str | None = None
    kwarray: list[str] = []
    content: Content | None = None


class App(msgspec.Struct):
    id: str | None = None
    domain: str | None = None
    bundle: str | None = None
    publisher: Publisher | None = None
    cat: list[str] = []
    sectioncat: list[str] = []
    pagecat: list[str] = []
    keywords: str | None = None
    kwarray: list[str] = []
    content: Content | None = None


class Geo(msgspec.Struct):
    country: str | None = None  # ISO-3166-1 alpha-3
    region: str | None = None  # ISO-3166-2 (the state code in the US)
    city: str | None = None
    accuracy: NonNeg | None = None


class Device(msgspec.Struct):
    ua: str | None = None
    ip: str | None = None
    ipv6: str | None = None
    geo: Geo | None = None
    os: str | None = None
    devicetype: NonNeg | None = None
    language: str | None = None
    w: NonNeg | None = None
    h: NonNeg | None = None
    ppi: NonNeg | None = None


class User(msgspec.Struct):
    id: str | None = None
    buyeruid: str | None = None
    geo: Geo | None = None
    consent: str | None = None  # the TCF consent string (2.6; earlier in ``ext.consent``)
    keywords: str | None = None  # comma-separated
    kwarray: list[str] = []
    data: list[Data] = []
    ext: Ext = None


class Regs(msgspec.Struct):
    coppa: Flag = 0
    gdpr: Flag | None = None  # 2.6; earlier in ``ext.gdpr``
    ext: Ext = None


class SupplyChainNode(msgspec.Struct, omit_defaults=True):
    asi: str
    sid: str
    hp: Flag | None = None  # required by the spec, often left out: kept, not refused
    rid: str | None = None
    name: str | None = None
    domain: str | None = None


class SupplyChain(msgspec.Struct):
    complete: Flag
    nodes: list[SupplyChainNode]
    ver: str


class Source(msgspec.Struct):
    tid: str | None = None
    schain: SupplyChain | None = None


class BidRequest(msgspec.Struct):
    id: str
    imp: Annotated[list[Imp], msgspec.Meta(min_length=1)]
    site: Site | None = None
    app: App | None = None
    dooh: Ext = None
    device: Device | None = None
    user: User | None = None
    regs: Regs | None = None
    source: Source | None = None
    tmax: NonNeg | None = None  # milliseconds
    at: Annotated[int, msgspec.Meta(ge=1)] = 2  # 1 first price, 2 second price
    cur: list[Currency] = []
    bcat: list[str] = []
    badv: list[str] = []
    bapp: list[str] = []
    test: Flag = 0
    ext: Ext = None


class BidRequestError(ValueError):
    """A bid request refused (400): ``fields`` is [(field path, problem), ...]."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {p}" for f, p in fields))
        self.fields = fields


_decoder = msgspec.json.Decoder(BidRequest)


def decode_bid_request(body: bytes) -> BidRequest:
    """Decode and validate a ``BidRequest`` body (module doc).

    Raises:
        BidRequestError: naming the first field at fault (a path such as ``imp[0].id``).
    """
    too_deep = nesting_problem(body)  # before msgspec recurses into it
    if too_deep is not None:
        raise BidRequestError([too_deep])
    try:
        req = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise BidRequestError([msgspec_field(str(exc))]) from None
    except msgspec.DecodeError as exc:
        raise BidRequestError([("body", f"malformed JSON: {exc}")]) from None
    problems = check(req)
    if problems:
        raise BidRequestError(problems)
    return req


def check(req: BidRequest) -> list[tuple[str, str]]:
    """The rules a schema cannot say: ids, one of site/app/dooh, the imp limit."""
    problems: list[tuple[str, str]] = []
    if not req.id:
        problems.append(("id", "must not be empty"))
    if len(req.imp) > MAX_IMPS:
        problems.append(("imp", f"more than {MAX_IMPS} imps"))
    seen: set[str] = set()
    for i, imp in enumerate(req.imp):
        if not imp.id:
            problems.append((f"imp[{i}].id", "must not be empty"))
        elif imp.id in seen:
            problems.append((f"imp[{i}].id", f"duplicate imp id {imp.id!r}"))
        seen.add(imp.id)
    given = [name for name in ("site", "app", "dooh") if getattr(req, name) is not None]
    if len(given) > 1:
        problems.append((given[1], f"no more than one of site, app and dooh (got {given})"))
    return problems
