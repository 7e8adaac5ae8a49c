"""The ad request and response on the wire (msgspec structs: the hot path decodes fast).

Request::

    {"request_id": "optional", "deadline_ms": 100, "explain": false,
     "user": {"key": "u1", "attributes": {"geo.country": "US", "interests": ["a", "b"]}},
     "placement": {"id": "feed-top", "exchange": "x", "domain": "d", "reserve_cpm_micros": 0},
     "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250, "format": "banner"}]}

``reserve_cpm_micros`` is the reserve price per thousand impressions (a slot's own
reserve overrides the placement's). Attribute values are strings or lists of strings.
Optional block lists (OpenRTB ``bcat``/``badv``/``bapp``): ``blocked_categories`` (IAB
content taxonomy ids; one blocks its subcategories), ``blocked_domains`` (advertiser
domains; one blocks its sub-domains) and ``blocked_apps`` (bundle ids); an ad that
declares a blocked one is not served (reason ``blocked``, :mod:`adfunnel.targeting.blocks`).
"""

from __future__ import annotations

import re

import msgspec

from adfunnel.json_depth import nesting_problem
from adfunnel.targeting.attributes import ATTRIBUTES, normalise_value, normalise_values

#: Default of the most slots one request may carry (the ``max_slots`` setting).
MAX_SLOTS = 10
#: Slot positions run 1..max(this, 10 × the slot limit).
MIN_MAX_POSITION = 30
#: Attributes the server derives from the placement and slots, not from the user.
DERIVED = frozenset({"placement", "slot_size", "exchange", "domain"})


class RequestError(ValueError):
    """A request that cannot be served; ``fields`` is [(field, problem), ...]."""

    def __init__(self, fields: list[tuple[str, str]], status: int = 422) -> None:
        super().__init__("; ".join(f"{f}: {p}" for f, p in fields))
        self.fields = fields
        self.status = status


class UserIn(msgspec.Struct, forbid_unknown_fields=True):
    key: str | None = None  # without it no ad with a frequency cap is served
    attributes: dict[str, object] = {}  # checked by _check_attributes, naming the attribute


