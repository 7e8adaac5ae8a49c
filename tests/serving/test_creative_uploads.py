"""Creative uploads over HTTP on a real embedded app (in-memory SQLite, files in a
temporary ``creative_dir``): who may upload, the type read from the content (never the
name or the declared type), limits naming ``file``, the served file's headers, the URL
prefix, and an ad made from an upload — only its own advertiser's — served with the
upload's URL in the select answer."""

from __future__ import annotations

import asyncio
import hashlib
import io
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from adfunnel.auth.keys import Role
from adfunnel.body_limit import BodyLimit
from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.settings import SettingsError, load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.conftest import START
from tests.serving.helpers import SettlingClient, ad_request, make_campaign

BASE = "https://ads.test"
MAX_BYTES = 50_000


@pytest.fixture
def settings_over() -> dict[str, Any]:
    return {}


@pytest.fixture
def runtime(tmp_path: Path, settings_over: dict[str, Any]) -> Iterator[Runtime]:
    given: dict[str, Any] = {"creative_max_bytes": MAX_BYTES, "public_base_url": BASE,
                             **settings_over}
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY, creative_dir=str(tmp_path / "creatives"),
                             creative_max_pixels=1_000_000, **given)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    yield rt
    rt.close()


@pytest.fixture
def client(runtime: Runtime) -> Iterator[TestClient]:
    with SettlingClient(build_app(runtime), runtime, headers=ADMIN_HEADERS) as c:
        yield c


def image(fmt: str = "PNG", size: tuple[int, int] = (600, 500)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (20, 120, 220)).save(out, fmt)
    return out.getvalue()


def key_of(runtime: Runtime, advertiser_id: int) -> dict[str, str]:
    key = runtime.keys.issue(Role.ADVERTISER, advertiser_id=advertiser_id).key
    return {"Authorization": f"Bearer {key}"}


def upload(client: TestClient, data: bytes, headers: dict[str, str] | None = None,
           name: str = "ad.png", ctype: str = "image/png", **form: Any) -> Any:
    return client.post("/v1/creatives", files={"file": (name, data, ctype)},
                       data={k: str(v) for k, v in form.items()}, headers=headers)


def anonymous(client: TestClient) -> TestClient:
    """A client of the same app that sends no key."""
    return TestClient(client.app)


def problem(r: Any, status: int, field: str) -> str:
    assert r.status_code == status, r.text
    fields = {f["field"]: f["problem"] for f in r.json()["fields"]}
    assert field in fields, r.text
    return fields[field]


@pytest.fixture
def advertiser(client: TestClient, runtime: Runtime) -> dict[str, Any]:
    adv = client.post("/v1/advertisers", json={"name": "A"}).json()
    return {"id": adv["id"], "headers": key_of(runtime, adv["id"])}


@pytest.mark.parametrize(("fmt", "ctype", "ext"), [
    ("PNG", "image/png", "png"), ("JPEG", "image/jpeg", "jpg"),
    ("GIF", "image/gif", "gif"), ("WEBP", "image/webp", "webp")])
def test_each_format_is_stored_and_served(client: TestClient, advertiser: dict[str, Any],
                                          fmt: str, ctype: str, ext: str) -> None:
    r = upload(client, image(fmt), advertiser["headers"], name=f"x.{ext}", ctype=ctype)
    assert r.status_code == 201, r.text
    got = r.json()
    assert got["content_type"] == ctype and (got["width"], got["height"]) == (600, 500)
    assert got["advertiser_id"] == advertiser["id"] and len(got["upload_id"]) == 32
    assert got["url"].startswith(f"{BASE}/creatives/files/") and got["url"].endswith(ext)
    served = anonymous(client).get(got["url"].removeprefix(BASE))  # open: no key
    assert served.status_code == 200 and served.headers["content-type"] == ctype
    assert len(served.content) == got["bytes"]
    assert got["url"].rsplit("/", 1)[1] == f"{hashlib.sha256(served.content).hexdigest()}.{ext}"
    assert served.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in served.headers["content-security-policy"]
    assert served.headers["cache-control"] == "public, max-age=31536000, immutable"


def test_the_type_comes_from_the_content_not_the_name_or_declared_type(
        client: TestClient, advertiser: dict[str, Any]) -> None:
    r = upload(client, image("PNG"), advertiser["headers"], name="x.jpg", ctype="image/jpeg")
    assert r.status_code == 201 and r.json()["content_type"] == "image/png"
    assert r.json()["url"].endswith(".png")
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    assert "SVG" in problem(upload(client, svg, advertiser["headers"], name="x.png"),
                            422, "file")
    text = upload(client, b"just text\n", advertiser["headers"], name="x.gif",
                  ctype="image/gif")
    problem(text, 422, "file")


