"""An ad's creative with content: an image, a native ad's texts or HTML markup.

Three kinds, told apart by ``type`` in their plain (JSON) form:

- ``{"type": "image", "url", "width", "height", "alt", "upload_id"?}``: an image at an
  http(s) URL, or an upload this server serves (``upload_id`` names the upload it came
  from, ``POST /v1/creatives``) at its path relative to the server,
  ``/creatives/files/<name>``: stored without an origin, so nothing of the request that
  made the ad (its ``Host`` header) is kept; :func:`served_creative` puts the server's
  public origin in front where the ad is served;
- ``{"type": "native", "title", "body", "sponsor", "cta", "image_url"?, "icon_url"?}``:
  the texts a native app or the tag renders itself, as text (never as markup);
- ``{"type": "html", "markup"}``: markup served only inside a sandboxed iframe, only in a
  slot of format ``html`` on a placement that lists ``html`` among its allowed formats.

Texts are stored byte-for-byte as given: a title with ``<script>`` is data, and escaping
it is the renderer's job. :func:`creative_from_plain` and :func:`check_creative` raise
:class:`~adfunnel.campaigns.errors.InvalidChange` naming the field (``creative.title``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from adfunnel.campaigns.errors import InvalidChange
from adfunnel.campaigns.landing import landing_url_problem

#: The ad format (and placement format) of ads with an HTML creative.
HTML_FORMAT = "html"
#: Most characters of a native ad's title and body.
MAX_TITLE = 90
MAX_BODY = 200
#: Most characters of the short texts (alt, sponsor, call to action).
MAX_SHORT = 200
MAX_CTA = 40
#: Most characters of HTML markup (the ``ads.creative`` column is TEXT).
MAX_MARKUP = 100_000
#: Largest image side in pixels (as ad sizes).
MAX_SIDE = 100_000
#: An upload id: what ``POST /v1/creatives`` answers (hex of a content digest).
MAX_UPLOAD_ID = 64
#: Where this server serves uploaded images; an upload's URL in an ad is this + its name.
FILES_PATH = "/creatives/files/"
#: A stored upload file's name: the SHA-256 (hex) of its bytes and the format's extension.
FILE_NAME = re.compile(r"^[0-9a-f]{64}\.(png|jpg|gif|webp)$")


@dataclass(frozen=True, slots=True)
class ImageCreative:
    """An image shown at ``width`` x ``height`` pixels; ``alt`` is its text alternative."""

    type: ClassVar[str] = "image"
    url: str
    width: int
    height: int
    alt: str
    upload_id: str | None = None


@dataclass(frozen=True, slots=True)
class NativeCreative:
    """A native ad's parts; ``sponsor`` is the advertiser's display name, ``cta`` the
    call to action."""

    type: ClassVar[str] = "native"
    title: str
    body: str
    sponsor: str
    cta: str
    image_url: str | None = None
    icon_url: str | None = None


@dataclass(frozen=True, slots=True)
class HtmlCreative:
    """Markup for a sandboxed, cross-origin iframe."""

    type: ClassVar[str] = "html"
    markup: str


Creative = ImageCreative | NativeCreative | HtmlCreative

KINDS: dict[str, type[Creative]] = {
    "image": ImageCreative, "native": NativeCreative, "html": HtmlCreative,
}


def creative_to_plain(creative: Creative) -> dict[str, Any]:
    """The JSON-safe form: ``type`` first, then the fields that are set (None left out)."""
    out: dict[str, Any] = {"type": creative.type}
    for f in fields(creative):
        value = getattr(creative, f.name)
        if value is not None:
            out[f.name] = value
    return out


def creative_from_plain(plain: Mapping[str, Any], where: str = "creative") -> Creative:
    """The creative of a plain object (its ``type`` picks the kind).

    Raises:
        InvalidChange: not an object, an unknown type, a missing or unknown field
            (named ``creative.<field>``).
    """
    if not isinstance(plain, Mapping):
        raise InvalidChange(where, "must be an object")
    kind = KINDS.get(plain.get("type"))  # type: ignore[arg-type]
    if kind is None:
        raise InvalidChange(f"{where}.type", f"must be one of {', '.join(KINDS)}")
    names = {f.name: f for f in fields(kind)}
    for name in plain:
        if name != "type" and name not in names:
            raise InvalidChange(f"{where}.{name}", f"unknown field of {_a(kind.type)} creative")
    kwargs = {k: v for k, v in plain.items() if k != "type" and v is not None}
    for name, f in names.items():
        if name not in kwargs and f.default is not None:  # required (no None default)
            raise InvalidChange(f"{where}.{name}", f"is required in {_a(kind.type)} creative")
    return kind(**kwargs)


def _a(word: str) -> str:
    """``word`` with its indefinite article ("an image", "a native")."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def check_creative(creative: object, ad_format: str, where: str = "creative") -> None:
    """Domain rules of a stored creative of an ad of format ``ad_format``.

    Raises:
        InvalidChange: naming the first offending field.
    """
    if isinstance(creative, ImageCreative):
        _image_url(creative, f"{where}.url")
        for name in ("width", "height"):
            value = getattr(creative, name)
            if not _int(value) or not 0 < value <= MAX_SIDE:
                raise InvalidChange(f"{where}.{name}", f"must be an integer in 1..{MAX_SIDE}")
        _text(creative.alt, f"{where}.alt", MAX_SHORT)
        if creative.upload_id is not None:
            _text(creative.upload_id, f"{where}.upload_id", MAX_UPLOAD_ID)
    elif isinstance(creative, NativeCreative):
        _text(creative.title, f"{where}.title", MAX_TITLE)
        _text(creative.body, f"{where}.body", MAX_BODY, newlines=True)
        _text(creative.sponsor, f"{where}.sponsor", MAX_SHORT)
        _text(creative.cta, f"{where}.cta", MAX_CTA)
        for name in ("image_url", "icon_url"):
            if getattr(creative, name) is not None:
                _url(getattr(creative, name), f"{where}.{name}")
    elif isinstance(creative, HtmlCreative):
        markup = creative.markup
        if not isinstance(markup, str) or not markup.strip():
            raise InvalidChange(f"{where}.markup", "must be a non-empty string")
        if len(markup) > MAX_MARKUP:
            raise InvalidChange(f"{where}.markup", f"longer than {MAX_MARKUP} characters")
        if "\x00" in markup:
            raise InvalidChange(f"{where}.markup", "must not contain NUL characters")
        if ad_format != HTML_FORMAT:
            # only html slots take it, and only placements that opt in serve those
            raise InvalidChange("format", f"must be {HTML_FORMAT!r} for an html creative")
    else:
        raise InvalidChange(where, "must be an image, native or html creative")


