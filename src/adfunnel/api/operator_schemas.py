"""Request and response bodies of the operator's routes (pydantic v2): placements with
their reserves, sizes, formats and house ad, ad quality, and click models
(``adfunnel.api.operator``). Input models forbid unknown fields, as in
:mod:`adfunnel.api.field_types`, whose field types they share.
"""

from __future__ import annotations

from typing import Annotated, Any

import pycountry
from pydantic import AfterValidator, BaseModel, Field, Strict

from adfunnel.api.field_types import LandingUrl, Name, Size, Text, Version, _In, _not_blank
from adfunnel.campaigns.model import AuctionType
from adfunnel.campaigns.validate import (
    MAX_ALLOWED,
    MAX_ORIGIN_CHARS,
    MAX_QUALITY_MICROS,
    MAX_RESERVE_CPM_MICROS,
    PLACEMENT_ID,
    SIZE,
    normalise_origin,
)

# --- operator settings: placements, ad quality ----------------------------------------------


def _placement_id(value: str) -> str:
    if not PLACEMENT_ID.fullmatch(value):
        raise ValueError("must be 1-200 of [A-Za-z0-9._:-], starting alphanumeric")
    return value


def _countries(value: dict[str, int]) -> dict[str, int]:
    """Codes upper-cased (``us`` → ``US``) and checked against ISO 3166-1 alpha-2."""
    out: dict[str, int] = {}
    for code, micros in value.items():
        upper = code.upper()
        if len(upper) != 2 or pycountry.countries.get(alpha_2=upper) is None:
            raise ValueError(f"{code!r} is not an ISO 3166-1 alpha-2 country code")
        if upper in out:
            raise ValueError(f"{upper} is given twice")
        out[upper] = micros
    return out


def _size(value: str) -> str:
    if not SIZE.fullmatch(value):
        raise ValueError("must be WIDTHxHEIGHT in pixels, e.g. 300x250")
    return value


def _unique(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError("must not repeat a value")
    return values


PlacementId = Annotated[str, Strict(), AfterValidator(_placement_id)]
#: Reserve price, integer micros per thousand impressions.
ReserveMicros = Annotated[int, Strict(), Field(ge=0, le=MAX_RESERVE_CPM_MICROS)]
CountryReserves = Annotated[
    dict[str, ReserveMicros], Field(max_length=300), AfterValidator(_countries)
]
FormatName = Annotated[
    str, Strict(), Field(min_length=1, max_length=64), AfterValidator(_not_blank)
]
Sizes = Annotated[
    list[Annotated[str, Strict(), AfterValidator(_size)]],
    Field(max_length=MAX_ALLOWED), AfterValidator(_unique),
]
Formats = Annotated[list[FormatName], Field(max_length=MAX_ALLOWED), AfterValidator(_unique)]
#: A web origin (``https://news.example``), stored as browsers send it (lower case, no
#: default port): ``HTTPS://News.Example:443`` is kept as ``https://news.example``.
Origin = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_ORIGIN_CHARS),
                   AfterValidator(normalise_origin)]
Origins = Annotated[list[Origin], Field(max_length=MAX_ALLOWED), AfterValidator(_unique)]


class HouseAdIn(_In):
    """The operator's own creative; it must have an allowed size and format."""

    creative_ref: Text
    landing_url: LandingUrl
    format: FormatName
    width: Size
    height: Size


class PlacementIn(_In):
    """A new placement. ``id`` is what ad requests send as ``placement.id``; reserves are
    micros per mille; country codes ISO 3166-1 alpha-2 (any case, stored upper case);
    empty ``allowed_sizes``/``allowed_formats`` allow everything. ``allowed_origins``:
    the web origins whose pages may ask for this placement's ads from a browser (CORS);
    empty: a browser on another origin gets none (apps and servers are not concerned)."""

    id: PlacementId
    name: Annotated[Name, AfterValidator(_not_blank)]
    reserve_cpm_micros: ReserveMicros = 0
    # pydantic copies these defaults per instance (ruff cannot see that _In is a model)
    country_reserves_cpm_micros: CountryReserves = {}  # noqa: RUF012
    allowed_sizes: Sizes = []  # noqa: RUF012
    allowed_formats: Formats = []  # noqa: RUF012
    house_ad: HouseAdIn | None = None
    allowed_origins: Origins = []  # noqa: RUF012
    #: ``second_price`` (GSP) or ``first_price`` (the winner pays its bid)
    auction_type: AuctionType = AuctionType.SECOND_PRICE


class PlacementPatch(_In):
    """Fields to change; ``house_ad: null`` removes the house ad. ``version`` as for
    :class:`CampaignPatch` (stale: HTTP 409)."""

    version: Version | None = None
    name: Annotated[Name, AfterValidator(_not_blank)] | None = None
    reserve_cpm_micros: ReserveMicros | None = None
    country_reserves_cpm_micros: CountryReserves | None = None
    allowed_sizes: Sizes | None = None
    allowed_formats: Formats | None = None
    house_ad: HouseAdIn | None = None
    allowed_origins: Origins | None = None
    auction_type: AuctionType | None = None


#: Placement patch fields that may be set to ``null``.
PLACEMENT_NULLABLE = frozenset({"house_ad"})


class HouseAdOut(BaseModel):
    creative_ref: str
    landing_url: str
    format: str
    width: int
    height: int


class PlacementOut(BaseModel):
    id: str
    name: str
    reserve_cpm_micros: int
    country_reserves_cpm_micros: dict[str, int]
    allowed_sizes: list[str]
    allowed_formats: list[str]
    house_ad: HouseAdOut | None
    version: int
    allowed_origins: list[str]
    auction_type: str


class QualityIn(_In):
    """``PUT /v1/ads/{id}/quality``: the operator's quality, micros per impression (±)."""

    quality_micros: Annotated[
        int, Strict(), Field(ge=-MAX_QUALITY_MICROS, le=MAX_QUALITY_MICROS)
    ]
    version: Version | None = None


# --- click models ----------------------------------------------------------------------


class ModelIn(_In):
    """A click model artifact to serve with: its directory as the ad servers see it
    (written by ``adfunnel model train --out DIR``)."""

    path: Annotated[str, Field(min_length=1, max_length=1024)]


class ModelOut(BaseModel):
    id: int
    model_version: str
    path: str
    dataset: str
    active: bool
    version: int
    target: str = "click"
    #: the artifact's held-out figures (only when registering: read from the artifact)
    metrics: dict[str, Any] | None = None
