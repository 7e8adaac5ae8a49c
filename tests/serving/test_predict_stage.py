"""The predict stage: a click model scores the pre-rank's survivors and so sets the
ranking and the prices; out of time, the pre-rank scores decide and the decision says
so; the served log records the model version."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pytest

from adfunnel.campaigns.model import BidType, Objective
from adfunnel.clock import ManualClock, monotonic_ms
from adfunnel.prediction.features import candidate_tokens, request_tokens
from adfunnel.prediction.model import ClickModel, column_of
from adfunnel.prediction.scorer import ModelScorer
from adfunnel.runtime.embedded import Runtime, build_runtime
from adfunnel.serving.decider import ColumnarDecider
from adfunnel.serving.request import decode_request
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS

START = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)
BITS = 12
BODY = {"user": {"key": "u", "attributes": {"interests": ["golf"]}},
        "placement": {"id": "feed", "domain": "news.example"},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]}


def model_favouring(ad_id: int, weight: float = 4.0) -> ClickModel:
    """A model whose pCTR is about 0.7 % for every ad, and far higher for ``ad_id``."""
    weights = np.zeros(2**BITS)
    weights[column_of(f"ad_id={ad_id}", BITS)] = weight
    # Platt a = −1, b = 0: the calibrated probability is the logistic of the logit
    return ClickModel("served-log", BITS, weights, -5.0, -1.0, 0.0)


@pytest.fixture
def world() -> tuple[Runtime, ColumnarDecider, list[int]]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local")
    rt = build_runtime(settings, ManualClock(START), seed=1, feed=False)
    ads = []
    for k, bid in enumerate((1_000_000, 800_000)):  # CPC bids: the first wins on priors
        adv = rt.store.create_advertiser(f"a{k}")
        c = rt.store.create_campaign(
            advertiser_id=adv.id, name=f"c{k}", objective=Objective.CLICKS,
            bid_type=BidType.CPC, bid_micros=bid, daily_budget_micros=10**9,
            time_zone="UTC", flight_start=date(2026, 7, 1))
        ads.append(rt.store.create_ad(campaign_id=c.id, landing_url="https://x.test/",
                                      creative_ref="c", format="banner", width=300,
                                      height=250).id)
    decider = ColumnarDecider(rt.catalog, rt.gate, rt.ctr, rt.clock, b"k" * 32,
                              rng=random.Random(5))
    yield rt, decider, ads
    rt.close()


def decide(decider: ColumnarDecider, deadline_ms: float = 60_000) -> object:
    req = decode_request(json.dumps(BODY).encode())
    return decider.decide(req, "r1", monotonic_ms() + deadline_ms)


def test_without_a_model_the_prior_ranks(world: tuple[Runtime, ColumnarDecider, list[int]]
                                         ) -> None:
    _, decider, ads = world
    d = decide(decider)
    assert [p.ad.id for p in d.placed] == [ads[0]]
    assert d.model_version is None and not d.fallback


def test_the_models_pctr_ranks_and_prices(world: tuple[Runtime, ColumnarDecider, list[int]]
                                          ) -> None:
    rt, decider, ads = world
    model = model_favouring(ads[1])
    decider.scorer = ModelScorer(model, budget_ms=500)
    d = decide(decider)
    [placed] = d.placed
    assert placed.ad.id == ads[1] and d.model_version == model.version and not d.fallback
    # the winner's pCTR is the model's for exactly its request and candidate tokens
    c = rt.catalog.campaigns[placed.campaign.id]
    tokens = (request_tokens("feed", 1, None, "news.example", START.hour,
                             {"interests": ["golf"]})
              + candidate_tokens("feed", ads[1], c.id, c.advertiser_id, "CPC"))
    assert placed.win.candidate.pctr == pytest.approx(float(model.predict([tokens])[0]),
                                                      abs=1e-12)
    # GSP: the winner pays what it needs to beat the runner-up's eCPM, at most its bid
    assert 0 < placed.win.price_micros <= 800_000


def test_a_published_factor_scales_the_pctr_that_ranks_and_prices(
        world: tuple[Runtime, ColumnarDecider, list[int]]) -> None:
    """Red when the predict stage or the scorer ignores the published factor (the
    winner keeps the raw pCTR), or applies another placement's or version's."""
    from adfunnel.prediction.published import PublishedFactors
    from adfunnel.prediction.recalibration import FactorTable

    _, decider, ads = world
    model, factors = model_favouring(ads[1]), PublishedFactors()
    decider.scorer = ModelScorer(model, budget_ms=500, factors=factors)
    raw = decide(decider)
    factors.publish(FactorTable({model.version: 0.9, "other": 3.0},
                                {(model.version, "feed"): 0.5,
                                 (model.version, "side"): 2.0}), START, (START, START))
    d = decide(decider)
    [before], [after] = raw.placed, d.placed
    assert raw.calibration_factor == 1.0 and d.calibration_factor == 0.5
    assert after.win.candidate.pctr == pytest.approx(before.win.candidate.pctr * 0.5)
    assert after.win.price_micros >= before.win.price_micros  # a price divides by pCTR
    assert ads[1] in d.model_scored


def test_out_of_time_the_pre_rank_scores_decide(
        world: tuple[Runtime, ColumnarDecider, list[int]]) -> None:
    _, decider, ads = world
    decider.scorer = ModelScorer(model_favouring(ads[1]), budget_ms=500)
    d = decide(decider, deadline_ms=100)  # less left than the stage's 500 ms share
    assert [p.ad.id for p in d.placed] == [ads[0]]
    assert d.fallback and d.model_version == decider.scorer.version


@pytest.mark.slow
def test_serve_loads_the_model_and_the_served_log_records_its_version(
        tmp_path: Path) -> None:
    from datetime import timedelta

    from fastapi.testclient import TestClient

    from adfunnel.events.compactor import compact
    from adfunnel.learn.query import query
    from adfunnel.runtime.asgi import build_app

    model = model_favouring(1)
    model.save(tmp_path / "model")
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", model_dir=str(tmp_path / "model"),
                             served_log_dir=str(tmp_path / "served"))
    rt = build_runtime(settings, ManualClock(START), seed=1)
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        adv = client.post("/v1/advertisers", json={"name": "a"}).json()
        c = client.post("/v1/campaigns", json={
            "advertiser_id": adv["id"], "name": "c", "objective": "clicks", "bid_type": "CPC",
            "bid_micros": 900_000, "daily_budget_micros": 10**9, "time_zone": "UTC",
            "flight_start": "2026-07-01", "billable_event": "rendered"}).json()
        made = client.post(f"/v1/campaigns/{c['id']}/ads", json={
            "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
            "width": 300, "height": 250})
        assert made.status_code == 201, made.text
        r = client.post("/v1/ads:select", json={**BODY, "request_id": "r1"})
        assert r.status_code == 200, r.text
    compact(tmp_path / "served", START + timedelta(hours=2))
    rows = query(tmp_path / "served", "select request_id, model_version, exploration, "
                                      "winners[1].propensity from served")
    # one eligible ad: shown with certainty, in the slice or not
    assert rows == [("r1", model.version, False, 1.0)]


@pytest.mark.slow
def test_serving_stats_show_the_models_calibration_from_billed_beacons(
        tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from adfunnel.runtime.asgi import build_app

    model = model_favouring(1)
    model.save(tmp_path / "model")
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", model_dir=str(tmp_path / "model"), ivt=False,
                             ivt_tier2=False,
                             # a loaded machine must not push a decision past the
                             # predict stage's budget (a fallback is not monitored)
                             model_budget_ms=1_000)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        adv = client.post("/v1/advertisers", json={"name": "a"}).json()
        c = client.post("/v1/campaigns", json={
            "advertiser_id": adv["id"], "name": "c", "objective": "clicks", "bid_type": "CPC",
            "bid_micros": 900_000, "daily_budget_micros": 10**9, "time_zone": "UTC",
            "flight_start": "2026-07-01", "billable_event": "rendered"}).json()
        client.post(f"/v1/campaigns/{c['id']}/ads", json={
            "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
            "width": 300, "height": 250})
        for n in range(20):
            ad = client.post("/v1/ads:select",
                             json={**BODY, "deadline_ms": 5_000}).json()["ads"][0]
            assert client.get(ad["impression_url"]).status_code == 204
            if n < 3:
                assert client.get(ad["click_url"], follow_redirects=False).status_code == 302
        assert rt.events.settle()  # the aggregator's thread bills after each answer
        stats = client.get("/v1/serving/stats").json()["model"]
    assert stats["version"] == model.version
    cal = stats["calibration"][model.version]
    assert cal["impressions"] == 20 and cal["observed_clicks"] == 3
    expected = float(model.predict([request_tokens("feed", 1, None, "news.example", START.hour,
                                                   {"interests": ["golf"]})
                                    + candidate_tokens("feed", 1, c["id"], adv["id"], "CPC")
                                    ])[0])
    assert cal["predicted_clicks"] == pytest.approx(20 * expected, abs=1e-3)
    assert cal["calibration_ratio"] == pytest.approx(20 * expected / 3, abs=1e-3)
    assert cal["status"] == "out_of_range"  # the hand-made model predicts far more clicks


def test_the_exploration_slice_picks_uniformly_above_the_reserve_and_logs_propensities(
        world: tuple[Runtime, ColumnarDecider, list[int]]) -> None:
    rt, decider, ads = world
    low = rt.store.create_campaign(  # eligible but below the reserve: never explored
        advertiser_id=rt.store.create_advertiser("low").id, name="low",
        objective=Objective.CLICKS, bid_type=BidType.CPC, bid_micros=100_000,
        daily_budget_micros=10**9, time_zone="UTC", flight_start=date(2026, 7, 1))
    rt.store.create_ad(campaign_id=low.id, landing_url="https://x.test/", creative_ref="c",
                       format="banner", width=300, height=250)
    decider.scorer = ModelScorer(model_favouring(10**6, weight=0.0), budget_ms=500)
    decider.exploration_share = 0.5
    body = {**BODY, "slots": [{**BODY["slots"][0], "reserve_cpm_micros": 1_000_000}]}
    req = decode_request(json.dumps(body).encode())
    shown: dict[tuple[bool, int], int] = {}
    for n in range(400):
        d = decider.decide(req, f"r{n}", monotonic_ms() + 60_000)
        [p] = d.placed
        shown[(bool(d.exploration), p.ad.id)] = shown.get((bool(d.exploration), p.ad.id), 0) + 1
        assert p.campaign.id != low.id
        assert 0 < p.win.price_micros <= p.campaign.bid_micros
        # (1 − ε)·[the auction's winner] + ε / 2: the first ad wins the auction
        assert d.propensities == {"s1": 0.75 if p.ad.id == ads[0] else 0.25}
    explored = shown.get((True, ads[0]), 0) + shown.get((True, ads[1]), 0)
    assert 150 < explored < 250  # about half the decisions
    assert shown.get((True, ads[1]), 0) > 50 and shown.get((True, ads[0]), 0) > 50
    assert shown.get((False, ads[1]), 0) == 0  # outside the slice the auction decides


def test_outside_the_slice_the_auctions_winner_has_nearly_certain_propensity(
        world: tuple[Runtime, ColumnarDecider, list[int]]) -> None:
    _, decider, ads = world
    decider.scorer = ModelScorer(model_favouring(ads[1]), budget_ms=500)
    d = decide(decider)
    assert d.exploration is None and d.propensities == {}  # no slice configured
    decider.exploration_share = 0.01
    d = decide(decider)
    assert d.exploration is False and [p.ad.id for p in d.placed] == [ads[1]]
    assert d.propensities == {"s1": pytest.approx(0.99 + 0.01 / 2)}


@pytest.mark.slow
def test_pre_rank_recall_counts_whether_the_models_best_was_kept(
        world: tuple[Runtime, ColumnarDecider, list[int]]) -> None:
    rt, _, ads = world
    decider = ColumnarDecider(rt.catalog, rt.gate, rt.ctr, rt.clock, b"k" * 32,
                              rng=random.Random(5), prerank_keep=1)  # keeps the first ad
    for favoured, recall in ((ads[0], 1.0), (ads[1], 0.0)):
        scorer = ModelScorer(model_favouring(favoured), budget_ms=500)
        scorer.recall_sample = 0.999  # measure (nearly) every decision
        decider.scorer = scorer
        for _ in range(10):
            decide(decider)
        got = scorer.prerank_recall()
        assert got["checked"] >= 9 and got["recall"] == recall
    assert ModelScorer(model_favouring(1)).prerank_recall() == {"checked": 0, "recall": None}


@pytest.mark.slow
def test_pre_rank_recall_gives_an_ad_the_model_never_saw_the_prior_as_serving_does(
        world: tuple[Runtime, ColumnarDecider, list[int]]) -> None:
    """The model favours ads[1] but was trained on ads[0] only: serving ranks ads[1] by
    the prior, so ads[0] is the best by what serving uses, and pre-rank (keeping ads[0])
    kept it. Scoring ads[1] with the model would call every such decision a miss."""
    rt, _, ads = world
    decider = ColumnarDecider(rt.catalog, rt.gate, rt.ctr, rt.clock, b"k" * 32,
                              rng=random.Random(5), prerank_keep=1)  # keeps the first ad
    model = dataclasses.replace(model_favouring(ads[1]), seen_ads=frozenset({ads[0]}))
    scorer = ModelScorer(model, budget_ms=500)
    scorer.recall_sample = 0.999  # measure (nearly) every decision
    decider.scorer = scorer
    for _ in range(10):
        assert [p.ad.id for p in decide(decider).placed] == [ads[0]]
    got = scorer.prerank_recall()
    assert got["checked"] >= 9 and got["recall"] == 1.0


@pytest.mark.slow
def test_a_registered_model_reaches_every_server_without_a_restart(tmp_path: Path) -> None:
    import time

    from fastapi.testclient import TestClient

    from adfunnel.runtime.asgi import build_app

    first, second = model_favouring(1), model_favouring(2)
    first.save(tmp_path / "m1")
    second.save(tmp_path / "m2")
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}",
                             clock="manual", token_secret="k" * 32, budget="local")
    writer = build_runtime(settings, ManualClock(START), seed=1)
    other = build_runtime(settings, ManualClock(START), seed=2)  # follows the change log
    try:
        assert writer.decider.scorer is None and other.decider.scorer is None
        with TestClient(build_app(writer), headers=ADMIN_HEADERS) as client:
            r = client.post("/v1/admin/models", json={"path": str(tmp_path / "m1")})
            assert r.status_code == 201, r.text
            assert r.json()["model_version"] == first.version and r.json()["active"]
            assert writer.decider.scorer.version == first.version  # type: ignore[union-attr]
            r = client.post("/v1/admin/models", json={"path": str(tmp_path / "m2")})
            assert r.status_code == 201, r.text
            items = client.get("/v1/admin/models").json()["items"]
            assert [(m["model_version"], m["active"]) for m in items] == [
                (first.version, False), (second.version, True)]
            bad = client.post("/v1/admin/models", json={"path": str(tmp_path / "none")})
            assert bad.status_code == 422
            assert bad.json()["fields"][0]["field"] == "path"
            assert writer.decider.scorer.version == second.version  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while (other.decider.scorer is None
               or other.decider.scorer.version != second.version):
            assert time.monotonic() < deadline, "the other server never switched"
            time.sleep(0.05)
        restarted = build_runtime(settings, ManualClock(START), seed=3)
        try:  # a server started later serves with the active release from its snapshot
            assert restarted.decider.scorer.version == second.version  # type: ignore[union-attr]
        finally:
            restarted.close()
    finally:
        writer.close()
        other.close()


def test_each_slot_run_is_ranked_and_priced_at_its_own_position(
        world: tuple[Runtime, ColumnarDecider, list[int]]) -> None:
    rt, decider, ads = world
    wide = rt.store.create_campaign(
        advertiser_id=rt.store.create_advertiser("wide").id, name="wide",
        objective=Objective.CLICKS, bid_type=BidType.CPC, bid_micros=1_000_000,
        daily_budget_micros=10**9, time_zone="UTC", flight_start=date(2026, 7, 1))
    banner = rt.store.create_ad(campaign_id=wide.id, landing_url="https://x.test/",
                                creative_ref="c", format="banner", width=728, height=90).id
    model = model_favouring(ads[0], weight=0.0)
    model.weights[column_of("position=2", BITS)] = 1.5  # the lower slot is clicked more
    decider.scorer = ModelScorer(model, budget_ms=500)
    body = {**BODY, "slots": [BODY["slots"][0],
                              {"id": "s2", "position": 2, "width": 728, "height": 90}]}
    d = decider.decide(decode_request(json.dumps(body).encode()), "r1", monotonic_ms() + 60_000)
    placed = {p.win.slot_id: p for p in d.placed}
    assert placed["s2"].ad.id == banner
    for slot, position in (("s1", 1), ("s2", 2)):
        p = placed[slot]
        tokens = (request_tokens("feed", position, None, "news.example", START.hour,
                                 {"interests": ["golf"]})
                  + candidate_tokens("feed", p.ad.id, p.campaign.id, p.campaign.advertiser_id,
                                     "CPC"))
        assert p.win.candidate.pctr == pytest.approx(float(model.predict([tokens])[0]),
                                                     abs=1e-12)
    assert placed["s2"].win.candidate.pctr > 3 * placed["s1"].win.candidate.pctr


def test_an_ad_the_model_never_saw_keeps_the_smoothed_rate(
        world: tuple[Runtime, ColumnarDecider, list[int]], tmp_path: Path) -> None:
    import dataclasses

    _, decider, ads = world
    favours_the_unseen = dataclasses.replace(model_favouring(ads[1]),
                                             seen_ads=frozenset({ads[0]}))
    favours_the_unseen.save(tmp_path / "m")  # the seen ads travel with the artifact
    loaded = ClickModel.load(tmp_path / "m")
    assert loaded.seen_ads == frozenset({ads[0]})
    decider.scorer = ModelScorer(loaded, budget_ms=500)
    d = decide(decider)
    # the second ad's big model weight does not count: the model never saw it
    assert [p.ad.id for p in d.placed] == [ads[0]] and not d.fallback


@pytest.mark.slow
def test_a_conversion_model_sets_the_pcvr_of_cpa_candidates(tmp_path: Path) -> None:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local")
    rt = build_runtime(settings, ManualClock(START), seed=1, feed=False)
    try:
        ads = []
        for k in range(2):  # two CPA campaigns, the same bid
            adv = rt.store.create_advertiser(f"a{k}")
            c = rt.store.create_campaign(
                advertiser_id=adv.id, name=f"c{k}", objective=Objective.CONVERSIONS,
                bid_type=BidType.CPA, bid_micros=5_000_000, daily_budget_micros=10**9,
                time_zone="UTC", flight_start=date(2026, 7, 1))
            ads.append(rt.store.create_ad(campaign_id=c.id, landing_url="https://x.test/",
                                          creative_ref="c", format="banner", width=300,
                                          height=250).id)
        decider = ColumnarDecider(rt.catalog, rt.gate, rt.ctr, rt.clock, b"k" * 32,
                                  rng=random.Random(5), pcvr=0.01)
        weights = np.zeros(2**BITS)
        weights[column_of(f"ad_id={ads[1]}", BITS)] = 3.0  # the second converts far more
        cvr = dataclasses.replace(ClickModel("served-log", BITS, weights, -4.0, -1.0, 0.0),
                                  target="conversion")
        with pytest.raises(ValueError, match="conversion model"):
            ModelScorer(model_favouring(ads[0], 0.0), 500, cvr_model=model_favouring(1))
        decider.scorer = ModelScorer(model_favouring(ads[0], weight=0.0), 500, cvr_model=cvr)
        d = decide(decider)
        [p] = d.placed
        assert p.ad.id == ads[1]  # same pCTR and bid: the higher pCVR wins
        c = rt.catalog.campaigns[p.campaign.id]
        tokens = (request_tokens("feed", 1, None, "news.example", START.hour,
                                 {"interests": ["golf"]})
                  + candidate_tokens("feed", ads[1], c.id, c.advertiser_id, "CPA"))
        assert p.win.candidate.pcvr == pytest.approx(float(cvr.predict([tokens])[0]),
                                                     abs=1e-12)
        decider.scorer = ModelScorer(model_favouring(ads[0], weight=0.0), 500)
        assert decide(decider).placed[0].win.candidate.pcvr == 0.01  # without: the prior
    finally:
        rt.close()


@pytest.mark.slow
def test_a_registered_conversion_model_joins_the_click_model_everywhere(
        tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from adfunnel.runtime.asgi import build_app

    click = model_favouring(1)
    cvr = dataclasses.replace(model_favouring(2), target="conversion")
    click.save(tmp_path / "ctr")
    cvr.save(tmp_path / "cvr")
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}",
                             clock="manual", token_secret="k" * 32, budget="local")
    writer = build_runtime(settings, ManualClock(START), seed=1)
    try:
        with TestClient(build_app(writer), headers=ADMIN_HEADERS) as client:
            r = client.post("/v1/admin/models", json={"path": str(tmp_path / "cvr")})
            assert r.status_code == 201 and r.json()["target"] == "conversion"
            assert writer.decider.scorer is None  # a conversion model waits for a click one
            r = client.post("/v1/admin/models", json={"path": str(tmp_path / "ctr")})
            assert r.status_code == 201 and r.json()["target"] == "click"
            items = client.get("/v1/admin/models").json()["items"]
            assert [(m["target"], m["active"]) for m in items] == [
                ("conversion", True), ("click", True)]  # one active release per target
        scorer = writer.decider.scorer
        assert scorer is not None and scorer.version == click.version
        assert scorer.cvr_model is not None and scorer.cvr_model.version == cvr.version
        later = build_runtime(settings, ManualClock(START), seed=3)
        try:  # a server started later has both from its snapshot
            assert later.decider.scorer.cvr_model.version == cvr.version  # type: ignore[union-attr]
            assert later.decider.scorer.version == click.version  # type: ignore[union-attr]
        finally:
            later.close()
    finally:
        writer.close()
