"""Request and response bodies of the advertiser API's ads and their creatives (pydantic v2).

Field types and the input base are :mod:`adfunnel.api.field_types`; the block-list
fields (categories, advertiser domains, bundle) :mod:`adfunnel.api.block_fields`.
``landing_url`` is stored byte-for-byte (an IRI must have a URI form).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, Strict

from adfunnel.api.block_fields import Bundle, Categories, Domains
from adfunnel.api.field_types import LandingUrl, Size, Text, Version, _In
from adfunnel.campaigns.model import AdStatus, ReviewState

# --- ads ---------------------------------------------------------------------------------


_Url = Annotated[str, Strict(), Field(min_length=1, max_length=2048)]
_Short = Annotated[str, Strict(), Field(min_length=1, max_length=200)]


class CreativeIn(_In):
    """What an ad shows, by ``type`` (``adfunnel.campaigns.creative``):

    - ``image``: ``url`` or ``upload_id`` (exactly one), ``width``, ``height``, ``alt``;
    - ``native``: ``title`` (<= 90 characters), ``body`` (<= 200), ``sponsor``, ``cta``,
      optional ``image_url`` and ``icon_url``;
    - ``html``: ``markup``, for an ad of format ``html`` (served only on placements that
      allow the ``html`` format, inside a sandboxed iframe).

    Types and lengths are checked here; which fields a type needs, by the store (422
    naming ``creative.<field>``). Texts are kept as given: markup in a title is data.
    """

    type: Literal["image", "native", "html"]
    url: _Url | None = None
    upload_id: Annotated[str, Strict(), Field(min_length=1, max_length=64)] | None = None
    width: Size | None = None
    height: Size | None = None
    alt: _Short | None = None
    title: Annotated[str, Strict(), Field(min_length=1, max_length=90)] | None = None
    body: _Short | None = None
    sponsor: _Short | None = None
    cta: Annotated[str, Strict(), Field(min_length=1, max_length=40)] | None = None
    image_url: _Url | None = None
    icon_url: _Url | None = None
    markup: Annotated[str, Strict(), Field(min_length=1, max_length=100_000)] | None = None


class AdIn(_In):
    """A new ad; ``landing_url`` (http/https URL or IRI) is stored byte-for-byte. It
    needs ``creative_ref`` (the older, opaque reference), ``creative``, or both."""

    landing_url: LandingUrl
    creative_ref: Text | None = None
    creative: CreativeIn | None = None
    format: Annotated[str, Strict(), Field(min_length=1, max_length=64)]
    width: Size
    height: Size
    review_state: ReviewState = ReviewState.APPROVED
    status: AdStatus = AdStatus.ACTIVE
    # pydantic copies these defaults per instance (ruff cannot see that _In is a model)
    categories: Categories = []  # noqa: RUF012
    adomain: Domains = []  # noqa: RUF012
    bundle: Bundle | None = None


class AdPatch(_In):
    version: Version | None = None
    landing_url: LandingUrl | None = None
    creative_ref: Text | None = None
    creative: CreativeIn | None = None  # null removes it (when the ad has a creative_ref)
    format: Annotated[str, Strict(), Field(min_length=1, max_length=64)] | None = None
    width: Size | None = None
    height: Size | None = None
    review_state: ReviewState | None = None
    status: AdStatus | None = None
    categories: Categories | None = None
    adomain: Domains | None = None
    bundle: Bundle | None = None  # null removes it


class AdOut(BaseModel):
    id: int
    campaign_id: int
    landing_url: str
    creative_ref: str  # "" for an ad given only a creative
    format: str
    width: int
    height: int
    review_state: str
    status: str
    quality_micros: int  # set by the operator (PUT /v1/ads/{id}/quality)
    version: int
    creative: dict[str, Any] | None = None  # as given, with its "type"; null without one
    categories: list[str] = []  # canonical IAB content taxonomy 1.0 ids
    adomain: list[str] = []  # canonical (lower case, A-label) advertiser domains
    bundle: str | None = None
