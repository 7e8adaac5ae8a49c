"""The select answer's entry for one winning ad with a creative of content: the wire fields
of :class:`~adfunnel.serving.request.AdOut` and ``creative``, its fields as stored
(``{"type": "native", "title", ...}``), so a native app or the tag can render it itself.
An ad without one answers exactly as before.

Texts are data: a title holding ``<script>`` is sent as that string (JSON-escaped, never
rendered here); the renderer inserts it as text. An uploaded image's URL, stored relative
to this server (``/creatives/files/<name>``), goes under ``public_base_url`` when that is
set and stays relative otherwise, as the tracking URLs do (the tag resolves them against
its own server): never under the ad request's ``Host``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from adfunnel.campaigns.creative import creative_to_plain, served_creative
from adfunnel.campaigns.model import Ad
from adfunnel.serving.request import AdOut


class CreativeAdOut(AdOut, kw_only=True):
    """An :class:`AdOut` with the ad's creative (a subclass, so answers of ads without
    one keep their exact shape)."""

    creative: dict[str, Any]


def with_creative(out: AdOut, ad: Ad, base_url: str = "") -> AdOut:
    """``out`` (the answer's entry for ``ad``) with ``ad``'s creative, when it has one;
    ``base_url``: ``public_base_url`` (empty: server-relative URLs stay relative)."""
    if ad.creative is None:
        return out
    creative = creative_to_plain(served_creative(ad.creative, base_url))
    return CreativeAdOut(**msgspec.structs.asdict(out), creative=creative)
