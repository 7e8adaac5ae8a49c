"""The select answer's entry for one winning ad with a creative of content: the wire fields
of :class:`~adfunnel.serving.request.AdOut` and ``creative``, its fields as stored
(``{"type": "native", "title", ...}``), so a native app or the tag can render it itself.
An ad without one answers exactly as before.

Texts are data: a title holding ``<script>`` is sent as that string (JSON-escaped, never
rendered here); the renderer inserts it as text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from adfunnel.campaigns.creative import creative_to_plain
from adfunnel.campaigns.model import Ad
from adfunnel.serving.request import AdOut


class CreativeAdOut(AdOut, kw_only=True):
    """An :class:`AdOut` with the ad's creative (a subclass, so answers of ads without
    one keep their exact shape)."""

    creative: dict[str, Any]


def with_creative(out: AdOut, ad: Ad) -> AdOut:
    """``out`` (the answer's entry for ``ad``) with ``ad``'s creative, when it has one."""
    if ad.creative is None:
        return out
    return CreativeAdOut(**msgspec.structs.asdict(out), creative=creative_to_plain(ad.creative))
