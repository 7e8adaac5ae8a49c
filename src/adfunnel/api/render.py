"""The API's views of campaign-side records: advertisers, campaigns and ads as the
response bodies of :mod:`adfunnel.api.campaign_schemas` and :mod:`adfunnel.api.ad_schemas`.

One view each, shared by every router that answers with such a record (advertiser
routes, review, operator).
"""

from __future__ import annotations

import json
from datetime import datetime

from adfunnel.api.ad_schemas import AdOut
from adfunnel.api.campaign_schemas import (
    AdvertiserOut,
    CampaignOut,
    CampaignWritten,
    FieldProblemOut,
)
from adfunnel.campaigns import codec
from adfunnel.campaigns.checks import campaign_warnings
from adfunnel.campaigns.model import Ad, Advertiser, Campaign


def advertiser_out(a: Advertiser) -> AdvertiserOut:
    return AdvertiserOut(id=a.id, name=a.name, version=a.version)


def campaign_out(c: Campaign) -> CampaignOut:
    """The API view of a campaign; targeting is returned as the JSON tree it was given."""
    payload = codec.to_payload(c)
    payload["targeting"] = json.loads(c.targeting) if c.targeting else None
    return CampaignOut.model_validate(payload)


def written_out(c: Campaign, now: datetime) -> CampaignWritten:
    """:func:`campaign_out` plus ``warnings`` (``adfunnel.campaigns.checks``), which is
    set only when there are some: routes answer with ``response_model_exclude_unset``."""
    out = CampaignWritten.model_validate(campaign_out(c).model_dump())
    warnings = campaign_warnings(c, now)
    if warnings:
        out.warnings = [FieldProblemOut(field=f, problem=p) for f, p in warnings]
    return out


def ad_out(ad: Ad) -> AdOut:
    return AdOut.model_validate(codec.to_payload(ad))
