"""The API-key routes (admin only)::

    POST   /v1/api-keys            201 {"key", "prefix", "role", "advertiser_id",
                                        "created_at"}   Location: /v1/api-keys/{prefix}
                                   (``key`` appears in this answer only, never again)
    GET    /v1/api-keys            200 {"items": [key without "key"], "next_cursor"}
    GET    /v1/api-keys/{prefix}   200 key without "key"
    DELETE /v1/api-keys/{prefix}   204 (revoked at once); 404 for no live key

Errors (``adfunnel.http_errors``): 422 naming ``role`` or ``advertiser_id`` (an
advertiser key needs an existing advertiser; other roles take none).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from adfunnel.api.pagination import (
    DEFAULT_LIMIT,
    Cursor,
    Limit,
    Page,
    after,
    decode_cursor,
    known_query_only,
    page,
)
from adfunnel.auth.http import require_role
from adfunnel.auth.keys import ApiKey, Role
from adfunnel.auth.service import ApiKeys, KeyProblem
from adfunnel.campaigns.errors import NotFound
from adfunnel.campaigns.store import CampaignStore
from adfunnel.http_errors import ApiError, validation_error

__all__ = ["ApiKeyIn", "ApiKeyIssued", "ApiKeyOut", "make_api_key_router"]


class ApiKeyIn(BaseModel):
    """A key to issue: ``advertiser_id`` for (and only for) ``role`` advertiser."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["admin", "advertiser", "reviewer"]
    advertiser_id: int | None = Field(default=None, ge=1)


class ApiKeyOut(BaseModel):
    """A stored key: its public ``prefix`` (first characters of the key), never the key."""

    prefix: str
    role: str
    advertiser_id: int | None
    created_at: datetime


class ApiKeyIssued(ApiKeyOut):
    """A key just issued: ``key`` is shown here once; store it now."""

    key: str


def key_out(k: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(prefix=k.prefix, role=k.role.value, advertiser_id=k.advertiser_id,
                     created_at=k.created_at)


def make_api_key_router(keys: ApiKeys, store: CampaignStore) -> APIRouter:
    """The ``/v1/api-keys`` routes over ``keys``; ``store`` checks advertiser ids."""
    router = APIRouter(tags=["api keys"], dependencies=[Depends(require_role(Role.ADMIN)),
                                                        Depends(known_query_only)])

    @router.post("/v1/api-keys", status_code=201, response_model=ApiKeyIssued)
    def create_key(body: ApiKeyIn, response: Response) -> ApiKeyIssued:
        if body.advertiser_id is not None:
            try:
                store.get_advertiser(body.advertiser_id)
            except NotFound:
                raise validation_error(("advertiser_id", "no such advertiser")) from None
        try:
            issued = keys.issue(body.role, body.advertiser_id)
        except KeyProblem as exc:
            raise validation_error((exc.field, exc.problem)) from None
        response.headers["Location"] = f"/v1/api-keys/{issued.record.prefix}"
        return ApiKeyIssued(key=issued.key, **key_out(issued.record).model_dump())

    @router.get("/v1/api-keys", response_model=Page[ApiKeyOut])
    def list_keys(limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> Page[ApiKeyOut]:
        """Live keys in creation order (see :func:`_position`)."""
        start = decode_cursor("api-keys", cursor, str)
        listed = sorted((key_out(k) for k in keys.list()), key=_position)
        rows = after(listed, _position, start, limit)
        return page("api-keys", rows, limit, _position)

    @router.get("/v1/api-keys/{prefix}", response_model=ApiKeyOut)
    def get_key(prefix: str) -> ApiKeyOut:
        found = next((k for k in keys.list() if k.prefix == prefix), None)
        if found is None:
            raise _no_key(prefix)
        return key_out(found)

    @router.delete("/v1/api-keys/{prefix}", status_code=204)
    def revoke_key(prefix: str) -> Response:
        if not keys.revoke(prefix):
            raise _no_key(prefix)
        return Response(status_code=204)

    return router


def _position(k: ApiKeyOut) -> str:
    """A key's place in the list, ``created_at`` (UTC, microseconds) then prefix, as text
    that sorts like the pair: a key created after a page was read sorts after it, unless
    created in the very microsecond of a key already shown (a manual clock held still)
    with a lower prefix. (A prefix alone is random: a new key fell on pages already read.)
    """
    return f"{k.created_at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}|{k.prefix}"


def _no_key(prefix: str) -> ApiError:
    return ApiError(404, "not_found", f"no live API key {prefix}",
                    fields=[("prefix", "no live API key has this prefix")])