class PlacementIn(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    exchange: str | None = None
    domain: str | None = None
    reserve_cpm_micros: int = 0


class SlotIn(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    position: int
    width: int
    height: int
    format: str = "banner"
    visibility: str | None = None
    reserve_cpm_micros: int | None = None


class SelectRequest(msgspec.Struct, forbid_unknown_fields=True):
    user: UserIn
    placement: PlacementIn
    slots: list[SlotIn]
    deadline_ms: int | None = None
    request_id: str | None = None
    explain: bool = False
    blocked_categories: list[str] = []
    blocked_domains: list[str] = []
    blocked_apps: list[str] = []


class ExchangeSelect(SelectRequest):
    """An exchange's request (OpenRTB, :mod:`adfunnel.openrtb.mapping`), decided on the
    same funnel without the direct lines (reason ``direct_line``): made by the mapping
    only, never decoded from a client's JSON, so no caller can ask for it."""


class AdOut(msgspec.Struct):
    slot_id: str
    ad_id: int
    campaign_id: int
    creative_ref: str
    format: str
    width: int
    height: int
    price_micros: int
    billing_type: str
    token: str
    #: fire when the ad is rendered in the page (``/i``)
    impression_url: str
    click_url: str
    #: fire when the ad meets the MRC viewable standard (``/vi``); which of the two bills
    #: is the campaign's ``billable_event``, carried in the token
    viewable_url: str
    house: bool = False  # the placement's house ad: price 0, never billed


class RejectionOut(msgspec.Struct, omit_defaults=True):
    ad_id: int
    campaign_id: int
    reason: str
    detail: str | None = None


class SelectResponse(msgspec.Struct, omit_defaults=True):
    request_id: str
    ads: list[AdOut]
    index_version: int
    fallback: bool = False
    late: bool = False
    rejections: list[RejectionOut] | None = None
    #: explain requests: the tier that filled each slot (slot id -> ``sponsorship``,
    #: ``guaranteed``, ``auction`` or ``house``)
    tiers: dict[str, str] | None = None
    #: explain requests: per first-price slot run, whether and with which win curve
    #: automatic bids were shaded (``no shading release: automatic bids unshaded``)
    shading: list[str] | None = None


_decoder = msgspec.json.Decoder(SelectRequest)
encode = msgspec.json.Encoder().encode


def decode_request(body: bytes, max_slots: int = MAX_SLOTS) -> SelectRequest:
    """Decode and validate a request body (at most ``max_slots`` slots).

    Raises:
        RequestError: malformed JSON (400) or a field that breaks the schema (422),
            naming the field; a document nested too deep for the decoder (422).
    """
    too_deep = nesting_problem(body)  # before msgspec recurses into it
    if too_deep is not None:
        raise RequestError([too_deep])
    try:
        req = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        field, problem = msgspec_field(str(exc))
        raise RequestError([(field, problem)]) from None
    except msgspec.DecodeError as exc:
        raise RequestError([("body", f"malformed JSON: {exc}")], status=400) from None
    problems = _check(req, max_slots)
    if problems:
        raise RequestError(problems)
    return req


def msgspec_field(message: str) -> tuple[str, str]:
    """(field path, problem) of a msgspec validation message: "Expected `int`, got `str`
    - at `$.slots[0].width`" → ("slots[0].width", "Expected `int`, got `str`"); "Object
    missing required field `x`" (at the root) → ("x", ...); no path → "body"."""
    problem, sep, where = message.rpartition(" - at `")
    if not sep:
        problem, where = message, "$"
    path = where.rstrip("`").removeprefix("$").removeprefix(".")
    named = _FIELD_IN_MESSAGE.search(problem)
    if named is not None:
        path = f"{path}.{named.group(1)}" if path else named.group(1)
    return path or "body", problem


_FIELD_IN_MESSAGE = re.compile(r"(?:unknown|required) field `([^`]+)`")


#: Upper bounds of request fields (a request beyond them is refused, never truncated).
MAX_DEADLINE_MS = 10_000
MAX_SLOT_PIXELS = 10_000
MAX_RESERVE_CPM_MICROS = 10**12
MAX_ID_CHARS = {"request_id": 128, "user.key": 256, "placement.id": 200, "placement.exchange":
                200, "placement.domain": 200}
MAX_VALUES = 1_000
#: Most entries of one block list, and the longest entry (OpenRTB sends a few hundred).
MAX_BLOCKED = 2_000
MAX_BLOCKED_CHARS = 256


def _check(req: SelectRequest, max_slots: int) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if not 1 <= len(req.slots) <= max_slots:
        problems.append(("slots", f"must hold 1 to {max_slots} slots, got {len(req.slots)}"))
    max_position = max(MIN_MAX_POSITION, 10 * max_slots)
    if len({s.id for s in req.slots}) != len(req.slots):
        problems.append(("slots", "slot ids must be unique"))
    for i, s in enumerate(req.slots):
        if not 0 < s.width <= MAX_SLOT_PIXELS or not 0 < s.height <= MAX_SLOT_PIXELS:
            problems.append((f"slots[{i}]", f"width and height must be in 1..{MAX_SLOT_PIXELS}"))
        if s.position < 1 or s.position > max_position:
            problems.append((f"slots[{i}].position", f"must be in 1..{max_position}"))
        if not s.id or len(s.id) > 64:
            problems.append((f"slots[{i}].id", "must be 1 to 64 characters"))
        if s.reserve_cpm_micros is not None:
            problems += _reserve_problem(f"slots[{i}].reserve_cpm_micros", s.reserve_cpm_micros)
    if req.deadline_ms is not None and not 0 < req.deadline_ms <= MAX_DEADLINE_MS:
        problems.append(("deadline_ms", f"must be > 0 and <= {MAX_DEADLINE_MS}"))
    problems += _reserve_problem("placement.reserve_cpm_micros", req.placement.reserve_cpm_micros)
    texts = {"request_id": req.request_id, "user.key": req.user.key,
             "placement.id": req.placement.id, "placement.exchange": req.placement.exchange,
             "placement.domain": req.placement.domain}
    for name, value in texts.items():
        if value is None:
            continue
        if not value and name in ("user.key", "placement.id"):
            problems.append((name, "must not be empty"))
        elif len(value) > MAX_ID_CHARS[name]:
            problems.append((name, f"longer than {MAX_ID_CHARS[name]} characters"))
        elif "\x00" in value:  # the placement reaches the ledger; PostgreSQL refuses NUL
            problems.append((name, "must not contain NUL characters"))
    problems += _check_attributes(req.user.attributes)
    for name in ("blocked_categories", "blocked_domains", "blocked_apps"):
        problems += _block_list_problems(name, getattr(req, name))
    return problems


def _block_list_problems(name: str, values: list[str]) -> list[tuple[str, str]]:
    if len(values) > MAX_BLOCKED:
        return [(name, f"more than {MAX_BLOCKED} entries")]
    for i, value in enumerate(values):  # msgspec has checked they are strings
        if not value.strip() or len(value) > MAX_BLOCKED_CHARS:
            return [(f"{name}[{i}]", f"must be 1 to {MAX_BLOCKED_CHARS} characters, "
                                     "not blank")]
    return []


def _reserve_problem(field: str, value: int) -> list[tuple[str, str]]:
    if not 0 <= value <= MAX_RESERVE_CPM_MICROS:
        return [(field, f"must be an integer in 0..{MAX_RESERVE_CPM_MICROS} micros")]
    return []


def _check_attributes(attributes: dict[str, object]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for name, value in attributes.items():
        where = f"user.attributes.{name}"
        if name not in ATTRIBUTES or name in DERIVED:
            problems.append((where, "unknown attribute"))
        elif isinstance(value, str):
            if not value:
                problems.append((where, "must not be empty"))
        elif isinstance(value, list):
            if len(value) > MAX_VALUES:
                problems.append((where, f"more than {MAX_VALUES} values"))
            elif not all(isinstance(v, str) and v for v in value):
                problems.append((where, "values must be non-empty strings"))
        else:
            problems.append((where, "must be a string or a list of strings"))
    return problems


def request_attributes(req: SelectRequest) -> dict[str, frozenset[str]]:
    """The targeting view of a request: user attributes plus placement and slot facts.

    Values are case-normalised per attribute (``VALUE_CASE``), as the campaign side is.
    """
    attrs: dict[str, frozenset[str]] = {}
    for name, value in req.user.attributes.items():
        vals = frozenset(value) if isinstance(value, list) else frozenset((str(value),))
        if vals:
            attrs[name] = normalise_values(name, vals)
    attrs["placement"] = frozenset((req.placement.id,))
    attrs["slot_size"] = frozenset(f"{s.width}x{s.height}" for s in req.slots)
    if req.placement.exchange:
        attrs["exchange"] = frozenset((req.placement.exchange,))
    if req.placement.domain:
        attrs["domain"] = frozenset((normalise_value("domain", req.placement.domain),))
    return attrs
