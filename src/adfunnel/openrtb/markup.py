"""A bid's ``adm``: HTML that renders the creative and fires our impression beacon.

Every text and URL is escaped for its place (:func:`html.escape`, quotes included);
nothing from the creative becomes markup but an html creative, which is never inlined:
it is shown from our frame document (``/f?t=TOKEN``, :mod:`adfunnel.web.frame`) in a
sandboxed iframe, as the tag shows it. The impression beacon
(``/i?t=TOKEN&p=${AUCTION_PRICE}``) is a 1×1 image after the ad; the exchange
substitutes the price macro in ``adm`` as in the notice URLs.

- image creative: ``<a href=click><img src=image></a>`` at the slot's size (an upload's
  server-relative URL under ``base_url``, as the notice URLs);
- native creative in a banner slot: its texts (and image) as a linked block of text;
- html creative: ``<iframe sandbox src=/f?t=TOKEN>``;
- an ad with only a ``creative_ref`` that is an http(s) URL: that image; otherwise no
  markup (None: no bid for that imp).

Everything but the token is the same for every bid of one creative at one size, so it
is built and escaped once (:func:`markup_parts`, cached) and each bid joins the parts
with its token: one pass, instead of building and escaping the markup again per bid.
"""

from __future__ import annotations

import functools
from html import escape

from adfunnel.campaigns.creative import (
    Creative,
    HtmlCreative,
    ImageCreative,
    NativeCreative,
    served_url,
)
from adfunnel.campaigns.model import Ad
from adfunnel.tracking.notices import NoticeUrls, notice_urls

#: The sandbox of an html creative's frame (the tag's own).
FRAME_SANDBOX = "allow-scripts allow-popups allow-popups-to-escape-sandbox"


def _a(value: object) -> str:
    """``value`` escaped for a double-quoted attribute or text."""
    return escape(str(value), quote=True)


def ad_markup(ad: Ad, token: str, base_url: str, width: int, height: int) -> str | None:
    """The ``adm`` of ``ad`` shown at ``width``×``height`` for the bid whose token is
    ``token``, its URLs under ``base_url`` (:func:`~adfunnel.tracking.notices.notice_urls`;
    module doc); None when the ad has nothing we can render."""
    parts = markup_parts(ad.creative, ad.creative_ref, base_url, width, height)
    if parts is None:
        return None
    if not parts:  # a creative whose own text holds the placeholder: built as it is
        return plain_markup(ad.creative, ad.creative_ref, notice_urls(token, base_url),
                            token, base_url, width, height)
    return token.join(parts)


#: Where the token goes in :func:`markup_parts`' build: a character no token holds and
#: :func:`html.escape` keeps as it is.
_SLOT = "\x00"


@functools.lru_cache(maxsize=4096)
def markup_parts(creative: Creative | None, creative_ref: str, base_url: str, width: int,
                 height: int) -> tuple[str, ...] | None:
    """The markup of a creative at a size split where the token goes (the ``adm`` is
    ``token.join(parts)``); None: nothing to render; empty when the creative's own text
    holds :data:`_SLOT` (then :func:`ad_markup` builds it whole per bid).

    The token is URL-safe base64 and a dot, which escaping leaves as it is, so escaping
    the markup with the token in it equals escaping it around the token: the split
    build is exactly :func:`plain_markup`'s."""
    slotted = plain_markup(creative, creative_ref, notice_urls(_SLOT, base_url), _SLOT,
                           base_url, width, height)
    if slotted is None:
        return None
    parts = tuple(slotted.split(_SLOT))
    bare = plain_markup(creative, creative_ref, notice_urls("", base_url), "", base_url,
                        width, height)
    # equal only when every placeholder in the build is one the token fills (none of the
    # creative's own): same length, since each placeholder found is one character
    return parts if "".join(parts) == bare else ()


def plain_markup(creative: Creative | None, creative_ref: str, urls: NoticeUrls,
                 token: str, base_url: str, width: int, height: int) -> str | None:
    """The ``adm`` built and escaped whole (module doc)."""
    body = _creative(creative, creative_ref, urls, token, base_url, width, height)
    if body is None:
        return None
    pixel = (f'<img src="{_a(urls.impression)}" width="1" height="1" alt="" '
             'style="position:absolute;border:0">')
    return body + pixel


def _creative(c: Creative | None, ref: str, urls: NoticeUrls, token: str, base_url: str,
              width: int, height: int) -> str | None:
    if isinstance(c, ImageCreative):
        return _image(urls.click, served_url(c.url, base_url.rstrip("/")), c.alt, width,
                      height)
    if isinstance(c, NativeCreative):
        image = (f'<img src="{_a(c.image_url)}" alt="" style="max-width:100%">'
                 if c.image_url else "")
        return (f'<a href="{_a(urls.click)}" target="_blank" rel="noopener" '
                f'style="display:block;width:{width}px;height:{height}px;overflow:hidden">'
                f'{image}<strong>{_a(c.title)}</strong><p>{_a(c.body)}</p>'
                f'<span>{_a(c.sponsor)}</span> <span>{_a(c.cta)}</span></a>')
    if isinstance(c, HtmlCreative):
        src = f"{base_url.rstrip('/')}/f?t={token}"
        return (f'<iframe src="{_a(src)}" sandbox="{FRAME_SANDBOX}" width="{width}" '
                f'height="{height}" frameborder="0" scrolling="no"></iframe>')
    if ref.startswith(("https://", "http://")):
        return _image(urls.click, ref, "", width, height)
    return None


def _image(click: str, src: str, alt: str, width: int, height: int) -> str:
    return (f'<a href="{_a(click)}" target="_blank" rel="noopener">'
            f'<img src="{_a(src)}" width="{width}" height="{height}" alt="{_a(alt)}" '
            'style="border:0"></a>')
