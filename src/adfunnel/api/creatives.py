"""An ad's ``creative`` as the API takes it: from :class:`~adfunnel.api.ad_schemas.CreativeIn`
to the domain creative (``adfunnel.campaigns.creative``), an image's ``upload_id`` made
into its URL and size.

The URL stored is the upload's own, never built from the request: this server's
``/creatives/files/<name>`` without an origin (the serving side puts ``public_base_url``
in front), or the ``creative_url_prefix`` one. A request's ``Host`` header must not
reach it: an ad approved with an image on the advertiser's own host could be swapped
after review, past the re-encoding uploads exist for.

The domain checks which fields each type needs (422 naming ``creative.<field>``); here
only what the store cannot know: an image gives exactly one of ``url`` and ``upload_id``,
and an ``upload_id`` names an upload of the ad's own advertiser (another advertiser's
answers exactly as an unknown one). An uploaded image's ``width`` and ``height`` are
the upload's when left out (one given: the other follows the upload's aspect ratio);
given, they may be smaller than the upload — a 600x500 upload shown at 300x250 is
sharp on a high-density screen — but not larger, and keep its aspect ratio within a
pixel (422 naming ``creative.width`` otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from adfunnel.api.ad_schemas import CreativeIn
from adfunnel.campaigns.creative import Creative, creative_from_plain
from adfunnel.http_errors import validation_error


@dataclass(frozen=True, slots=True)
class UploadedImage:
    """What an ad needs of an upload: its URL as stored in the ad (server-relative, or
    under ``creative_url_prefix``) and its size in pixels."""

    url: str
    width: int
    height: int


#: (upload id, the ad's advertiser id) -> that advertiser's upload, or None (unknown, or
#: another advertiser's). Nothing of the request goes in: its URL is the server's to say.
UploadLookup = Callable[[str, int], UploadedImage | None]


def creative_of(given: CreativeIn, uploads: UploadLookup | None = None,
                advertiser_id: int = 0) -> Creative:
    """The domain creative of an API body, for an ad of ``advertiser_id``.

    Raises:
        ApiError: 422 for an image with both or neither of ``url`` and ``upload_id``, an
            unknown upload (or another advertiser's), or a size that does not fit it.
        InvalidChange: a field its type does not have or lacks (``creative.<field>``).
    """
    plain = given.model_dump(exclude_none=True)
    if given.type == "image":
        if (given.url is None) == (given.upload_id is None):
            raise validation_error(("creative.url", "give exactly one of url and upload_id"))
        if given.upload_id is not None:
            found = (uploads(given.upload_id, advertiser_id)
                     if uploads is not None else None)
            if found is None:
                raise validation_error(("creative.upload_id", "no such upload"))
            plain["url"] = found.url  # kept beside upload_id: the answer carries a URL
            plain["width"], plain["height"] = shown_size(given.width, given.height, found)
    return creative_from_plain(plain)


def shown_size(width: int | None, height: int | None,
               upload: UploadedImage) -> tuple[int, int]:
    """The size an uploaded image is shown at, from the given ``width`` and ``height``.

    Raises:
        ApiError: 422 naming ``creative.width`` (or ``.height``) for a size larger than
            the upload or of another aspect ratio.
    """
    full_w, full_h = upload.width, upload.height
    if width is None and height is None:
        return full_w, full_h
    if width is None:
        width = max(1, round(height * full_w / full_h))  # type: ignore[operator]
    if height is None:
        height = max(1, round(width * full_h / full_w))
    if width > full_w or height > full_h:
        field = "creative.width" if width > full_w else "creative.height"
        raise validation_error((field, f"larger than the upload ({full_w}x{full_h})"))
    if abs(width * full_h - height * full_w) > max(full_w, full_h):
        raise validation_error(("creative.width", f"{width}x{height} is not the upload's "
                                                  f"aspect ratio ({full_w}x{full_h})"))
    return width, height
