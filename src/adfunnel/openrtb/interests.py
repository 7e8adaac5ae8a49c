"""What a ``BidRequest`` says of the user's and the page's interests, as our targeting
attributes ``interests`` and ``audiences`` (:mod:`adfunnel.targeting.attributes`: ids
compared as given). Pure; the caller (:func:`adfunnel.openrtb.mapping.map_request`) asks
only when consent allows (no COPPA, GDPR with a consent string).

- **audiences**: each ``user.data[].segment[].id`` (a data provider's segment: the
  audience ids the operator's campaigns target are those its providers send).
- **interests**: ``user.keywords`` and ``user.kwarray``; of ``site`` (else ``app``) its
  ``cat``, ``sectioncat``, ``pagecat`` (IAB content category ids, ``IAB12-3``),
  ``keywords``, ``kwarray``, and its ``content``'s ``cat``, ``keywords`` and
  ``kwarray``. Keywords are the comma-separated words of the text, trimmed, as given
  (as the page tag's ``data-adf-keywords`` are).

Blank values and those over :data:`MAX_VALUE_CHARS` are left out (no campaign can
target them), repeats kept once, in request order, and at most
:data:`~adfunnel.serving.request.MAX_VALUES` per attribute (the select limit: the rest
only could have matched more campaigns, so dropping them never serves an ad a request
does not allow).
"""

from __future__ import annotations

from collections.abc import Iterable

from adfunnel.openrtb.request import App, BidRequest, Content, Site
from adfunnel.serving.request import MAX_VALUES

#: Longest interest or audience value kept (characters).
MAX_VALUE_CHARS = 256


def interest_attributes(req: BidRequest) -> dict[str, object]:
    """``interests`` and ``audiences`` of ``req`` (module doc); an attribute with no
    value is absent."""
    interests: dict[str, None] = {}  # an ordered set
    audiences: dict[str, None] = {}
    user = req.user
    if user is not None:
        _keep(interests, _words(user.keywords, user.kwarray))
        for data in user.data:
            _keep(audiences, (s.id for s in data.segment if s.id is not None))
    place: Site | App | None = req.site if req.site is not None else req.app
    if place is not None:
        _keep(interests, [*place.cat, *place.sectioncat, *place.pagecat])
        _keep(interests, _words(place.keywords, place.kwarray))
        content: Content | None = place.content
        if content is not None:
            _keep(interests, content.cat)
            _keep(interests, _words(content.keywords, content.kwarray))
    out: dict[str, object] = {}
    if interests:
        out["interests"] = list(interests)
    if audiences:
        out["audiences"] = list(audiences)
    return out


def _words(text: str | None, array: list[str]) -> list[str]:
    """The keywords of a comma-separated ``text`` and of the 2.6 ``kwarray``."""
    return [*(text.split(",") if text else ()), *array]


def _keep(into: dict[str, None], values: Iterable[str]) -> None:
    for value in values:
        if len(into) >= MAX_VALUES:
            return
        v = value.strip()
        if v and len(v) <= MAX_VALUE_CHARS:
            into[v] = None
