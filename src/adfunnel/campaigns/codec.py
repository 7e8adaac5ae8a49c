"""Conversions of advertiser-side records to and from their stored and logged forms.

Three forms of one record (:class:`Advertiser`, :class:`Campaign`, :class:`Ad`,
:class:`Placement`):

- the domain dataclass (``adfunnel.campaigns.model``);
- a *payload*: a JSON-safe dict (dates as ``YYYY-MM-DD``, enums as their values,
  dayparts and caps as lists of objects (a counter cap ``{"count", "window", "level"}``,
  a cooldown cap ``{"level", "cooldown_s"}``), targeting as its canonical *text*, a
  placement's country reserves as an object and its house ad as an object or null, an
  ad's creative as its object with ``type`` or null, a campaign's goal as
  ``{"metric", "share" | "total"}`` or null, its ``bid_strategy_since`` as an ISO 8601
  instant with its offset or null, an ad's ``categories`` and ``adomain`` as arrays
  (absent from payloads written before them: empty)), which
  the change log stores as JSON text and ad servers decode with :func:`from_payload`;
- a *row*: the column values of ``adfunnel.campaigns.tables`` (dates as ``date``;
  dayparts, caps, a campaign's goal, an ad's creative, categories and adomain and a
  placement's reserves, sizes, formats and house ad as JSON text).

Money stays integer micros in every form. Targeting and landing URLs are strings
carried unchanged, so every form round-trips byte-identically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, date, datetime
from typing import Any

from adfunnel.campaigns.creative import KINDS as CREATIVE_KINDS
from adfunnel.campaigns.creative import creative_from_plain, creative_to_plain
from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.model import (
    LEGACY_BILLABLE_EVENT,
    Ad,
    AdStatus,
    Advertiser,
    AuctionType,
    BidStrategy,
    BidType,
    BillableEvent,
    BudgetPeriod,
    Campaign,
    CampaignStatus,
    CapLevel,
    CapWindow,
    Daypart,
    FrequencyCap,
    Goal,
    GoalMetric,
    HouseAd,
    ModelRelease,
    Objective,
    PacingMode,
    Placement,
    Priority,
    ReviewState,
)

Record = Advertiser | Campaign | Ad | Placement | ModelRelease

#: Entity name (as in ``ChangeRecord.entity`` and ``change_log.entity``) -> record class.
ENTITY_TYPES: dict[str, type[Record]] = {
    "advertiser": Advertiser,
    "campaign": Campaign,
    "ad": Ad,
    "placement": Placement,
    "model": ModelRelease,
}

_ENUMS: dict[str, dict[str, type]] = {
    "campaign": {
        "objective": Objective,
        "bid_type": BidType,
        "status": CampaignStatus,
        "pacing_mode": PacingMode,
        "billable_event": BillableEvent,
        "priority": Priority,
        "budget_period": BudgetPeriod,
        "bid_strategy": BidStrategy,
    },
    "ad": {"review_state": ReviewState, "status": AdStatus},
    "advertiser": {},
    "placement": {"auction_type": AuctionType},
    "model": {},
}
_DATES = ("flight_start", "flight_end")
#: Fields stored as JSON text in their column.
_JSON_COLUMNS = frozenset({
    "dayparts", "frequency_caps",
    "country_reserves_cpm_micros", "allowed_sizes", "allowed_formats", "house_ad",
    "allowed_origins",
    "creative",
    "goal",
    "categories", "adomain",
})
#: An ad's lists of strings (tuples in the dataclass, JSON arrays in payloads and rows).
_AD_LISTS = ("categories", "adomain")


def entity_of(record: Record) -> str:
    """The entity name of ``record``: ``advertiser``, ``campaign``, ``ad`` or ``placement``.

    Raises:
        TypeError: not an advertiser-side record.
    """
    for name, cls in ENTITY_TYPES.items():
        if type(record) is cls:
            return name
    raise TypeError(f"not an advertiser-side record: {record!r}")


def field_names(entity: str) -> tuple[str, ...]:
    """The dataclass field names of ``entity``'s record, in declaration order."""
    return tuple(f.name for f in fields(ENTITY_TYPES[entity]))


