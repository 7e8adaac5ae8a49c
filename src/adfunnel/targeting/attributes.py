"""The attributes an ad request carries and a targeting expression may name.

Geo is hierarchical by carrying every level: a request names its country, region and
city, so an ad may target any level (``geo.region in ["US-FL"]``). Region and city
values are globally unique codes (ISO 3166-2 style, or the source's own ids).

Values of coded attributes are case-normalised on both sides — the campaign's
targeting when it is compiled (:func:`adfunnel.targeting.parse_expr`) and the ad
request (:func:`adfunnel.serving.request.request_attributes`) — by the one table
:data:`VALUE_CASE`, so ``geo.country in ["us"]`` matches a request from ``"US"``. The
stored targeting JSON keeps the advertiser's own spelling.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from types import MappingProxyType


class Case(StrEnum):
    """How an attribute's values are compared."""

    UPPER = "upper"  # str.upper(): codes whose standard spelling is upper-case
    LOWER = "lower"  # str.lower(): names and tags that are case-insensitive
    AS_GIVEN = "as_given"  # ids of the platform or its data sources: case is meaningful


#: Every targeting attribute and the case its values are compared in (why, per row).
VALUE_CASE: Mapping[str, Case] = MappingProxyType(
    {
        "geo.country": Case.UPPER,  # ISO 3166-1 alpha-2 ("US")
        "geo.region": Case.UPPER,  # ISO 3166-2 ("US-FL"), or the geo source's code
        "geo.city": Case.AS_GIVEN,  # the geo source's own ids
        "age_band": Case.AS_GIVEN,  # the platform's band codes ("18-24")
        "gender": Case.AS_GIVEN,  # the platform's codes
        "language": Case.LOWER,  # BCP 47 tags are case-insensitive (RFC 5646 §2.1.1)
        "interests": Case.AS_GIVEN,  # taxonomy ids
        "audiences": Case.AS_GIVEN,  # audience ids
        "device_type": Case.LOWER,  # names: "mobile", "desktop", …
        "os": Case.LOWER,  # names: "ios", "android", "windows", …
        "browser": Case.LOWER,  # names: "chrome", "safari", …
        "placement": Case.AS_GIVEN,  # the publisher's placement ids
        "slot_size": Case.LOWER,  # "300x250": "300X250" is the same size
        "exchange": Case.AS_GIVEN,  # the publisher's exchange ids
        "domain": Case.LOWER,  # DNS names are case-insensitive (RFC 4343); no IDNA mapping
    }
)

ATTRIBUTES: frozenset[str] = frozenset(VALUE_CASE)

#: Attributes whose request value is a set (a user has many interests); the rest are
#: single-valued but still represented as a one-element set.
MULTI_VALUED: frozenset[str] = frozenset({"interests", "audiences", "language", "slot_size"})

_FOLD: dict[Case, Callable[[str], str] | None] = {
    Case.UPPER: str.upper, Case.LOWER: str.lower, Case.AS_GIVEN: None,
}
#: attribute -> its case function, or None when values are compared as given.
NORMALISER: Mapping[str, Callable[[str], str] | None] = MappingProxyType(
    {attr: _FOLD[case] for attr, case in VALUE_CASE.items()}
)


def normalise_value(attr: str, value: str) -> str:
    """``value`` in the case :data:`VALUE_CASE` gives ``attr``; other attributes as given."""
    fold = NORMALISER.get(attr)
    return fold(value) if fold is not None else value


def normalise_values(attr: str, values: frozenset[str]) -> frozenset[str]:
    """:func:`normalise_value` over a set (values differing only in case merge)."""
    fold = NORMALISER.get(attr)
    return frozenset(map(fold, values)) if fold is not None else values
