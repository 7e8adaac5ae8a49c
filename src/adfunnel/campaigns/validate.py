"""Validation of campaign-side records: the domain rules every stored record obeys.

Money is non-negative integer micros, bids are positive, a known IANA time zone,
``flight_end >= flight_start``, hours in range, frequency caps that are either a counter
or a cooldown, a priority, goal and budget period that fit together
(:mod:`adfunnel.campaigns.sales`; a campaign's problems are reported at once), http(s)
landing URLs (:mod:`adfunnel.campaigns.landing`), positive ad sizes, bounded ad
quality, placement reserves and ISO 3166-1 country codes. A broken rule raises
:class:`~adfunnel.campaigns.errors.InvalidChange` naming the field. Targeting is not
parsed here: callers pass the canonical text (``adfunnel.targeting.dump_expr``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

import pycountry

from adfunnel.campaigns import codec
from adfunnel.campaigns.bidding_terms import strategy_problems
from adfunnel.campaigns.creative import check_creative
from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.landing import landing_url_problem
from adfunnel.campaigns.model import (
    MAX_COOLDOWN_S,
    Ad,
    Advertiser,
    AuctionType,
    Campaign,
    CapLevel,
    CapWindow,
    FrequencyCap,
    HouseAd,
    ModelRelease,
    Placement,
)
from adfunnel.campaigns.sales import sale_problems
from adfunnel.campaigns.schedule import is_valid_zone
from adfunnel.targeting.blocks import (
    MAX_CATEGORIES,
    MAX_DOMAINS,
    BlockValueError,
    normalise_bundle,
    normalise_category,
    normalise_domain,
    normalise_list,
)

#: Largest |quality| of an ad, micros per impression (1,000 units of money).
MAX_QUALITY_MICROS = 10**9
#: Longest web origin a placement may allow (a DNS name is at most 253 characters).
MAX_ORIGIN_CHARS = 300
#: Largest reserve, micros per mille (the bound ad requests have too).
MAX_RESERVE_CPM_MICROS = 10**12
#: A placement id: what ad requests send as ``placement.id``, safe in a URL path.
PLACEMENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
#: An allowed size, ``WIDTHxHEIGHT`` in pixels.
SIZE = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}")
MAX_ALLOWED = 100


def coerce_values(entity: str, values: dict[str, Any]) -> dict[str, Any]:
    """Enum strings and plain daypart/cap objects to their types, an ad's block fields
    to their canonical form (:func:`normalise_blocks`), as InvalidChange."""
    if entity == "ad":
        normalise_blocks(values)
    for name, value in list(values.items()):
        try:
            codec.coerce_fields(entity, {name: value})
        except InvalidChange:
            raise  # already names its field (creative.title)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidChange(name, f"invalid value {value!r}") from exc
    return codec.coerce_fields(entity, values)


#: An ad's list fields a block list matches: field -> (one value's rule, most values).
_BLOCK_LISTS = {"categories": (normalise_category, MAX_CATEGORIES),
                "adomain": (normalise_domain, MAX_DOMAINS)}


def normalise_blocks(values: dict[str, Any]) -> dict[str, Any]:
    """Put an ad's ``categories``, ``adomain`` (canonical, deduplicated, bounded) and
    ``bundle`` (trimmed; None stays None) present in ``values`` in canonical form, in
    place; returns ``values``.

    Raises:
        InvalidChange: naming the field (``categories``, ``adomain``, ``bundle``).
    """
    try:
        for name, (one, limit) in _BLOCK_LISTS.items():
            if name in values:
                where = name
                values[name] = normalise_list(values[name], one, limit)
        if values.get("bundle") is not None:
            where = "bundle"
            values["bundle"] = normalise_bundle(values["bundle"])
    except BlockValueError as exc:
        raise InvalidChange(where, str(exc)) from None
    return values


def campaign_problems(values: dict[str, Any], current: Campaign | None = None
                      ) -> list[tuple[str, str]]:
    """Every rule a campaign made of ``values`` (a create's fields, or an edit's changes
    to ``current``) would break, as ``(field, problem)``: for an API that reports its
    own problems together with the store's, at once. Values that do not even make a
    campaign (a missing field) are left to the store."""
    try:
        typed = coerce_values("campaign", dict(values))
        probe = (dataclasses.replace(current, **typed) if current is not None
                 else Campaign(**{"id": 0, **typed, "version": 1}))
        _check_campaign(probe)
    except InvalidChange as exc:
        return list(exc.problems)
    except TypeError:
        return []
    return []


def check_record(record: Advertiser | Campaign | Ad | Placement) -> None:
    """Domain rules every stored record obeys.

    Raises:
        InvalidChange: naming the first offending field.
    """
    if isinstance(record, Advertiser):
        _text(record.name, "name", 200)
    elif isinstance(record, Campaign):
        _check_campaign(record)
    elif isinstance(record, Placement):
        _check_placement(record)
    elif isinstance(record, ModelRelease):
        _text(record.path, "path", 1024)
        _text(record.model_version, "model_version", 64)
        _text(record.dataset, "dataset", 32)
    else:
        _check_ad(record)


def _check_campaign(c: Campaign) -> None:
    """The rules of a campaign's fields (first broken one), its flight budget, how it is
    sold (:mod:`adfunnel.campaigns.sales`) and how it bids
    (:mod:`adfunnel.campaigns.bidding_terms`), all reported at once."""
    problems: list[tuple[str, str]] = []
    for check in (_check_campaign_fields, _check_flight_budget):
        try:
            check(c)
        except InvalidChange as exc:
            problems += exc.problems
    problems += [p for p in sale_problems(c) if p not in problems]
    problems += [p for p in strategy_problems(c) if p not in problems]
    if problems:
        raise InvalidChange.of(problems)


def _check_flight_budget(c: Campaign) -> None:
    if c.flight_budget_micros is not None:
        _money(c.flight_budget_micros, "flight_budget_micros", positive=True)


def _check_campaign_fields(c: Campaign) -> None:
    _text(c.name, "name", 200)
    _money(c.bid_micros, "bid_micros", positive=True)
    _money(c.daily_budget_micros, "daily_budget_micros")
    if c.lifetime_budget_micros is not None:
        _money(c.lifetime_budget_micros, "lifetime_budget_micros")
    if not is_valid_zone(c.time_zone):
        raise InvalidChange("time_zone", f"unknown time zone {c.time_zone!r}")
    if not isinstance(c.flight_start, date) or isinstance(c.flight_start, datetime):
        raise InvalidChange("flight_start", "must be a date")
    if c.flight_end is not None:
        if not isinstance(c.flight_end, date) or isinstance(c.flight_end, datetime):
            raise InvalidChange("flight_end", "must be a date")
        if c.flight_end < c.flight_start:
            raise InvalidChange("flight_end", "must be on or after flight_start")
    for i, p in enumerate(c.dayparts):
        where = f"dayparts[{i}]"
        if not p.weekdays or any(not _int(d) or not 0 <= d <= 6 for d in p.weekdays):
            raise InvalidChange(f"{where}.weekdays", "must be a non-empty list of 0..6")
        if not _int(p.start_hour) or not 0 <= p.start_hour <= 23:
            raise InvalidChange(f"{where}.start_hour", "must be an integer 0..23")
        if not _int(p.end_hour) or not p.start_hour < p.end_hour <= 24:
            raise InvalidChange(f"{where}.end_hour", "must be an integer > start_hour and <= 24")
    for i, cap in enumerate(c.frequency_caps):
        _check_cap(cap, f"frequency_caps[{i}]")
    if c.targeting is not None and not isinstance(c.targeting, str):
        raise InvalidChange("targeting", "must be the canonical expression text")
    since = c.bid_strategy_since
    if since is not None and (not isinstance(since, datetime) or since.tzinfo is None):
        raise InvalidChange("bid_strategy_since", "must be an aware datetime")


def _check_cap(cap: FrequencyCap, where: str) -> None:
    """A counter cap (``count`` > 0 per ``window``) or a cooldown cap (``cooldown_s`` in
    1 s .. 400 days), never both nor neither; raises :class:`InvalidChange`."""
    if cap.level not in _CAP_LEVELS:
        raise InvalidChange(f"{where}.level", f"must be one of {', '.join(_CAP_LEVELS)}")
    if cap.cooldown_s is not None:
        for name in ("count", "window"):
            if getattr(cap, name) is not None:
                raise InvalidChange(
                    f"{where}.{name}", "must be absent from a cap with cooldown_s "
                    "(a cap is either count and window, or cooldown_s)"
                )
        if not _int(cap.cooldown_s) or not 1 <= cap.cooldown_s <= MAX_COOLDOWN_S:
            raise InvalidChange(
                f"{where}.cooldown_s", f"must be an integer of seconds, 1..{MAX_COOLDOWN_S}"
            )
        return
    if cap.count is None:
        raise InvalidChange(f"{where}.count", "is required (or give cooldown_s instead)")
    if not _int(cap.count) or cap.count <= 0:
        raise InvalidChange(f"{where}.count", "must be an integer > 0")
    if cap.window is None:
        raise InvalidChange(f"{where}.window", "is required with count")
    if cap.window not in _CAP_WINDOWS:
        raise InvalidChange(f"{where}.window", f"must be one of {', '.join(_CAP_WINDOWS)}")


_CAP_LEVELS = tuple(CapLevel)
_CAP_WINDOWS = tuple(CapWindow)


def _check_ad(ad: Ad) -> None:
    problem = landing_url_problem(ad.landing_url)
    if problem:
        raise InvalidChange("landing_url", problem)
    _check_creative(ad, "")
    if ad.creative is not None:
        check_creative(ad.creative, ad.format)
    if not _int(ad.quality_micros) or abs(ad.quality_micros) > MAX_QUALITY_MICROS:
        raise InvalidChange(
            "quality_micros", f"must be an integer of micros within ±{MAX_QUALITY_MICROS}"
        )
    given = {"categories": ad.categories, "adomain": ad.adomain, "bundle": ad.bundle}
    canonical = normalise_blocks(dict(given))  # a record built around coerce_values
    for name, value in given.items():
        if canonical[name] != value:
            raise InvalidChange(name, "must be in canonical form (normalise_blocks)")


def _check_creative(ad: Ad | HouseAd, where: str) -> None:
    # an ad with a creative of content may leave creative_ref empty
    if not (isinstance(ad, Ad) and ad.creative is not None and ad.creative_ref == ""):
        _text(ad.creative_ref, f"{where}creative_ref", 500)
    _text(ad.format, f"{where}format", 64)
    for name in ("width", "height"):
        value = getattr(ad, name)
        if not _int(value) or value <= 0:
            raise InvalidChange(f"{where}{name}", "must be an integer > 0")


def _check_placement(p: Placement) -> None:
    if not isinstance(p.id, str) or not PLACEMENT_ID.fullmatch(p.id):
        raise InvalidChange("id", "must be 1-200 of [A-Za-z0-9._:-], starting alphanumeric")
    _text(p.name, "name", 200)
    _reserve(p.reserve_cpm_micros, "reserve_cpm_micros")
    reserves = p.country_reserves_cpm_micros
    if not isinstance(reserves, dict) or len(reserves) > 300:
        raise InvalidChange("country_reserves_cpm_micros", "must map at most 300 countries")
    for code, micros in reserves.items():
        where = f"country_reserves_cpm_micros.{code}"
        if not _iso_country(code):
            raise InvalidChange(where, "not an ISO 3166-1 alpha-2 country code (upper case)")
        _reserve(micros, where)
    _check_list(p.allowed_sizes, "allowed_sizes", lambda v: isinstance(v, str)
                and SIZE.fullmatch(v) is not None, "WIDTHxHEIGHT in pixels, e.g. 300x250")
    _check_list(p.allowed_formats, "allowed_formats", lambda v: isinstance(v, str)
                and 0 < len(v) <= 64 and v.strip() == v, "a format name of 1-64 characters")
    _check_list(p.allowed_origins, "allowed_origins", _is_origin,
                "an origin as browsers send it: scheme://host[:port], lower case, "
                "no default port, no path")
    if p.house_ad is not None:
        _check_house_ad(p, p.house_ad)
    if not isinstance(p.auction_type, AuctionType):
        raise InvalidChange("auction_type", f"must be one of {', '.join(AuctionType)}")


def normalise_origin(text: str) -> str:
    """A web origin as browsers send it in ``Origin`` (RFC 6454): ``scheme://host[:port]``
    of http or https, scheme and host lower-case, the scheme's default port left out.

    Raises:
        ValueError: not such an origin (a path, query, user info or another scheme).
    """
    parts = urlsplit(text.strip())
    try:
        port = parts.port
    except ValueError:
        raise ValueError("port must be a number in 0..65535") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("must be http:// or https:// with a host")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError("an origin has no path, query, fragment or user info")
    scheme = parts.scheme.lower()
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal keeps its brackets
    default = {"http": 80, "https": 443}[scheme]
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


def _is_origin(value: object) -> bool:
    if not isinstance(value, str) or len(value) > MAX_ORIGIN_CHARS:
        return False
    try:
        return normalise_origin(value) == value
    except ValueError:
        return False


def _check_house_ad(p: Placement, house: HouseAd) -> None:
    if not isinstance(house, HouseAd):
        raise InvalidChange("house_ad", "must be an object")
    problem = landing_url_problem(house.landing_url)
    if problem:
        raise InvalidChange("house_ad.landing_url", problem)
    _check_creative(house, "house_ad.")
    if not p.size_allowed(house.width, house.height):
        raise InvalidChange("house_ad", f"size {house.width}x{house.height} is not allowed here")
    if not p.format_allowed(house.format):
        raise InvalidChange("house_ad.format", f"{house.format!r} is not allowed here")


def _check_list(
    values: object, field: str, ok: Callable[[object], bool], expected: str
) -> None:
    if not isinstance(values, tuple) or len(values) > MAX_ALLOWED:
        raise InvalidChange(field, f"must be a list of at most {MAX_ALLOWED}")
    for i, v in enumerate(values):
        if not ok(v):
            raise InvalidChange(f"{field}[{i}]", f"must be {expected}")
    if len(set(values)) != len(values):
        raise InvalidChange(field, "must not repeat a value")


def _iso_country(code: object) -> bool:
    return (isinstance(code, str) and len(code) == 2 and code.isascii() and code.isupper()
            and pycountry.countries.get(alpha_2=code) is not None)


def _reserve(value: object, field: str) -> None:
    _money(value, field)
    if value > MAX_RESERVE_CPM_MICROS:  # type: ignore[operator]
        raise InvalidChange(field, f"must be <= {MAX_RESERVE_CPM_MICROS} micros per mille")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _money(value: object, field: str, *, positive: bool = False) -> None:
    if not _int(value):
        raise InvalidChange(field, "must be an integer number of micros")
    if positive and value <= 0:  # type: ignore[operator]
        raise InvalidChange(field, "must be > 0")
    if value < 0:  # type: ignore[operator]
        raise InvalidChange(field, "must be >= 0")
    if value > 2**63 - 1:  # type: ignore[operator]
        raise InvalidChange(field, "too large")


def storable_id(entity_id: object) -> bool:
    """Ids are positive 64-bit integers; anything else names no record."""
    return isinstance(entity_id, int) and 1 <= entity_id <= _MAX_ID


def storable_key(entity: str, key: object) -> bool:
    """Placements are keyed by their id string, every other record by its integer id."""
    if entity == "placement":
        return isinstance(key, str) and PLACEMENT_ID.fullmatch(key) is not None
    return storable_id(key)


_MAX_ID = 2**63 - 1


def _text(value: object, field: str, max_len: int) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidChange(field, "must be a non-empty string")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidChange(field, "must not contain control characters")
    if len(value) > max_len:
        raise InvalidChange(field, f"longer than {max_len} characters")