# --- payload (change log, API-independent JSON) -------------------------------------


def to_payload(record: Record) -> dict[str, Any]:
    """The JSON-safe dict of ``record`` (every field, see module docstring)."""
    out: dict[str, Any] = {}
    for name in field_names(entity_of(record)):
        out[name] = _plain(getattr(record, name))
    return out


def dumps_payload(record: Record) -> str:
    """``to_payload`` as compact JSON text (what ``change_log.payload`` holds)."""
    return json.dumps(to_payload(record), ensure_ascii=False, separators=(",", ":"))


def from_payload(entity: str, payload: Mapping[str, Any] | str) -> Record:
    """Rebuild a record from its payload (a dict or the JSON text of one).

    Raises:
        KeyError: unknown entity or a required field missing.
        ValueError: a malformed value (bad date, unknown enum value).
    """
    data = json.loads(payload) if isinstance(payload, str) else dict(payload)
    cls = ENTITY_TYPES[entity]
    known = set(field_names(entity))
    kwargs = {k: v for k, v in data.items() if k in known}  # newer fields are ignored
    # older fields absent (priority, goal, budget_period, flight_budget_micros before
    # #25) take the dataclass defaults: an auction campaign with a daily budget
    if entity == "campaign" and "billable_event" not in kwargs:
        kwargs["billable_event"] = LEGACY_BILLABLE_EVENT  # written before it existed
    for name in _DATES:
        if isinstance(kwargs.get(name), str):
            kwargs[name] = date.fromisoformat(kwargs[name])
    return cls(**coerce_fields(entity, kwargs))


# --- row (SQL columns) ---------------------------------------------------------------