def test_the_same_image_again_answers_the_kept_upload(
        client: TestClient, advertiser: dict[str, Any]) -> None:
    first = upload(client, image(), advertiser["headers"])
    again = upload(client, image(), advertiser["headers"])
    assert first.status_code == 201 and again.status_code == 200
    assert again.json() == first.json()
    assert client.get(f"/v1/creatives/{first.json()['upload_id']}").json() == first.json()


def test_who_may_upload(client: TestClient, runtime: Runtime,
                        advertiser: dict[str, Any]) -> None:
    assert upload(client, image(), {"Authorization": "Bearer nope"}).status_code == 401
    reviewer = runtime.keys.issue(Role.REVIEWER).key
    assert upload(client, image(), {"Authorization": f"Bearer {reviewer}"}
                  ).status_code == 403
    problem(upload(client, image()), 422, "advertiser_id")  # the admin names one
    by_admin = upload(client, image(), advertiser_id=advertiser["id"])
    assert by_admin.status_code == 201 and by_admin.json()["advertiser_id"] == advertiser["id"]
    other = client.post("/v1/advertisers", json={"name": "B"}).json()["id"]
    problem(upload(client, image(), advertiser["headers"], advertiser_id=other),
            422, "advertiser_id")  # an advertiser key uploads for itself only


def test_over_the_byte_limit_is_refused_naming_file(
        client: TestClient, advertiser: dict[str, Any]) -> None:
    big = image("PNG", (10, 10)) + bytes(MAX_BYTES)  # fits the body limit, not the file's
    assert "over 50000 bytes" in problem(upload(client, big, advertiser["headers"]),
                                         413, "file")
    huge = bytes(MAX_BYTES * 3)  # over the route's body limit: refused by BodyLimit
    problem(upload(client, huge, advertiser["headers"]), 413, "file")
    assert "over the limit of 1000000" in problem(upload(client, image("PNG", (1_100, 1_000)),
                                            advertiser["headers"]), 422, "file")


def test_a_huge_body_is_refused_while_it_is_read() -> None:
    """The route's limit refuses a chunked body past it without reading the rest."""
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    limited = BodyLimit(app, max_bytes=100, routes={"/v1/creatives": (10_000, "file")})
    chunks_read = 0

    async def receive() -> dict[str, Any]:
        nonlocal chunks_read
        chunks_read += 1
        return {"type": "http.request", "body": b"x" * 1_000, "more_body": chunks_read < 1_000}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/creatives", "headers": [
        (b"content-type", b"multipart/form-data; boundary=x")]}
    asyncio.run(limited(scope, receive, send))
    assert sent[0]["status"] == 413 and b'"field": "file"' in sent[1]["body"]
    assert chunks_read == 11 and reached == []  # of a 1 MB body, 11 kB read, then refused
    chunks_read = 0
    asyncio.run(limited({**scope, "path": "/v1/ads"}, receive, send))
    assert chunks_read == 1  # the app's own limit elsewhere


def test_an_unknown_file_is_404(client: TestClient) -> None:
    for name in ("0" * 64 + ".png", "..%2Fdb.sqlite3", "x.svg"):
        r = anonymous(client).get(f"/creatives/files/{name}")
        assert r.status_code == 404, name


def _ad(client: TestClient, campaign_id: int, creative: dict[str, Any],
        headers: dict[str, str] | None = None) -> Any:
    return client.post(f"/v1/campaigns/{campaign_id}/ads", headers=headers, json={
        "landing_url": "https://x.test/", "format": "banner", "width": 300, "height": 250,
        "creative": creative})


def test_an_ad_from_an_upload_is_served_with_its_url(client: TestClient,
                                                     runtime: Runtime) -> None:
    made = make_campaign(client)
    headers = key_of(runtime, made["advertiser"]["id"])
    up = upload(client, image(), headers).json()
    r = client.patch(f"/v1/ads/{made['ad']['id']}", json={"creative": {
        "type": "image", "upload_id": up["upload_id"], "alt": "A car"}})
    assert r.status_code == 200, r.text
    path = up["url"].removeprefix(BASE)  # stored relative to the server
    want = {"type": "image", "url": path, "width": 600, "height": 500, "alt": "A car",
            "upload_id": up["upload_id"]}
    assert r.json()["creative"] == want  # the size filled from the upload
    answer = anonymous(client).post("/v1/ads:select", json=ad_request())
    assert answer.status_code == 200  # served under public_base_url, as the tracking URLs
    assert answer.json()["ads"][0]["creative"] == want | {"url": up["url"]}
    half = _ad(client, made["campaign"]["id"], {"type": "image", "alt": "a",
                                                "upload_id": up["upload_id"], "width": 300})
    assert half.status_code == 201 and half.json()["creative"]["height"] == 250
    for size, field in (({"width": 601, "height": 500}, "creative.width"),
                        ({"width": 300, "height": 100}, "creative.width")):
        problem(_ad(client, made["campaign"]["id"], {
            "type": "image", "alt": "a", "upload_id": up["upload_id"], **size}), 422, field)


