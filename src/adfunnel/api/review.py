"""Ad review: the reviewers' queue and their verdicts (roles ``reviewer`` and ``admin``).

Routes::

    GET  /v1/review/ads           200 {"items": [ad], "next_cursor"}  ads pending
                                  review, oldest first (``adfunnel.api.pagination``)
    POST /v1/ads/{id}:approve     200 ad     (optional body {"version"}: 409 if stale)
    POST /v1/ads/{id}:reject      200 ad

Only approved ads are served (``serving/catalog.py``); a rejected ad may be approved
later and the other way round. Errors: ``adfunnel.http_errors`` (404 unknown ad, 409
stale version, 403 for another role).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends

from adfunnel.api.ad_schemas import AdOut
from adfunnel.api.field_types import VersionIn
from adfunnel.api.pagination import (
    DEFAULT_LIMIT,
    Cursor,
    Limit,
    Page,
    decode_cursor,
    known_query_only,
    page,
)
from adfunnel.api.render import ad_out
from adfunnel.auth.http import require_role
from adfunnel.auth.keys import Role
from adfunnel.campaigns.model import ReviewState
from adfunnel.campaigns.store import CampaignStore

OptionalVersion = Annotated[VersionIn | None, Body()]


def make_review_router(store: CampaignStore) -> APIRouter:
    """The review routes over ``store``; the app must install the error handlers and
    :func:`adfunnel.auth.install_auth`."""
    router = APIRouter(tags=["review"],
                       dependencies=[Depends(require_role(Role.ADMIN, Role.REVIEWER)),
                                     Depends(known_query_only)])

    @router.get("/v1/review/ads", response_model=Page[AdOut])
    def review_queue(limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> Page[AdOut]:
        """Ads pending review (archived ones left out), oldest first."""
        start = decode_cursor("review", cursor, int)
        rows = store.list_ads_in_review(ReviewState.PENDING, after=start, limit=limit + 1)
        return page("review", [ad_out(a) for a in rows], limit, lambda a: a.id)

    def decide(ad_id: int, body: VersionIn | None, to: ReviewState) -> AdOut:
        version = body.version if body else None
        current = store.get_ad(ad_id)
        if current.review_state is to and version in (None, current.version):
            return ad_out(current)  # already decided so: nothing to write
        return ad_out(store.update_ad(ad_id, {"review_state": to}, version))

    @router.post("/v1/ads/{ad_id}:approve", response_model=AdOut)
    def approve(ad_id: int, body: OptionalVersion = None) -> AdOut:
        """Approve the ad: it is served from now on (if its campaign can deliver)."""
        return decide(ad_id, body, ReviewState.APPROVED)

    @router.post("/v1/ads/{ad_id}:reject", response_model=AdOut)
    def reject(ad_id: int, body: OptionalVersion = None) -> AdOut:
        """Reject the ad: it is not served."""
        return decide(ad_id, body, ReviewState.REJECTED)

    return router
