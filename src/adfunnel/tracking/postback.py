"""The authenticated server-to-server conversion postback::

    POST /v1/conversions   {"click_id": "<adf_click_id>", "value_micros": 1200000}
                           202 {"impression_id", "campaign_id", "status": "accepted"}

Who may call it: an advertiser key, for clicks of its own advertiser's campaigns only
(another advertiser's click id answers 404, as every cross-advertiser id does), or an
admin key; a reviewer key is refused (403). The click id is the one the click's
redirect handed to the landing page (``adf_click_id``); it is verified as the pixel
``/v`` verifies it (a serve token, a forged id, an invalid-traffic click's id: 400
naming ``click_id``). The conversion is appended to the event log like the pixel's and
billed by the aggregator at most once per click (the ledger's unique (impression id,
event type)), so a retried postback is safe. No tier-1 address rules apply: the
caller is the advertiser's server, not a browser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from adfunnel.auth.http import require_role
from adfunnel.auth.keys import Principal, Role
from adfunnel.events.model import EventType
from adfunnel.http_errors import ApiError
from adfunnel.tracking.beacons import UNAVAILABLE, Tracker
from adfunnel.tracking.token import InvalidToken
from adfunnel.tracking.token_wire import MAX_TOKEN_CHARS

__all__ = ["ConversionAccepted", "ConversionIn", "make_conversion_router"]

_INT64_MAX = 2**63 - 1
#: Who may post a conversion: an advertiser (its own clicks) or the admin.
Poster = Annotated[Principal, Depends(require_role(Role.ADMIN, Role.ADVERTISER))]


class ConversionIn(BaseModel):
    """A conversion of one click: its click id, and its value in integer micros."""

    model_config = ConfigDict(extra="forbid")

    click_id: str = Field(min_length=1, max_length=MAX_TOKEN_CHARS)
    value_micros: int | None = Field(default=None, ge=0, le=_INT64_MAX, strict=True)


class ConversionAccepted(BaseModel):
    """The conversion is in the event log; the ledger bills it at most once."""

    impression_id: str
    campaign_id: int
    status: str = "accepted"


def make_conversion_router(tracker: Tracker,
                           advertiser_of: Callable[[int], int | None]) -> APIRouter:
    """The postback route over ``tracker``; ``advertiser_of(campaign id)`` is the
    campaign's advertiser id, or None for an unknown campaign."""
    router = APIRouter(tags=["tracking"])

    @router.post("/v1/conversions", status_code=202, response_model=ConversionAccepted)
    async def post_conversion(body: ConversionIn,
                              who: Poster) -> ConversionAccepted:
        """Attribute one conversion to the click ``click_id`` names (202)."""
        try:
            claims = tracker.click_claims(body.click_id)
        except InvalidToken as exc:
            raise ApiError(400, "invalid_token", fields=[("click_id", exc.reason)]) from None
        owner = advertiser_of(claims.campaign_id)
        if owner is None or not who.owns(owner):
            raise ApiError(404, "not_found", fields=[("click_id", "no such click")])
        result = await tracker.beacon(EventType.CONVERSION, body.click_id, None,
                                      body.value_micros)
        if result.outcome == UNAVAILABLE:
            raise ApiError(503, "event_log_unavailable",
                           fields=[("click_id", "the event could not be stored; retry")])
        if result.event is None:  # verified above; only a house ad's click lands here
            raise ApiError(404, "not_found", fields=[("click_id", "no such click")])
        return ConversionAccepted(impression_id=claims.impression_id,
                                  campaign_id=claims.campaign_id)

    return router
