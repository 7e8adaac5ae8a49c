"""``adfunnel bench caps`` on the real Redis, for a few decisions: the result's shape,
measured numbers, and no cap record left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from adfunnel.bench.caps import run_caps_bench
from adfunnel.cli import app

pytestmark = pytest.mark.redis

TIMES = ("p50_us", "p99_us", "screen_p50_us", "screen_p99_us", "count_p50_us",
         "count_p99_us")


def _left(redis_url: str, prefix: str) -> list[bytes]:
    client = redis.Redis.from_url(redis_url)
    try:
        return list(client.scan_iter(match=f"fc:{{{prefix}*", count=1000))
    finally:
        client.close()


@pytest.mark.slow
def test_a_short_run_measures_the_added_time(redis_url: str) -> None:
    r = run_caps_bench(decisions=40, redis_url=redis_url, users=7)
    assert r["decisions"] == 40 and r["capped_candidates"] == 5 and r["fields_read"] == 10
    assert r["redis_url"] == redis_url and r["measure"].startswith("cap_steps")
    for key in TIMES:
        assert isinstance(r[key], float) and r[key] > 0, key
    assert r["p99_us"] >= r["p50_us"]
    for side in ("with_caps", "baseline"):
        assert 0 < r[side]["p50_us"] <= r[side]["p99_us"]
    assert isinstance(r["delta_p50_us"], float) and isinstance(r["delta_p99_us"], float)
    assert r["meets_target"] == (r["p99_us"] <= r["target_p99_us"] == 1000.0)
    # every decision read Redis and counted its winner (no cap binds, Redis answered)
    assert r["counted"] == 40 and r["cap_unavailable"] == 0 and r["fill_rate"] == 1.0
    assert _left(redis_url, r["key_prefix"]) == []


@pytest.mark.slow
def test_the_cli_writes_the_figures(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "caps.json"
    res = CliRunner().invoke(app, ["bench", "caps", "--decisions", "10", "--users", "3",
                                   "--redis-url", redis_url, "--json", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["decisions"] == 10 and r["p99_us"] > 0
    assert _left(redis_url, r["key_prefix"]) == []


def test_an_unreachable_redis_is_one_line_and_exit_2() -> None:
    res = CliRunner().invoke(app, ["bench", "caps", "--decisions", "1",
                                   "--redis-url", "redis://127.0.0.1:1"])
    assert res.exit_code == 2
    assert "did not answer" in res.output
