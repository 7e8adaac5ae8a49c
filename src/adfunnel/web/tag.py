"""``GET /tag.js``: the ad tag a page includes once (``adfunnel/static/tag/tag.js``, served
byte for byte as shipped: no build step).

Open to anyone (a page's ``<script src>``). Answers with a strong ``ETag`` (a digest of
the bytes) and a short public cache lifetime, so a new release reaches pages within
:data:`MAX_AGE_S` and a revalidation costs a 304.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

#: The tag's source, served as it is.
TAG_FILE = Path(__file__).resolve().parents[1] / "static" / "tag" / "tag.js"
TAG_PATH = "/tag.js"
#: Seconds a browser or CDN may keep the tag before revalidating it.
MAX_AGE_S = 300
#: The size budget of the tag as served, gzipped at level 9 (bytes).
GZIP_BUDGET_BYTES = 10_000


def tag_bytes() -> bytes:
    """The tag exactly as ``GET /tag.js`` serves it."""
    return TAG_FILE.read_bytes()


def tag_route() -> Route:
    """The route of ``GET /tag.js`` (the file is read once, here)."""
    body = tag_bytes()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    headers = {
        "etag": etag,
        "cache-control": f"public, max-age={MAX_AGE_S}",
        "x-content-type-options": "nosniff",
        # any page may include it, also one that isolates itself (COEP)
        "cross-origin-resource-policy": "cross-origin",
        "access-control-allow-origin": "*",
    }

    async def tag(request: Request) -> Response:
        if etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/javascript; charset=utf-8",
                        headers=headers)

    return Route(TAG_PATH, tag, methods=["GET"])
