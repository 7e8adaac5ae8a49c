"""Erasure of one user from the served log (adfunnel.events.served_erasure), directly and
through ``DELETE /v1/users/{key}``: no raw line and no Parquet row of the user's hash is
left, every other user's record stays, and the writer goes on appending."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.events.compactor import compact, parquet_path, raw_hours
from adfunnel.events.served_erasure import erase_user
from adfunnel.events.served_schema import decode_record
from adfunnel.learn.query import query
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.serving.served_record import decision_source
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS

from .test_served_log import START, USER, World, _record_hours, _served_log, world  # noqa: F401


def _raw_hashes(directory: Path) -> list[str | None]:
    return [decode_record(line).user_hash
            for files in raw_hours(directory).values() for f in files
            for line in f.read_bytes().splitlines() if line.strip()]


@pytest.mark.slow
def test_an_erased_user_leaves_no_raw_line_and_no_parquet_row(
    tmp_path: Path, world: World,  # noqa: F811
) -> None:
    log = _served_log(tmp_path, world)
    _record_hours(world, log)  # 20 decisions of users -0, -1, -2; 09:10 … 10:26
    log.flush()
    compact(tmp_path, START.replace(hour=10, minute=30), grace_s=60)  # 09:00 to Parquet
    assert parquet_path(tmp_path, ("2026-03-08", "09")).is_file()
    gone, kept = log.user_hash(f"{USER}-0"), log.user_hash(f"{USER}-1")
    assert _raw_hashes(tmp_path).count(gone) == 7

    erased = erase_user(log, f"{USER}-0")

    assert (erased.records, erased.hours_rebuilt) == (7, 1)
    assert gone not in _raw_hashes(tmp_path) and len(_raw_hashes(tmp_path)) == 13
    assert query(tmp_path, "SELECT count(*) FROM served WHERE user_hash = ?", [gone]) == [(0,)]
    assert query(tmp_path, "SELECT count(*) FROM served") == [(13 - 5,)]  # 09:00, compacted
    # the writer reopens its file and goes on appending
    world.clock.set(START + timedelta(minutes=80))
    d, req = world.decide(1)
    log.record(decision_source(d, req))
    assert erase_user(log, f"{USER}-0").records == 0  # again: nothing left to erase
    log.close()
    assert _raw_hashes(tmp_path).count(kept) == 7 + 1
    compact(tmp_path, START + timedelta(days=1))
    assert query(tmp_path, "SELECT count(*) FROM served WHERE user_hash = ?", [gone]) == [(0,)]
    assert query(tmp_path, "SELECT count(*) FROM served") == [(14,)]


@pytest.mark.slow
def test_delete_user_erases_the_served_log_too(tmp_path: Path) -> None:
    at = datetime(2026, 3, 8, 9, 0, tzinfo=UTC)
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             served_log_dir=str(tmp_path), ivt=False)
    rt = build_runtime(settings, ManualClock(at), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as http:
            for user in ("gone", "kept", "gone"):
                r = http.post("/v1/ads:select", json={
                    "user": {"key": user}, "placement": {"id": "feed"},
                    "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]})
                assert r.status_code in (200, 204), r.text
            assert rt.served is not None
            rt.served.flush()
            gone, kept = rt.served.user_hash("gone"), rt.served.user_hash("kept")
            assert sorted(_raw_hashes(tmp_path)) == sorted([gone, kept, gone])
            assert http.delete("/v1/users/gone").status_code == 204
            assert _raw_hashes(tmp_path) == [kept]
    finally:
        rt.close()
