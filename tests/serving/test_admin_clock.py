"""``PUT /v1/admin/clock``: forward moves only; refusals name ``now`` in plain words."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from adfunnel.runtime.embedded import Runtime
from tests.serving.conftest import START


def fields(r: Any) -> dict[str, str]:
    return {f["field"]: f["problem"] for f in r.json()["fields"]}


@pytest.mark.slow
def test_forward_and_same_time_moves(client: TestClient, runtime: Runtime) -> None:
    r = client.put("/v1/admin/clock", json={"now": "2026-07-15T14:30:00+02:00"})
    assert r.status_code == 200, r.text
    assert r.json() == {"now": "2026-07-15T12:30:00+00:00"}
    assert client.put("/v1/admin/clock", json={"now": "2026-07-15T12:30:00Z"}).status_code == 200
    assert runtime.clock.now().isoformat() == "2026-07-15T12:30:00+00:00"


@pytest.mark.slow
def test_moving_backwards_is_refused_with_409(client: TestClient, runtime: Runtime) -> None:
    r = client.put("/v1/admin/clock", json={"now": "2026-07-15T11:59:59Z"})
    assert r.status_code == 409, r.text
    assert r.json()["error"] == "clock_backwards"
    problem = fields(r)["now"]
    assert "2026-07-15T12:00:00+00:00" in problem and "cannot move back" in problem
    assert runtime.clock.now() == START  # unchanged


@pytest.mark.slow
@pytest.mark.parametrize(
    "now",
    ["not a time", "2026-07-15T12:00:00", "2026-07-15", "2026-13-01T00:00:00Z", 1752580800,
     None, "0001-01-01T00:00:00+01:00"],
)
def test_malformed_times_are_422_naming_now(client: TestClient, now: object) -> None:
    r = client.put("/v1/admin/clock", json={"now": now})
    assert r.status_code == 422, r.text
    problem = fields(r)["now"]
    assert "isoformat" not in problem and "Invalid" not in problem  # no Python error text
    assert "ISO 8601" in problem or "must be from" in problem


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "status", "field"),
    [(b"{", 400, "body"), (b"[]", 422, "now"), (b"{}", 422, "now"),
     (b'{"now": "2026-07-15T13:00:00Z", "later": 1}', 422, "later")],
)
def test_bad_bodies(client: TestClient, body: bytes, status: int, field: str) -> None:
    r = client.put("/v1/admin/clock", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert field in fields(r)
