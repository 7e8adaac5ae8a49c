"""``adfunnel bench http``: the bulk catalogue, the wire requests, the wrk script and a
small real run whose every figure is measured (speed itself is never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adfunnel.bench.http import run_http_bench
from adfunnel.bench.http_server import generator_cpu_seconds
from adfunnel.bench.http_workload import (
    CAMPAIGNS_PER_ADVERTISER,
    _workload,
    populate,
    select_body,
)
from adfunnel.bench.overload import parse_wrk_outcomes, wrk_script
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.db import make_engine
from adfunnel.serving.request import decode_request
from adfunnel.targeting import parse_expr


@pytest.mark.slow
def test_populate_writes_what_the_store_would(tmp_path: Path) -> None:
    """Rows and change-log rows of 57 campaigns: the snapshot and the log agree record
    for record, and every targeting parses."""
    n = 57
    exprs, reqs, _ = _workload(n, seed=3)
    engine = make_engine(f"sqlite:///{tmp_path / 'bulk.sqlite3'}")
    populate(engine, n, exprs, reqs, seed=3)
    store = SqlCampaignStore(engine)
    advertisers, campaigns, ads, last = store.snapshot()
    n_adv = -(-n // CAMPAIGNS_PER_ADVERTISER)
    assert (len(advertisers), len(campaigns), len(ads)) == (n_adv, n, n)
    assert last == n_adv + 2 * n
    logged = {(c.entity, c.entity_id): c.record for c in store.changes_since(0, limit=1000)}
    for rec in (*advertisers, *campaigns, *ads):
        entity = type(rec).__name__.lower()
        assert logged[(entity, rec.id)] == rec
    for c in campaigns:
        parse_expr(json.loads(c.targeting))
    assert {(a.campaign_id, a.id) for a in ads} == {(i, i) for i in range(1, n + 1)}
    engine.dispose()


@pytest.mark.slow
def test_request_bodies_are_valid_ad_requests() -> None:
    _, reqs, _ = _workload(10, seed=1)
    for n, r in enumerate(reqs[:200]):
        req = decode_request(select_body(r, n))
        assert len(req.slots) == 1 and req.deadline_ms == 100
        assert "slot_size" not in req.user.attributes


def test_wrk_script_sends_every_body_and_counts_outcomes() -> None:
    bodies = [b'{"a":1}', b'{"b":"]]"}']  # a body holding "]]" needs a longer bracket
    script = wrk_script(bodies, count=True)
    assert '[[{"a":1}]]' in script and '[=[{"b":"]]"}]=]' in script
    assert 'headers["x-adfunnel-outcome"]' in script
    text = "x\nadfunnel-count 200 7\nadfunnel-count 204:no_fill 3\nadfunnel-count 200 1\n"
    assert parse_wrk_outcomes(text) == {"200": 8, "204:no_fill": 3}
    assert "request" not in wrk_script([], count=False)


@pytest.mark.e2e
def test_a_small_run_measures_every_field() -> None:
    r = run_http_bench(ads=200, workers=1, concurrency=4, duration_s=1.0, load="python",
                       baseline_s=1.0, warmup_s=0.5)
    for key in ("decisions_per_s", "per_core", "p50_ms", "p99_ms", "no_fill_share",
                "baseline_route_per_s", "setup_s", "busy_cores"):
        assert r[key] is not None, key
    assert (r["ads"], r["workers"], r["concurrency"]) == (200, 1, 4)
    assert r["load_generator"] == "python"
    assert r["answers"] > 0 and r["errors"] == 0
    assert r["decisions_per_s"] > 0 and r["per_core"] > 0 and r["baseline_route_per_s"] > 0
    assert 0.0 <= r["no_fill_share"] <= 1.0
    assert r["p50_ms"] <= r["p99_ms"]
    assert r["setup_s"] >= r["populate_s"] > 0
    # the load generator (here: this process) shares the cores; its CPU is reported
    assert r["load_generator_cpu_s"] > 0 and r["load_generator_busy_cores"] > 0
    assert r["server_cpu_s"] > 0 and r["window_s"] > 0
    assert r["busy_cores"] == pytest.approx(r["server_cpu_s"] / r["window_s"], abs=2e-3)
    assert r["per_core"] == pytest.approx(r["decisions_per_s"] / r["busy_cores"], rel=0.02)
    probe = r["noop_under_load"]
    assert probe["probes"] > 0 and probe["p99_ms"] is not None


@pytest.mark.slow
def test_the_generator_cpu_counts_a_child_generator_once_it_has_exited() -> None:
    """wrk runs as a child process: its CPU is the generator's once it is reaped."""
    before = generator_cpu_seconds()
    subprocess.run([sys.executable, "-c",
                    "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.3: pass"], check=True)
    assert generator_cpu_seconds() - before >= 0.25
