"""The attributes an ad request carries and a targeting expression may name.

Geo is hierarchical by carrying every level: a request names its country, region and
city, so an ad may target any level (``geo.region in ["US-FL"]``). Region and city
values are globally unique codes (ISO 3166-2 style, or the source's own ids).
"""

from __future__ import annotations

ATTRIBUTES: frozenset[str] = frozenset(
    {
        "geo.country",
        "geo.region",
        "geo.city",
        "age_band",
        "gender",
        "language",
        "interests",
        "audiences",
        "device_type",
        "os",
        "browser",
        "placement",
        "slot_size",
        "exchange",
        "domain",
    }
)

#: Attributes whose request value is a set (a user has many interests); the rest are
#: single-valued but still represented as a one-element set.
MULTI_VALUED: frozenset[str] = frozenset({"interests", "audiences", "language", "slot_size"})
