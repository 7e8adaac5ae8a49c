"""The advertiser API's ad routes: create an ad of a campaign, list a campaign's ads, read,
patch and archive one ad (routes listed in :mod:`adfunnel.api.campaigns`).

Visibility and review states follow :mod:`adfunnel.api.access`; an image creative's
``upload_id`` is resolved by :mod:`adfunnel.api.creatives`.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from adfunnel.api import access
from adfunnel.api.access import Writer
from adfunnel.api.ad_schemas import AdIn, AdOut, AdPatch
from adfunnel.api.creatives import UploadLookup, creative_of
from adfunnel.api.pagination import DEFAULT_LIMIT, Cursor, Limit, Page, by_id, decode_cursor, page
from adfunnel.api.render import ad_out
from adfunnel.api.write_bodies import patch_changes
from adfunnel.auth.http import Caller
from adfunnel.campaigns.model import AdStatus
from adfunnel.campaigns.store import CampaignStore
from adfunnel.http_errors import validation_error


def add_ad_routes(router: APIRouter, store: CampaignStore, uploads: UploadLookup | None) -> None:
    """Add the ad routes over ``store`` to ``router``; ``uploads`` finds an advertiser's
    uploaded image (none: every ``upload_id`` is unknown)."""

    @router.post("/v1/campaigns/{campaign_id}/ads", status_code=201, response_model=AdOut)
    def create_ad(campaign_id: int, body: AdIn, who: Writer, response: Response) -> AdOut:
        campaign = access.campaign(store, who, campaign_id, write=True)
        if body.status is AdStatus.ARCHIVED:
            raise validation_error(("status", "must be active or paused"))
        values = body.model_dump(exclude={"creative"})
        if body.creative is None and body.creative_ref is None:
            raise validation_error(("creative_ref", "is required (or give creative)"))
        values["creative_ref"] = body.creative_ref or ""
        if body.creative is not None:
            values["creative"] = creative_of(body.creative, uploads, campaign.advertiser_id)
        values["review_state"] = access.new_review_state(who, body)
        created = store.create_ad(campaign_id=campaign_id, **values)
        response.headers["Location"] = f"/v1/ads/{created.id}"
        return ad_out(created)

    @router.get("/v1/campaigns/{campaign_id}/ads", response_model=Page[AdOut])
    def list_ads(campaign_id: int, who: Caller, include_archived: bool = False,
                 limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> Page[AdOut]:
        """The campaign's ads by id (archived ones only with ``include_archived``)."""
        access.campaign(store, who, campaign_id)  # 404 for an unknown or hidden one
        start = decode_cursor(f"ads-{campaign_id}", cursor, int)
        rows = store.list_ads(campaign_id, after=start, limit=limit + 1,
                              include_archived=include_archived)
        return page(f"ads-{campaign_id}", [ad_out(a) for a in rows], limit, by_id)

    @router.get("/v1/ads/{ad_id}", response_model=AdOut)
    def get_ad(ad_id: int, who: Caller) -> AdOut:
        return ad_out(access.ad(store, who, ad_id))

    @router.patch("/v1/ads/{ad_id}", response_model=AdOut)
    def patch_ad(ad_id: int, body: AdPatch, who: Writer) -> AdOut:
        current = access.ad(store, who, ad_id, write=True)
        changes = access.ad_changes(who, body,
                                    patch_changes(body, frozenset({"creative", "bundle"})))
        if body.creative is not None:
            owner = store.get_campaign(current.campaign_id).advertiser_id
            changes["creative"] = creative_of(body.creative, uploads, owner)
        if changes.get("status") is AdStatus.ARCHIVED:
            raise validation_error(("status", "archive with DELETE /v1/ads/{id}"))
        return ad_out(store.update_ad(ad_id, changes, body.version))

    @router.delete("/v1/ads/{ad_id}", status_code=204)
    def archive_ad(ad_id: int, who: Writer) -> Response:
        """Archive the ad: never served again nor listed by default; its record and
        its history stay. Archiving it again changes nothing."""
        current = access.ad(store, who, ad_id, write=True, archived_ok=True)
        if current.status is not AdStatus.ARCHIVED:
            store.update_ad(ad_id, {"status": AdStatus.ARCHIVED})
        return Response(status_code=204)
