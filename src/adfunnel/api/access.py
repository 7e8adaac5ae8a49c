"""Who may see and change which advertiser records (:mod:`adfunnel.auth` principals).

An advertiser key sees only its own advertiser: a record of another advertiser is
answered as if it did not exist (404, :class:`NotFound`), so ids reveal nothing.
Reviewers read every record and change none (the routes refuse them with 403).
Review states are the reviewers' (and the admin's): an advertiser's new ad starts
``pending_review``, and an advertiser's change to what an ad shows sends it back there.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends

from adfunnel.api.ad_schemas import AdIn, AdPatch
from adfunnel.auth.http import forbidden, require_role
from adfunnel.auth.keys import Principal, Role
from adfunnel.campaigns.errors import NotFound
from adfunnel.campaigns.model import (
    Ad,
    AdStatus,
    Advertiser,
    Campaign,
    CampaignStatus,
    Priority,
    ReviewState,
)
from adfunnel.campaigns.store import CampaignStore
from adfunnel.http_errors import ApiError

#: A caller that may change advertiser records: an admin or an advertiser (403 else).
Writer = Annotated[Principal, Depends(require_role(Role.ADMIN, Role.ADVERTISER))]

#: Ad fields whose change by an advertiser needs a new review (the reviewer checks the
#: declared categories, domains and app too: dropping one would dodge block lists).
REVIEWED_FIELDS = frozenset({"landing_url", "creative_ref", "creative", "format", "width",
                             "height", "categories", "adomain", "bundle"})


def _allowed(who: Principal, advertiser_id: int, write: bool) -> bool:
    return who.owns(advertiser_id) if write else who.sees(advertiser_id)


def advertiser(store: CampaignStore, who: Principal, advertiser_id: int, *,
               write: bool = False) -> Advertiser:
    """The advertiser, when ``who`` may read it (or change its records, ``write``).

    Raises:
        NotFound: unknown, or hidden from ``who``.
    """
    found = store.get_advertiser(advertiser_id)
    if not _allowed(who, found.id, write):
        raise NotFound("advertiser", advertiser_id)
    return found


def campaign(store: CampaignStore, who: Principal, campaign_id: int, *,
             write: bool = False, archived_ok: bool = False) -> Campaign:
    """The campaign, when ``who`` may read it (or change it, ``write``: not once it is
    archived, unless ``archived_ok``).

    Raises:
        NotFound: unknown, or of an advertiser hidden from ``who``.
        ApiError: 409 ``archived`` for a write to an archived campaign.
    """
    found = store.get_campaign(campaign_id)
    if not _allowed(who, found.advertiser_id, write):
        raise NotFound("campaign", campaign_id)
    if write and not archived_ok and found.status is CampaignStatus.ARCHIVED:
        raise archived("campaign", campaign_id)
    return found


def ad(store: CampaignStore, who: Principal, ad_id: int, *, write: bool = False,
       archived_ok: bool = False) -> Ad:
    """The ad, when ``who`` may read it (or change it, ``write``: not once it or its
    campaign is archived, unless ``archived_ok``).

    Raises:
        NotFound: unknown, or of an advertiser hidden from ``who``.
        ApiError: 409 ``archived`` for a write to an archived ad or campaign.
    """
    found = store.get_ad(ad_id)
    try:
        campaign(store, who, found.campaign_id, write=write, archived_ok=archived_ok)
    except NotFound:
        raise NotFound("ad", ad_id) from None
    if write and not archived_ok and found.status is AdStatus.ARCHIVED:
        raise archived("ad", ad_id)
    return found


def archived(entity: str, entity_id: int) -> ApiError:
    """409: an archived record is kept as history and no longer changes."""
    return ApiError(409, "archived", f"{entity} {entity_id} is archived",
                    fields=[("status", f"the {entity} is archived")])


def new_review_state(who: Principal, body: AdIn) -> ReviewState:
    """The review state of a new ad: ``pending_review`` for an advertiser's; an admin's
    as given (default ``approved``).

    Raises:
        ApiError: 403 when an advertiser asks for another state.
    """
    if who.role is Role.ADMIN:
        return body.review_state
    if "review_state" in body.model_fields_set and body.review_state is not ReviewState.PENDING:
        raise forbidden("review_state", "set by a reviewer; a new ad starts pending_review")
    return ReviewState.PENDING


def ad_changes(who: Principal, body: AdPatch, changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` of an ad PATCH as ``who`` may make them: an advertiser's change of
    what the ad shows (:data:`REVIEWED_FIELDS`) sends it back to ``pending_review``.

    Raises:
        ApiError: 403 when an advertiser sets ``review_state``.
    """
    if who.role is Role.ADMIN:
        return changes
    if "review_state" in changes:
        raise forbidden("review_state", "set by a reviewer (POST /v1/ads/{id}:approve)")
    if REVIEWED_FIELDS & body.model_fields_set:
        changes = {**changes, "review_state": ReviewState.PENDING}
    return changes


#: Why an advertiser key may not write a direct line's terms.
DIRECT_TERMS = ("sponsorship and guaranteed lines are sold by the operator: their terms "
                "(priority, goal, contract rate, budget, flight, targeting) need an admin key")


def direct_line_terms(who: Principal, current: Priority | None, changes: dict[str, Any]
                      ) -> None:
    """Refuse an advertiser key's write of a direct line's terms: creating a campaign
    (``current`` None) whose ``priority`` is not ``auction``, moving a campaign to
    another priority, or changing any field of a sponsorship or guaranteed line. Such a
    line is served ahead of the auction and below the placement's reserve at its
    contract rate, so an advertiser that set its own would take every slot at any price.
    Pausing and resuming stay the advertiser's (they only hold its own delivery back).

    Raises:
        ApiError: 403 naming ``priority`` or the first field changed.
    """
    if who.role is Role.ADMIN:
        return
    wanted = changes.get("priority")
    if current is None:
        if wanted not in (None, Priority.AUCTION):
            raise forbidden("priority", DIRECT_TERMS)
        return
    if wanted is not None and wanted is not current:
        raise forbidden("priority", DIRECT_TERMS)
    if current is not Priority.AUCTION:
        fields = [f for f in changes if f != "version"]
        if fields:
            raise forbidden(fields[0], DIRECT_TERMS)
