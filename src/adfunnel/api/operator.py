"""The operator API: settings that belong to the platform, not to advertisers.

Routes (JSON bodies; money in integer micros)::

    POST  /v1/placements             201 placement   (409 when the id exists)
    GET   /v1/placements             200 {"items": [placement], "next_cursor"}
    GET   /v1/placements/{id}        200 placement
    PATCH /v1/placements/{id}        200 placement   (body "version": 409 if stale)
    PUT   /v1/ads/{id}/quality       200 ad          (body "version": 409 if stale)
    POST  /v1/admin/models           201 model       (body "path": an artifact; 422 if
                                                      it is not one) — now the active one
                                                      of its target (click, conversion)
    GET   /v1/admin/models           200 {"items": [model], "next_cursor"}
    GET   /v1/admin/models/{id}      200 model
    GET   /v1/placements/{id}/report 200 requests, fill, revenue and eCPM of one
                                         placement (``adfunnel.api.placement_report``)
    GET   /v1/placements/{id}/report/rollups 200 its rollups over every campaign
                                         (``adfunnel.api.reports``)

Every route here is the admin's (the router's guard, ``adfunnel.auth``): these routes
are apart from the advertiser routes (the advertiser's ad create/PATCH refuse
``quality_micros``). Errors: ``adfunnel.http_errors`` (403 for another role).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Depends, Response

from adfunnel.api.ad_schemas import AdOut
from adfunnel.api.operator_schemas import (
    PLACEMENT_NULLABLE,
    ModelIn,
    ModelOut,
    PlacementIn,
    PlacementOut,
    PlacementPatch,
    QualityIn,
)
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
from adfunnel.api.write_bodies import patch_changes
from adfunnel.auth.http import require_role
from adfunnel.auth.keys import Role
from adfunnel.campaigns import codec
from adfunnel.campaigns.errors import AlreadyExists
from adfunnel.campaigns.model import Placement
from adfunnel.campaigns.store import CampaignStore
from adfunnel.campaigns.validate import storable_id
from adfunnel.http_errors import ApiError, validation_error

__all__ = ["make_operator_router", "placement_out"]


def placement_out(p: Placement) -> PlacementOut:
    return PlacementOut.model_validate(codec.to_payload(p))


def make_operator_router(store: CampaignStore) -> APIRouter:
    """The operator routes over ``store``; the app must also install the error handlers."""
    router = APIRouter(tags=["operator"], dependencies=[Depends(require_role(Role.ADMIN)),
                                                        Depends(known_query_only)])

    @router.post("/v1/placements", status_code=201, response_model=PlacementOut)
    def create_placement(body: PlacementIn, response: Response) -> PlacementOut:
        try:
            created = store.create_placement(**body.model_dump())
        except AlreadyExists as exc:
            raise ApiError(409, "conflict", str(exc), fields=[("id", "already exists")]) from exc
        response.headers["Location"] = f"/v1/placements/{quote(created.id, safe='')}"
        return placement_out(created)

    @router.get("/v1/placements", response_model=Page[PlacementOut])
    def list_placements(limit: Limit = DEFAULT_LIMIT,
                        cursor: Cursor = None) -> Page[PlacementOut]:
        start = decode_cursor("placements", cursor, str)
        rows = store.list_placements(after=start, limit=limit + 1)
        return page("placements", [placement_out(p) for p in rows], limit, lambda p: p.id)

    @router.get("/v1/placements/{placement_id}", response_model=PlacementOut)
    def get_placement(placement_id: str) -> PlacementOut:
        return placement_out(store.get_placement(placement_id))

    @router.patch("/v1/placements/{placement_id}", response_model=PlacementOut)
    def patch_placement(placement_id: str, body: PlacementPatch) -> PlacementOut:
        changes = patch_changes(body, PLACEMENT_NULLABLE)
        return placement_out(store.update_placement(placement_id, changes, body.version))

    @router.post("/v1/admin/models", status_code=201, response_model=ModelOut)
    def register_model(body: ModelIn, response: Response) -> ModelOut:
        """Serve with this model (a click model, the conversion model of CPA
        candidates, or a shading release: first-price shading's win curves) from now
        on: every ad server loads it through the change log, without a restart."""
        from adfunnel.prediction.model import ClickModel, ModelError
        from adfunnel.prediction.shading_release import ShadingRelease, is_shading_artifact

        path = Path(body.path)
        try:
            model: ClickModel | ShadingRelease = (
                ShadingRelease.load(path) if is_shading_artifact(path) else ClickModel.load(path))
        except ModelError as exc:
            raise validation_error(("path", str(exc))) from None
        release = store.register_model(model.version, body.path, model.dataset,
                                       model.target)
        response.headers["Location"] = f"/v1/admin/models/{release.id}"
        return ModelOut(**dataclasses.asdict(release), metrics=model.metrics)

    @router.get("/v1/admin/models", response_model=Page[ModelOut])
    def list_models(limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> Page[ModelOut]:
        start = decode_cursor("models", cursor, int)
        rows = store.list_models(after=start, limit=limit + 1)
        return page("models", [ModelOut(**dataclasses.asdict(m)) for m in rows], limit,
                    lambda m: m.id)

    @router.get("/v1/admin/models/{model_id}", response_model=ModelOut)
    def get_model(model_id: int) -> ModelOut:
        found = (next(iter(store.list_models(after=model_id - 1, limit=1)), None)
                 if storable_id(model_id) else None)  # past 64 bits: no release
        if found is None or found.id != model_id:
            raise ApiError(404, "not_found", f"no model release {model_id}",
                           fields=[("model_id", "not found")])
        return ModelOut(**dataclasses.asdict(found))

    @router.put("/v1/ads/{ad_id}/quality", response_model=AdOut)
    def put_quality(ad_id: int, body: QualityIn) -> AdOut:
        changes = {"quality_micros": body.quality_micros}
        return ad_out(store.update_ad(ad_id, changes, body.version))

    return router

