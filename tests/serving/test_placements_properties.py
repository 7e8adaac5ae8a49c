"""Invariant of the applied reserve: the higher of the request's and the configured one."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from adfunnel.campaigns.model import Placement
from adfunnel.serving.decision import applied_reserve
from adfunnel.serving.request import MAX_RESERVE_CPM_MICROS, decode_request

RESERVES = st.integers(0, MAX_RESERVE_CPM_MICROS)
COUNTRIES = st.sampled_from(["US", "DE", "FR", "JP", "BR"])


@given(
    request_reserve=RESERVES,
    slot_reserve=st.none() | RESERVES,
    default=RESERVES,
    by_country=st.dictionaries(COUNTRIES, RESERVES, max_size=4),
    country=st.none() | COUNTRIES,
    lower=st.booleans(),
)
def test_applied_reserve_is_the_higher_of_request_and_configured(
    request_reserve: int, slot_reserve: int | None, default: int,
    by_country: dict[str, int], country: str | None, lower: bool,
) -> None:
    slot: dict[str, object] = {"id": "s1", "position": 1, "width": 300, "height": 250}
    if slot_reserve is not None:
        slot["reserve_cpm_micros"] = slot_reserve
    attributes = {} if country is None else {"geo.country": country.lower() if lower else country}
    req = decode_request(json.dumps({
        "user": {"key": "u", "attributes": attributes},
        "placement": {"id": "feed", "reserve_cpm_micros": request_reserve},
        "slots": [slot],
    }).encode())
    placement = Placement("feed", "Feed", default, by_country)
    asked = request_reserve if slot_reserve is None else slot_reserve
    configured = by_country.get(country, default) if country else default

    applied = applied_reserve(req, req.slots[0], placement)
    assert applied >= asked and applied >= configured
    assert applied in (asked, configured)  # the higher of the two, never a blend
    assert applied_reserve(req, req.slots[0], None) == asked  # unconfigured: the request's only
