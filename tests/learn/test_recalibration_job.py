"""The recalibration job over a real served log and ledger (embedded SQLite, and
PostgreSQL): a model that predicts twice the clicks its impressions get is scaled down
when the hourly job runs, the next decision's pCTR is the scaled one, the served log
keeps the raw one beside it, and stats and metrics show the factor in use."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.events.served_schema import ServedRecord, decode_record
from adfunnel.prediction.model import ClickModel
from adfunnel.prediction.recalibration import factor
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign

PCTR = 0.2  # the model's pCTR of every candidate: twice what the clicks below give


def constant_model(directory: Path) -> str:
    """A model artifact whose pCTR is ``PCTR`` for every ad; its version."""
    bias = math.log(PCTR / (1 - PCTR))  # Platt a = −1, b = 0: p = logistic(logit)
    model = ClickModel("served-log", 10, np.zeros(2**10), bias, -1.0, 0.0)
    model.save(directory)
    return model.version


def records(served: Path) -> dict[str, ServedRecord]:
    """Every raw served-log record by request id."""
    out = {}
    for f in sorted((served / "raw").rglob("*.jsonl")):
        for line in f.read_bytes().splitlines():
            r = decode_record(line)
            out[r.request_id] = r
    return out


def serve(client: TestClient, request_id: str, placement: str, click: bool) -> None:
    r = client.post("/v1/ads:select", json=ad_request(request_id=request_id, deadline_ms=5_000,
                                                      placement={"id": placement}))
    assert r.status_code == 200, (r.status_code, r.text)
    [ad] = r.json()["ads"]
    assert client.get(ad["impression_url"]).status_code == 204
    if click:
        assert client.get(ad["click_url"], follow_redirects=False).status_code == 302


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_hourly_job_scales_an_overpredicting_model_down(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """Red when the job sums the used pCTR instead of the raw one (the second hour's
    decisions, served at half the pCTR, would read as calibrated), when the scorer
    ignores the published factor, or when the job is not scheduled on the clock's
    moves (no version in the stats)."""
    db = (request.getfixturevalue("pg_schema_url") if backend == "postgres"
          else f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    served = tmp_path / "served"
    version = constant_model(tmp_path / "model")
    settings = load_settings(database_url=db, clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(served), ivt=False,
                             ivt_tier2=False, model_dir=str(tmp_path / "model"),
                             exploration_share=0.0,
                             model_budget_ms=1_000)  # no fallback on a loaded machine
    rt = build_runtime(settings, ManualClock(START), seed=1)
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        make_campaign(client, bid_type="CPC", objective="clicks", bid_micros=1_000_000,
                      daily_budget_micros=10**10)
        for hours in (2, 3):  # the job runs when the clock moves an hour on, twice
            for n in range(100):  # 20 clicks predicted, 10 billed
                serve(client, f"feed{hours}-{n}", "feed", click=n % 10 == 0)
            for n in range(10):  # 2 predicted, none billed: too little for its own factor
                serve(client, f"side{hours}-{n}", "side", click=False)
            at = (START + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
            assert client.put("/v1/admin/clock", json={"now": at}).status_code == 200
        serve(client, "after", "feed", click=False)
        stats = client.get("/v1/serving/stats").json()["model"]["recalibration"]
        metrics = client.get("/metrics").text
    rt.close()
    own = factor(44.0, 20)  # the version's, over both placements
    feed = factor(40.0, 20, own)
    got = stats["versions"][version]
    assert got["factor"] == pytest.approx(own, abs=1e-4)
    assert (got["impressions"], got["observed_clicks"]) == (220, 20)
    assert got["predicted_clicks"] == pytest.approx(44.0) and got["raw_ratio"] == 2.2
    assert got["segments"]["feed"]["factor"] == pytest.approx(feed, abs=1e-4)
    assert "side" not in got["segments"]  # it takes the version's
    assert (f'adfunnel_model_recalibration_factor{{segment="feed",version="{version}"}} '
            in metrics)
    logged = records(served)
    [before] = logged["feed2-0"].winners
    assert before.pctr == pytest.approx(PCTR) and before.model_pctr == pytest.approx(PCTR)
    [after] = logged["after"].winners
    assert after.model_pctr == pytest.approx(PCTR)  # raw, for learning and the report
    assert after.pctr == pytest.approx(PCTR * feed)  # what ranked, priced and bid