def to_row(entity: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Column values for (some of) ``entity``'s fields; ``id`` is left to the caller.

    Enums become their values, the ``_JSON_COLUMNS`` fields JSON text (a missing
    house ad stays NULL); dates, strings and integers are kept as they are.
    """
    row: dict[str, Any] = {}
    for name, value in values.items():
        if name in _JSON_COLUMNS:
            plain = _plain(tuple(value) if isinstance(value, list) else value)
            row[name] = None if plain is None else json.dumps(
                plain, ensure_ascii=False, separators=(",", ":")
            )
        else:
            row[name] = _plain(value) if not isinstance(value, date) else value
    return row


def from_row(entity: str, row: Mapping[str, Any]) -> Record:
    """The record held in one table row (extra columns such as ``updated_at`` ignored)."""
    kwargs = {name: row[name] for name in field_names(entity)}
    for name in _JSON_COLUMNS:
        if isinstance(kwargs.get(name), str):
            kwargs[name] = json.loads(kwargs[name])
    return ENTITY_TYPES[entity](**coerce_fields(entity, kwargs))


# --- field coercion ----------------------------------------------------------------------


def coerce_fields(entity: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Coerce plain values (enum strings, lists of dicts) to the dataclass field types.

    Mutates and returns ``kwargs``; fields absent from it are left absent.

    Raises:
        ValueError: an unknown enum value.
        KeyError, TypeError: a daypart or cap object missing a key, or not an object.
    """
    for name, enum in _ENUMS[entity].items():
        if name in kwargs and kwargs[name] is not None:
            kwargs[name] = enum(kwargs[name])
    if "dayparts" in kwargs:
        kwargs["dayparts"] = tuple(
            p
            if isinstance(p, Daypart)
            else Daypart(tuple(p["weekdays"]), p["start_hour"], p["end_hour"])
            for p in kwargs["dayparts"] or ()
        )
    if "frequency_caps" in kwargs:
        kwargs["frequency_caps"] = tuple(
            c if isinstance(c, FrequencyCap) else _cap(c) for c in kwargs["frequency_caps"] or ()
        )
    goal = kwargs.get("goal")
    if goal is not None and not isinstance(goal, Goal):
        kwargs["goal"] = _goal(goal)
    if kwargs.get("bid_strategy_since") is not None:
        kwargs["bid_strategy_since"] = _aware(kwargs["bid_strategy_since"])
    creative = kwargs.get("creative")
    if creative is not None and not isinstance(creative, tuple(CREATIVE_KINDS.values())):
        kwargs["creative"] = creative_from_plain(creative)
    if entity == "ad":
        for name in _AD_LISTS:
            if name in kwargs:
                given = kwargs[name]
                if isinstance(given, str):  # tuple() would split it into characters
                    raise TypeError(f"{name} must be a list of strings")
                kwargs[name] = tuple(given or ())
    return _coerce_placement(kwargs)


def _aware(value: Any) -> Any:
    """An instant from its ISO text (payloads) or column value; a naive one (SQLite keeps
    no offset) is UTC, as every stored instant is."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def _cap(c: Mapping[str, Any]) -> FrequencyCap:
    """A cap from its plain object: ``level`` and ``count``/``window`` and/or ``cooldown_s``.

    Absent or null keys become None (rows written before cooldowns have no
    ``cooldown_s``); whether the combination is valid is the store's check.
    """
    if not isinstance(c, Mapping):
        raise TypeError(f"a frequency cap must be an object, not {c!r}")
    window = c.get("window")
    return FrequencyCap(
        c.get("count"),
        None if window is None else CapWindow(window),
        CapLevel(c["level"]),
        c.get("cooldown_s"),
    )


def _goal(g: Mapping[str, Any]) -> Goal:
    """A goal from its plain object ``{"metric", "share" | "total"}``; an integer share
    becomes a float (one form, so payloads round-trip byte-identically). Whether the
    values fit the campaign is :mod:`adfunnel.campaigns.sales`' check.

    Raises:
        InvalidChange: not an object, or an unknown metric (``goal.metric``).
    """
    if not isinstance(g, Mapping):
        raise InvalidChange("goal", "must be an object with metric and share or total")
    try:
        metric = GoalMetric(g.get("metric"))
    except ValueError:
        raise InvalidChange("goal.metric", "must be one of "
                            + ", ".join(m.value for m in GoalMetric)) from None
    share = g.get("share")
    if isinstance(share, int) and not isinstance(share, bool):
        share = float(share)
    return Goal(metric, share, g.get("total"))


def _coerce_placement(kwargs: dict[str, Any]) -> dict[str, Any]:
    for name in ("allowed_sizes", "allowed_formats", "allowed_origins"):
        if name in kwargs:
            kwargs[name] = tuple(kwargs[name] or ())
    if "country_reserves_cpm_micros" in kwargs:  # a copy, in code order
        given = kwargs["country_reserves_cpm_micros"] or {}
        kwargs["country_reserves_cpm_micros"] = {k: given[k] for k in sorted(given)}
    house = kwargs.get("house_ad")
    if house is not None and not isinstance(house, HouseAd):
        kwargs["house_ad"] = HouseAd(
            house["creative_ref"], house["landing_url"], house["format"],
            house["width"], house["height"],
        )
    return kwargs


def _plain(value: Any) -> Any:
    """A JSON-safe form of a field value."""
    if isinstance(value, Daypart):
        return {
            "weekdays": list(value.weekdays),
            "start_hour": value.start_hour,
            "end_hour": value.end_hour,
        }
    if isinstance(value, FrequencyCap):  # only the keys of its kind (nulls left out)
        if value.cooldown_s is not None and value.count is None and value.window is None:
            return {"level": str(value.level), "cooldown_s": value.cooldown_s}
        cap: dict[str, Any] = {"count": value.count, "window": _plain(value.window),
                               "level": str(value.level)}
        if value.cooldown_s is not None:
            cap["cooldown_s"] = value.cooldown_s
        return cap
    if isinstance(value, tuple(CREATIVE_KINDS.values())):
        return creative_to_plain(value)
    if isinstance(value, Goal):  # only the keys set (a share or a total)
        goal: dict[str, Any] = {"metric": str(value.metric)}
        if value.share is not None:
            goal["share"] = value.share
        if value.total is not None:
            goal["total"] = value.total
        return goal
    if isinstance(value, HouseAd):
        return {name: getattr(value, name) for name in HouseAd.__dataclass_fields__}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):  # StrEnum included
        return str(value)
    return value
