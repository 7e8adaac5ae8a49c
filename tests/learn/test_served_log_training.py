"""The trainer's real input: a served log written by the embedded server, joined with
the ledger its beacons billed, trains a model that tells the often-clicked campaign
from the rarely clicked one."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.events.compactor import compact
from adfunnel.learn import datasets
from adfunnel.learn.train import train
from adfunnel.prediction.features import candidate_tokens, request_tokens
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.serving.request import MAX_DEADLINE_MS
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign

CLICK_SHARE = {0: 0.6, 1: 0.05}  # by campaign: one is clicked far more often
SLOTS = [{"id": "s1", "position": 1, "width": 300, "height": 250},
         {"id": "s2", "position": 2, "width": 300, "height": 250}]


@pytest.mark.slow
def test_a_served_log_and_its_ledger_train_a_model(tmp_path: Path) -> None:
    served, db = tmp_path / "served", f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    settings = load_settings(database_url=db, clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(served), ivt=False,
                             ivt_tier2=False)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    rng = random.Random(4)
    clicks = rendered = 0
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        cids = [make_campaign(client, bid_type="CPC", objective="clicks",
                              bid_micros=1_000_000)["campaign"]["id"] for _ in range(2)]
        for n in range(200):  # two slots: each campaign wins one (one ad per campaign)
            r = client.post("/v1/ads:select", json=ad_request(request_id=f"r{n}", slots=SLOTS,
                                                                  deadline_ms=MAX_DEADLINE_MS))
            assert r.status_code == 200, r.text
            for k, ad in enumerate(r.json()["ads"]):
                if (n + k) % 10 == 9:
                    continue  # never rendered: not an example
                assert client.get(ad["impression_url"]).status_code == 204
                rendered += 1
                if rng.random() < CLICK_SHARE[cids.index(ad["campaign_id"])]:
                    assert client.get(ad["click_url"],
                                      follow_redirects=False).status_code == 302
                    clicks += 1
    compact(served, START + timedelta(hours=2))
    examples = datasets.load("served-log", served, database_url=db)
    assert len(examples) == rendered and int(examples.labels.sum()) == clicks
    model = train(examples, "served-log", hash_bits=12).model
    assert model.metrics["rows"] > 0 and model.metrics["auc"] is not None
    assert model.seen_ads is not None and set(model.seen_ads) <= {
        a.id for a in rt.catalog.ads.values()} and model.seen_ads
    shared = request_tokens("feed", 1, None, None, START.hour,
                            {"geo.country": "US", "interests": ["cars"]})
    campaigns = {c.id: c for c in rt.catalog.campaigns.values()}
    ads = {c: next(a.id for a in rt.catalog.ads.values() if a.campaign_id == c) for c in cids}
    often, rarely = model.predict_serving(
        [candidate_tokens("feed", ads[c], c, campaigns[c].advertiser_id, "CPC") for c in cids],
        shared)
    assert often > 3 * rarely


@pytest.mark.slow
def test_ope_reads_the_served_logs_propensities_and_the_ledgers_clicks(tmp_path: Path) -> None:
    import csv
    import json

    import numpy as np
    from typer.testing import CliRunner

    from adfunnel.cli import app
    from adfunnel.prediction.model import ClickModel

    ClickModel("served-log", 10, np.zeros(2**10), -5.0, -1.0, 0.0).save(tmp_path / "model")
    served, db = tmp_path / "served", f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    settings = load_settings(database_url=db, clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(served), ivt=False,
                             ivt_tier2=False, model_dir=str(tmp_path / "model"),
                             exploration_share=0.5)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    rng = random.Random(4)
    shown = 0
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        ads = [make_campaign(client, bid_type="CPC", objective="clicks",
                             bid_micros=bid)["ad"]["id"] for bid in (1_000_000, 900_000)]
        for n in range(300):
            r = client.post("/v1/ads:select", json=ad_request(request_id=f"r{n}",
                                                                  deadline_ms=MAX_DEADLINE_MS))
            [ad] = r.json()["ads"]
            assert client.get(ad["impression_url"]).status_code == 204
            shown += 1
            if rng.random() < (0.3 if ad["ad_id"] == ads[1] else 0.05):
                client.get(ad["click_url"], follow_redirects=False)
    compact(served, START + timedelta(hours=2))
    policy = tmp_path / "policy.csv"
    with policy.open("w", newline="", encoding="utf-8") as f:  # always the second ad
        csv.writer(f).writerows([["item_id", "position", "probability"],
                                 [ads[0], 1, 0.0], [ads[1], 1, 1.0]])
    out = tmp_path / "ope.json"
    done = CliRunner().invoke(app, ["model", "ope", "--logged", str(served), "--format",
                                    "served-log", "--database-url", db, "--target-policy",
                                    str(policy), "--json", str(out)])
    assert done.exit_code == 0, done.output
    got = json.loads(out.read_text())
    assert got["rows"] == shown and got["left_out_without_propensity"] == 0
    # the second ad is shown only by exploration (ε/2 = 25 %) and clicked 30 % of the time
    ips = got["estimators"]["ips"]
    assert ips["ci_low"] <= 0.3 <= ips["ci_high"]
    assert got["logged_value"] < ips["value"]


@pytest.mark.slow
def test_a_conversion_model_learns_from_the_clicks_and_their_conversions(
        tmp_path: Path) -> None:
    served, db = tmp_path / "served", f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    settings = load_settings(database_url=db, clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(served), ivt=False,
                             ivt_tier2=False)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    rng = random.Random(5)
    conversions = 0
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        cids = [make_campaign(client, bid_type="CPA", objective="conversions",
                              bid_micros=5_000_000)["campaign"]["id"] for _ in range(2)]
        for n in range(300):
            r = client.post("/v1/ads:select", json=ad_request(request_id=f"r{n}", slots=SLOTS,
                                                                  deadline_ms=MAX_DEADLINE_MS))
            for ad in r.json()["ads"]:
                assert client.get(ad["impression_url"]).status_code == 204
                if rng.random() < 0.5:  # every ad is clicked alike ...
                    clicked = client.get(ad["click_url"], follow_redirects=False)
                    [click_id] = parse_qs(urlsplit(clicked.headers["location"]).query)[
                        "adf_click_id"]
                    # ... and one campaign's clicks convert far more often
                    if rng.random() < (0.6 if ad["campaign_id"] == cids[0] else 0.05):
                        r = client.get("/v", params={"click_id": click_id})
                        assert r.status_code == 204
                        conversions += 1
    compact(served, START + timedelta(hours=2))
    examples = datasets.load("served-log", served, database_url=db, target="conversion")
    assert int(examples.labels.sum()) == conversions
    trained = train(examples, "served-log", hash_bits=12, target="conversion")
    assert trained.model.target == "conversion"
    shared = request_tokens("feed", 1, None, None, START.hour,
                            {"geo.country": "US", "interests": ["cars"]})
    campaigns = {c.id: c for c in rt.catalog.campaigns.values()}
    ads = {c: next(a.id for a in rt.catalog.ads.values() if a.campaign_id == c) for c in cids}
    often, rarely = trained.model.predict_serving(
        [candidate_tokens("feed", ads[c], c, campaigns[c].advertiser_id, "CPA") for c in cids],
        shared)
    assert often > 3 * rarely
    with pytest.raises(datasets.DatasetError, match="only the served log"):
        datasets.load("criteo", served, target="conversion")