def test_another_advertisers_upload_is_unknown(client: TestClient, runtime: Runtime) -> None:
    a = make_campaign(client)
    b = make_campaign(client)
    up = upload(client, image(), key_of(runtime, a["advertiser"]["id"])).json()
    creative = {"type": "image", "upload_id": up["upload_id"], "alt": "x"}
    b_key = key_of(runtime, b["advertiser"]["id"])
    assert problem(_ad(client, b["campaign"]["id"], creative, b_key), 422,
                   "creative.upload_id") == "no such upload"
    problem(_ad(client, b["campaign"]["id"], creative), 422, "creative.upload_id")  # admin
    assert client.get(f"/v1/creatives/{up['upload_id']}", headers=b_key).status_code == 404
    assert _ad(client, a["campaign"]["id"], creative).status_code == 201


FORGED = {"Host": "evil.example"}


@pytest.mark.parametrize("settings_over", [{"public_base_url": None}, {}])
def test_a_forged_host_never_reaches_the_stored_image_url(
        client: TestClient, runtime: Runtime, settings_over: dict[str, Any]) -> None:
    """An advertiser's ``Host: evil.example`` on ad create or edit must not become the
    image's origin: it would let the advertiser swap the image after review. Stored:
    the server-relative path; served: under ``public_base_url``, else relative (the
    tag resolves it against its server), never under a request's Host, and it loads.

    Mutation seen red: the old code (the ad routes passing ``str(request.base_url)`` to
    the upload lookup, which fixed an absolute URL into the ad) stored
    ``http://evil.example/creatives/files/…`` without ``public_base_url`` (and
    ``https://ads.test/…`` with it)."""
    made = make_campaign(client)
    key = key_of(runtime, made["advertiser"]["id"])
    up = upload(client, image(), key).json()
    path = "/creatives/files/" + up["url"].rsplit("/", 1)[1]
    creative = {"type": "image", "upload_id": up["upload_id"], "alt": "x"}
    created = _ad(client, made["campaign"]["id"], creative, key | FORGED)
    assert created.status_code == 201, created.text
    assert created.json()["creative"]["url"] == path
    assert client.get(f"/v1/ads/{created.json()['id']}").json()["creative"]["url"] == path
    edited = client.patch(f"/v1/ads/{made['ad']['id']}", json={"creative": creative},
                          headers=FORGED)  # the admin's edit keeps it approved: served
    assert edited.status_code == 200 and edited.json()["creative"]["url"] == path
    answer = anonymous(client).post("/v1/ads:select", json=ad_request(), headers=FORGED)
    assert "evil.example" not in answer.text
    served = answer.json()["ads"][0]["creative"]["url"]
    assert served == (settings_over.get("public_base_url", BASE) or "") + path
    shown = anonymous(client).get(path)  # the tag's (or page's) server: the image loads
    assert shown.status_code == 200 and shown.headers["content-type"] == "image/png"


@pytest.mark.parametrize("settings_over", [{"creative_url_prefix": "https://cdn.test/ads"}])
def test_the_url_prefix_names_the_cdn(client: TestClient, advertiser: dict[str, Any],
                                      tmp_path: Path) -> None:
    r = upload(client, image(), advertiser["headers"])
    name = r.json()["url"].removeprefix("https://cdn.test/ads/")
    assert r.json()["url"] == f"https://cdn.test/ads/{name}"
    assert (tmp_path / "creatives" / name).is_file()  # the operator syncs this folder


def test_upload_settings_are_checked_at_start_all_together() -> None:
    with pytest.raises(SettingsError) as bad:
        load_settings(creative_max_bytes=0, creative_max_pixels=10**9,
                      creative_url_prefix="ftp://cdn.test/", creative_max_frames=0)
    assert sorted(p.split(":")[0] for p in bad.value.problems) == [
        "creative_max_bytes", "creative_max_frames", "creative_max_pixels",
        "creative_url_prefix"]
    assert load_settings(creative_url_prefix="https://cdn.test/a").creative_url_prefix == \
        "https://cdn.test/a/"


@pytest.mark.parametrize("settings_over", [{"creative_max_bytes": 400_000}])
def test_an_image_over_the_apps_body_limit_fits_the_routes_own(
        client: TestClient, advertiser: dict[str, Any]) -> None:
    noise = Image.frombytes("RGB", (200, 200), bytes(random.Random(1).randbytes(120_000)))
    out = io.BytesIO()
    noise.save(out, "PNG")
    assert 65_536 < len(out.getvalue()) < 400_000  # over max_body_bytes, under the route's
    r = upload(client, out.getvalue(), advertiser["headers"])
    assert r.status_code == 201, r.text
