"""House ads: the operator's own creative in a slot that no paid ad fills.

A placement may carry one house ad (``adfunnel.campaigns.model.HouseAd``). After the
auction, every slot still empty whose format and size equal the house ad's gets it,
at price 0, flagged ``house: true`` in the answer. Its token names campaign and ad
:data:`~adfunnel.campaigns.model.HOUSE_ID` (0, which no stored record has) with price
0, so the tracker counts its impressions and clicks but never bills them, and no
budget, pacing or click model ever sees them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from adfunnel.campaigns.model import HOUSE_ID, HouseAd, Placement
from adfunnel.serving.request import AdOut, SlotIn
from adfunnel.tracking.token import TokenClaims, sign
from adfunnel.tracking.token_claims import new_impression_id

#: ``billing_type`` of a house ad in the answer (nothing is billed).
HOUSE_BILLING = "house"


@dataclass(frozen=True, slots=True)
class HouseFill:
    """A slot answered with the placement's house ad."""

    slot_id: str
    ad: HouseAd
    token: str

    def ad_out(self) -> AdOut:
        """The wire form: ad and campaign id 0, price 0, ``house`` set."""
        return AdOut(
            slot_id=self.slot_id, ad_id=HOUSE_ID, campaign_id=HOUSE_ID,
            creative_ref=self.ad.creative_ref, format=self.ad.format,
            width=self.ad.width, height=self.ad.height, price_micros=0,
            billing_type=HOUSE_BILLING, token=self.token,
            impression_url=f"/i?t={self.token}", click_url=f"/c?t={self.token}",
            viewable_url=f"/vi?t={self.token}", house=True,
        )


def house_fills(
    placement: Placement | None,
    slots: Sequence[SlotIn],
    filled: Collection[str],
    now: datetime,
    token_key: bytes,
    token_ttl_s: int,
) -> list[HouseFill]:
    """The house ad in each slot of ``slots`` not in ``filled`` (slot ids) that it fits.

    Empty when the placement is unknown or has no house ad.
    """
    house = placement.house_ad if placement is not None else None
    if placement is None or house is None:
        return []
    shape = (house.format, house.width, house.height)
    issued = int(now.timestamp())
    return [
        HouseFill(s.id, house, sign(_claims(placement.id, issued, token_ttl_s), token_key))
        for s in slots
        if s.id not in filled and (s.format, s.width, s.height) == shape
    ]


def _claims(placement_id: str, issued: int, ttl_s: int) -> TokenClaims:
    # price 0 under a billing type the token knows; campaign HOUSE_ID marks it unbillable
    return TokenClaims(
        impression_id=new_impression_id(), ad_id=HOUSE_ID, campaign_id=HOUSE_ID,
        price_micros=0, billing_type="CPM", placement=placement_id,
        issued_at=issued, expires_at=issued + ttl_s,
    )
