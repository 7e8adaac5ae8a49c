"""An ad's block fields in the advertiser API (#28): ``categories`` (IAB content taxonomy
1.0 ids), ``adomain`` (advertiser domains) and ``bundle`` (the app it promotes), what a
request's block lists refuse. Each is checked and put in the canonical form the store
keeps (:mod:`adfunnel.targeting.blocks`); a bad value is a 422 naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, Field, Strict

from adfunnel.targeting.blocks import (
    MAX_BUNDLE_CHARS,
    MAX_CATEGORIES,
    MAX_DOMAINS,
    BlockValueError,
    normalise_bundle,
    normalise_category,
    normalise_domain,
    normalise_list,
)


def _blocks(one: Callable[[object], str], limit: int) -> Callable[[list[str]], list[str]]:
    def check(values: list[str]) -> list[str]:
        try:  # canonical and deduplicated, as the store keeps them
            return list(normalise_list(values, one, limit))
        except BlockValueError as exc:
            raise ValueError(str(exc)) from None
    return check


def _bundle(value: str) -> str:
    try:
        return normalise_bundle(value)
    except BlockValueError as exc:
        raise ValueError(str(exc)) from None


_Short = Annotated[str, Strict(), Field(max_length=300)]
#: An ad's IAB content taxonomy 1.0 ids (``IAB7-39``), what a request's block list refuses.
Categories = Annotated[list[_Short], Field(max_length=10 * MAX_CATEGORIES),
                       AfterValidator(_blocks(normalise_category, MAX_CATEGORIES))]
#: An ad's advertiser domains (``ford.com``: a host name, no scheme or path).
Domains = Annotated[list[_Short], Field(max_length=10 * MAX_DOMAINS),
                    AfterValidator(_blocks(normalise_domain, MAX_DOMAINS))]
#: The app an ad promotes: its bundle or store id (``com.foo.mygame``).
Bundle = Annotated[str, Strict(), Field(max_length=MAX_BUNDLE_CHARS + 100),
                   AfterValidator(_bundle)]