def served_url(url: str, base_url: str) -> str:
    """An image URL as served: a server-relative one (an upload, ``/creatives/files/…``)
    under ``base_url`` (the server's public origin, no trailing slash; empty: left
    relative, for a client that resolves it against this server); others as they are."""
    return base_url + url if url.startswith(FILES_PATH) else url


def served_creative(creative: Creative, base_url: str) -> Creative:
    """``creative`` as served: an image's server-relative URL under ``base_url``
    (:func:`served_url`); every other creative (and an absolute URL) as stored."""
    if isinstance(creative, ImageCreative) and base_url and creative.url.startswith(FILES_PATH):
        return replace(creative, url=base_url + creative.url)
    return creative


def _image_url(creative: ImageCreative, field: str) -> None:
    """An image's URL: absolute http(s), or an upload's server-relative path."""
    url = creative.url
    if isinstance(url, str) and url.startswith("/"):
        # only the server writes it (api.creatives, from upload_id): never a path of
        # this server's own chosen by the advertiser
        if creative.upload_id is None or not (
                url.startswith(FILES_PATH) and FILE_NAME.fullmatch(url[len(FILES_PATH):])):
            raise InvalidChange(field, "a relative URL names an upload's file only "
                                       f"({FILES_PATH}<name>, with upload_id)")
        return
    _url(url, field)


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _url(value: object, field: str) -> None:
    problem = landing_url_problem(value) if isinstance(value, str) else "must be a string"
    if problem:
        raise InvalidChange(field, problem)


def _text(value: object, field: str, max_len: int, *, newlines: bool = False) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidChange(field, "must be a non-empty string")
    allowed = "\n" if newlines else ""
    if any((ord(ch) < 32 and ch not in allowed) or ord(ch) == 127 for ch in value):
        raise InvalidChange(field, "must not contain control characters")
    if len(value) > max_len:
        raise InvalidChange(field, f"longer than {max_len} characters")
