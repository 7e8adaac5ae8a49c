"""A bid's ``adm``: HTML that renders the creative and fires our impression beacon.

Every text and URL is escaped for its place (:func:`html.escape`, quotes included);
nothing from the creative becomes markup but an html creative, which is never inlined:
it is shown from our frame document (``/f?t=TOKEN``, :mod:`adfunnel.web.frame`) in a
sandboxed iframe, as the tag shows it. The impression beacon
(``/i?t=TOKEN&p=${AUCTION_PRICE}``) is a 1×1 image after the ad; the exchange
substitutes the price macro in ``adm`` as in the notice URLs.

- image creative: ``<a href=click><img src=image></a>`` at the slot's size;
- native creative in a banner slot: its texts (and image) as a linked block of text;
- html creative: ``<iframe sandbox src=/f?t=TOKEN>``;
- an ad with only a ``creative_ref`` that is an http(s) URL: that image; otherwise no
  markup (None: no bid for that imp).
"""

from __future__ import annotations

from html import escape

from adfunnel.campaigns.creative import HtmlCreative, ImageCreative, NativeCreative
from adfunnel.campaigns.model import Ad
from adfunnel.tracking.notices import NoticeUrls

#: The sandbox of an html creative's frame (the tag's own).
FRAME_SANDBOX = "allow-scripts allow-popups allow-popups-to-escape-sandbox"


def _a(value: object) -> str:
    """``value`` escaped for a double-quoted attribute or text."""
    return escape(str(value), quote=True)


def ad_markup(ad: Ad, urls: NoticeUrls, token: str, base_url: str, width: int,
              height: int) -> str | None:
    """The ``adm`` of ``ad`` shown at ``width``×``height`` (module doc); None when the
    ad has nothing we can render."""
    body = _creative(ad, urls, token, base_url, width, height)
    if body is None:
        return None
    pixel = (f'<img src="{_a(urls.impression)}" width="1" height="1" alt="" '
             'style="position:absolute;border:0">')
    return body + pixel


def _creative(ad: Ad, urls: NoticeUrls, token: str, base_url: str, width: int,
              height: int) -> str | None:
    c = ad.creative
    if isinstance(c, ImageCreative):
        return _image(urls.click, c.url, c.alt, width, height)
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
    ref = ad.creative_ref
    if ref.startswith(("https://", "http://")):
        return _image(urls.click, ref, "", width, height)
    return None


def _image(click: str, src: str, alt: str, width: int, height: int) -> str:
    return (f'<a href="{_a(click)}" target="_blank" rel="noopener">'
            f'<img src="{_a(src)}" width="{width}" height="{height}" alt="{_a(alt)}" '
            'style="border:0"></a>')
