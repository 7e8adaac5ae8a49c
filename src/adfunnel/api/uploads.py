"""Creative uploads: ``POST /v1/creatives`` stores an image, ``GET /creatives/files/{name}``
serves it, and :meth:`Uploads.lookup` gives an ad its URL (``upload_id``).

Routes::

    POST /v1/creatives            201 upload (200: this advertiser's same image, kept)
         multipart/form-data: file (the image), advertiser_id (an admin key: required)
    GET  /v1/creatives/{upload_id} 200 upload
    GET  /creatives/files/{name}   200 the image (open: no key)

Who may call: ``POST`` an advertiser key (the upload is its advertiser's; another
``advertiser_id`` answers 422 "no such advertiser", as for campaigns) or an admin key
naming ``advertiser_id``; a reviewer gets 403. ``GET /v1/creatives/{id}`` whoever may
read the advertiser (others: 404). The files are public, as ads are.

The image is checked and re-encoded by :mod:`adfunnel.campaigns.image` (type from the
content, byte, pixel and frame limits; 413/422 naming ``file``). The body limit of this
route is the file's plus :data:`~adfunnel.settings.model.UPLOAD_FORM_OVERHEAD`, enforced while
the body is read (:class:`~adfunnel.body_limit.BodyLimit`), so a huge body is refused
before it is buffered. An upload's ``url`` is ``creative_url_prefix`` + the file's name
when that is set (a CDN or object store serves the files), else this server's
``/creatives/files/<name>``: in an ad (:meth:`Uploads.lookup`) as that path alone, never
under the request's ``Host`` (the serving side adds ``public_base_url``); in the upload
route's own answer under ``public_base_url``, or that path when it is unset.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, File, Form, Response, UploadFile
from fastapi.responses import FileResponse
from pydantic import BaseModel

from adfunnel.api import access
from adfunnel.api.access import Writer
from adfunnel.api.creatives import UploadedImage
from adfunnel.auth.http import Caller
from adfunnel.auth.keys import Principal, Role
from adfunnel.campaigns.creative import FILES_PATH, served_url
from adfunnel.campaigns.errors import NotFound
from adfunnel.campaigns.image import CONTENT_TYPES, ImageLimits, ImageRefused, clean_image
from adfunnel.campaigns.store import CampaignStore
from adfunnel.campaigns.uploads import (
    CreativeFiles,
    Upload,
    UploadStore,
    new_upload_id,
)
from adfunnel.clock import Clock
from adfunnel.http_errors import ApiError, validation_error

#: The path of the upload route (its own body limit, ``BodyLimit``'s ``routes``).
UPLOAD_PATH = "/v1/creatives"
#: Headers of a served file: its bytes are an image and nothing else, cached for good
#: (its name is its content's digest, so it never changes).
FILE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "public, max-age=31536000, immutable",
    "Cross-Origin-Resource-Policy": "cross-origin",
}

class UploadOut(BaseModel):
    upload_id: str
    advertiser_id: int
    url: str  # absolute: where pages load the image
    content_type: str  # as sniffed and stored: image/png, image/jpeg, image/gif, image/webp
    width: int  # pixels
    height: int
    bytes: int  # the stored (re-encoded) file's size
    created_at: datetime


@dataclass(frozen=True)
class Uploads:
    """The upload records, their files, the limits and how their URLs are made."""

    records: UploadStore
    files: CreativeFiles
    limits: ImageLimits
    url_prefix: str | None = None  # creative_url_prefix (ends with "/")
    public_base_url: str | None = None

    def stored_url(self, upload: Upload) -> str:
        """The upload's URL as an ad stores it: under ``creative_url_prefix``, else this
        server's path (``/creatives/files/<name>``, no origin)."""
        if self.url_prefix:
            return self.url_prefix + upload.file_name
        return FILES_PATH + upload.file_name

    def url(self, upload: Upload) -> str:
        """The upload's URL for the upload route's answer: under ``public_base_url``, or
        this server's path when that is unset (as the select answer gives it): never
        under the request's ``Host``."""
        return served_url(self.stored_url(upload), (self.public_base_url or "").rstrip("/"))

    def lookup(self, upload_id: str, advertiser_id: int) -> UploadedImage | None:
        """The advertiser's upload for an ad (``api.creatives.UploadLookup``); None for
        an unknown id or another advertiser's."""
        found = self.records.get(upload_id)
        if found is None or found.advertiser_id != advertiser_id:
            return None
        return UploadedImage(self.stored_url(found), found.width, found.height)


