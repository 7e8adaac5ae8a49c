"""``/v1/api-keys``: issued keys are shown once (201 with Location), listed and read by
prefix without the key or its digest, revoked with DELETE; bad requests name the field."""

from __future__ import annotations

import base64

import pytest
from fastapi.testclient import TestClient

from adfunnel.auth.keys import digest
from adfunnel.runtime.embedded import Runtime
from tests.api_keys import ADMIN_HEADERS


@pytest.mark.slow
def test_a_new_key_is_shown_once_and_stored_as_its_digest(
        http: TestClient, runtime: Runtime) -> None:
    adv = http.post("/v1/advertisers", json={"name": "a"}, headers=ADMIN_HEADERS).json()
    r = http.post("/v1/api-keys", json={"role": "advertiser", "advertiser_id": adv["id"]},
                  headers=ADMIN_HEADERS)
    assert r.status_code == 201
    body = r.json()
    key = body["key"]
    assert len(base64.urlsafe_b64decode(key + "=")) == 32
    assert body["prefix"] == key[:12] and body["role"] == "advertiser"
    assert r.headers["location"] == f"/v1/api-keys/{body['prefix']}"

    read = http.get(r.headers["location"], headers=ADMIN_HEADERS).json()
    listed = http.get("/v1/api-keys", headers=ADMIN_HEADERS).json()
    assert listed == {"items": [read], "next_cursor": None}
    assert read == {k: v for k, v in body.items() if k != "key"}
    for text in (str(read), str(listed)):
        assert key not in text and digest(key) not in text
    stored = runtime.keys.store.list()
    assert [(k.prefix, k.digest) for k in stored] == [(key[:12], digest(key))]
    mine = http.get("/v1/advertisers", headers={"Authorization": f"Bearer {key}"}).json()
    assert mine == {"items": [adv], "next_cursor": None}


def test_key_requests_name_the_field_they_get_wrong(http: TestClient) -> None:
    cases = [
        ({"role": "advertiser"}, "advertiser_id"),
        ({"role": "advertiser", "advertiser_id": 99}, "advertiser_id"),
        ({"role": "reviewer", "advertiser_id": 1}, "advertiser_id"),
        ({"role": "owner"}, "role"),
        ({}, "role"),
        ({"role": "admin", "scope": "all"}, "scope"),
    ]
    http.post("/v1/advertisers", json={"name": "a"}, headers=ADMIN_HEADERS)
    for body, field in cases:
        r = http.post("/v1/api-keys", json=body, headers=ADMIN_HEADERS)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"] == "validation"
        assert [f["field"] for f in r.json()["fields"]] == [field], body
    assert http.get("/v1/api-keys", headers=ADMIN_HEADERS).json()["items"] == []


def test_an_issued_admin_key_can_issue_and_revoke_keys(http: TestClient) -> None:
    admin = http.post("/v1/api-keys", json={"role": "admin"}, headers=ADMIN_HEADERS).json()
    as_admin = {"Authorization": f"Bearer {admin['key']}"}
    reviewer = http.post("/v1/api-keys", json={"role": "reviewer"}, headers=as_admin).json()
    assert reviewer["role"] == "reviewer" and reviewer["advertiser_id"] is None
    assert http.delete(f"/v1/api-keys/{reviewer['prefix']}", headers=as_admin).status_code == 204
    assert http.get(f"/v1/api-keys/{reviewer['prefix']}", headers=as_admin).status_code == 404
    assert http.get("/metrics", headers=as_admin).status_code == 200