def make_upload_router(store: CampaignStore, uploads: Uploads, clock: Clock) -> APIRouter:
    """The upload routes over ``store`` (advertisers) and ``uploads``; ``clock`` stamps
    ``created_at``."""
    router = APIRouter()

    def out(upload: Upload) -> UploadOut:
        return UploadOut(upload_id=upload.id, advertiser_id=upload.advertiser_id,
                         url=uploads.url(upload),
                         content_type=upload.content_type, width=upload.width,
                         height=upload.height, bytes=upload.bytes,
                         created_at=upload.created_at)

    @router.post(UPLOAD_PATH, status_code=201, response_model=UploadOut, tags=["advertiser"],
                 responses={200: {"model": UploadOut,
                                  "description": "This advertiser's same image, kept"},
                            413: {"description": "The file is over the byte limit"}})
    def upload_creative(
        response: Response, who: Writer,
        file: Annotated[UploadFile, File(description="A PNG, JPEG, GIF or WebP image; its "
                                                     "type is read from its content")],
        advertiser_id: Annotated[int | None, Form(
            description="The advertiser the image is for (required with an admin key)")]
        = None,
    ) -> UploadOut:
        """Upload a creative image (multipart ``file``): checked, re-encoded without its
        metadata and stored; its ``upload_id`` goes in an image creative."""
        owner = _owner(store, who, advertiser_id)
        data = file.file.read(uploads.limits.max_bytes + 1)  # one byte past: "too large"
        try:
            image = clean_image(data, uploads.limits)
        except ImageRefused as exc:
            error = "too_large" if exc.status == 413 else "validation"
            raise ApiError(exc.status, error, fields=[("file", exc.problem)]) from None
        digest = hashlib.sha256(image.data).hexdigest()
        record = Upload(new_upload_id(), owner, digest, image.content_type, image.width,
                        image.height, len(image.data), clock.now())
        uploads.files.put(record.file_name, image.data)
        kept, new = uploads.records.add(record)
        if not new:
            response.status_code = 200
        return out(kept)

    @router.get(UPLOAD_PATH + "/{upload_id}", response_model=UploadOut, tags=["advertiser"])
    def get_upload(upload_id: str, who: Caller) -> UploadOut:
        found = uploads.records.get(upload_id)
        if found is None or not who.sees(found.advertiser_id):
            raise NotFound("upload", upload_id)  # type: ignore[arg-type]
        return out(found)

    @router.get(FILES_PATH + "{name}", tags=["creatives"], response_class=FileResponse,
                responses={200: {"description": "The image",
                                 "content": {t: {"schema": {"type": "string",
                                                            "format": "binary"}}
                                             for t in CONTENT_TYPES.values()}},
                           404: {"description": "No such file"}})
    def creative_file(name: str) -> FileResponse:
        """A stored creative image (open: no key), cached for good."""
        path = uploads.files.path(name)
        if path is None:
            raise ApiError(404, "not_found", fields=[("name", "no such file")])
        media = CONTENT_TYPES[name.rpartition(".")[2]]
        return FileResponse(path, media_type=media, headers=FILE_HEADERS)

    return router


def _owner(store: CampaignStore, who: Principal, advertiser_id: int | None) -> int:
    """The advertiser an upload is for: the key's own, or the admin's ``advertiser_id``.

    Raises:
        ApiError: 422 naming ``advertiser_id`` when an admin gives none, or it names an
            unknown advertiser (or, for an advertiser key, another one).
    """
    if advertiser_id is None:
        if who.role is Role.ADVERTISER and who.advertiser_id is not None:
            return who.advertiser_id
        raise validation_error(("advertiser_id", "is required with an admin key"))
    try:
        return access.advertiser(store, who, advertiser_id, write=True).id
    except NotFound:
        raise validation_error(("advertiser_id", "no such advertiser")) from None
