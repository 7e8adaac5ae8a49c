"""Metrics with the design's names: the bounded per-campaign series, the scrape of a
real runtime, and the deploy/ files against a running server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from adfunnel.budget.embedded import InProcessBudget
from adfunnel.budget.metrics import OTHER, CampaignSeries
from adfunnel.budget.snapshot import BudgetSnapshot
from adfunnel.runtime.app import Runtime
from adfunnel.sim.server_proc import ServerProcess
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.helpers import ad_request, make_campaign

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "adfunnel-dashboard.json"
#: The design's metrics (issue 12 §4), exported under the adfunnel_ namespace.
DESIGN = ("adfunnel_decisions_total", "adfunnel_deadline_miss_rate", "adfunnel_fill_rate",
          "adfunnel_absorbed_overspend_micros_total", "adfunnel_overdelivery_pct",
          "adfunnel_pacing_p", "adfunnel_budget_state", "adfunnel_change_feed_lag_seconds")


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of a Prometheus text exposition."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def families(text: str) -> set[str]:
    """Names a query may use: every family's sample names (``_total``, ``_bucket`` …)
    and its declared name, for families without a sample yet (a labelled counter)."""
    names = set(samples(text))
    names |= {m.group(1) for m in re.finditer(r"^# TYPE (\S+) ", text, re.M)}
    for m in re.finditer(r"^# TYPE (\S+) (counter|histogram)", text, re.M):
        kinds = ("_total",) if m.group(2) == "counter" else ("_bucket", "_sum", "_count")
        names |= {m.group(1) + k for k in kinds}
    return names


def row(cid: int, billed: int, budget: int = 1_000, committed: int | None = None,
        state: str = "open", p: float = 1.0) -> dict[str, object]:
    return {"campaign_id": cid, "billed_micros": billed, "budget_micros": budget,
            "committed_micros": billed if committed is None else committed, "state": state,
            "p": p}


def by_label(fam: list[tuple[dict[str, str], float]], **want: str) -> float:
    (value,) = [v for labels, v in fam if all(labels.get(k) == x for k, x in want.items())]
    return value


def test_the_top_campaigns_by_spend_keep_their_label_and_the_rest_is_summed() -> None:
    rows = [row(1, 50), row(2, 900, committed=1_300, state="metered", p=0.5),
            row(3, 10, state="exhausted", p=0.1), row(4, 700, committed=1_100, p=0.3),
            row(5, 0, budget=3_000, state="stopped", p=0.2)]
    series = CampaignSeries()
    series.follow(lambda: BudgetSnapshot.from_status(rows), top=2)
    got: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in series.collect():
        got[fam.name] = [(s.labels, s.value) for s in fam.samples]
    assert {labels["campaign"] for labels, _ in got["adfunnel_pacing_p"]} == {"2", "4", OTHER}
    assert by_label(got["adfunnel_daily_spend_micros"], campaign=OTHER) == 60
    assert by_label(got["adfunnel_daily_budget_micros"], campaign=OTHER) == 5_000
    assert by_label(got["adfunnel_overdelivery_pct"], campaign="2") == pytest.approx(30.0)
    assert by_label(got["adfunnel_overdelivery_pct"], campaign="4") == pytest.approx(10.0)
    assert by_label(got["adfunnel_overdelivery_pct"], campaign=OTHER) == 0.0
    assert by_label(got["adfunnel_pacing_p"], campaign=OTHER) == pytest.approx(1.3 / 3)
    assert by_label(got["adfunnel_budget_state"], campaign="2", state="metered") == 1
    assert by_label(got["adfunnel_budget_state"], campaign="2", state="open") == 0
    for state in ("open", "exhausted", "stopped"):
        assert by_label(got["adfunnel_budget_state"], campaign=OTHER, state=state) == 1
    series.follow(None)
    assert all(not fam.samples for fam in series.collect())


def test_a_runtime_exports_the_design_metrics(client: TestClient, runtime: Runtime) -> None:
    made = make_campaign(client)
    before = samples(client.get("/metrics").text)["adfunnel_billed_micros_total"][0][1]
    reserve = {"id": "feed", "reserve_cpm_micros": 500_000}  # a lone bidder pays it
    for _ in range(3):
        r = client.post("/v1/ads:select", json=ad_request(deadline_ms=5_000,
                                                           placement=reserve))
        assert r.status_code == 200
    none = client.post("/v1/ads:select", json=ad_request(deadline_ms=5_000, slots=[
        {"id": "s1", "position": 1, "width": 728, "height": 90}]))
    assert none.status_code == 204
    assert client.get(f"/i?t={r.json()['ads'][0]['token']}").status_code == 204
    client.get("/v1/ledger/stats")  # the events appended so far reach the ledger
    assert isinstance(runtime.gate, InProcessBudget)
    runtime.gate.process.feed_billed()  # the billed feed's periodic step, now
    got = samples(client.get("/metrics").text)
    assert set(DESIGN) <= set(got)
    assert by_label(got["adfunnel_decisions_total"], outcome="filled") >= 3
    assert by_label(got["adfunnel_decisions_total"], outcome="no_fill") >= 1
    assert got["adfunnel_fill_rate"][0][1] == pytest.approx(0.75)
    cid = str(made["campaign"]["id"])
    assert by_label(got["adfunnel_pacing_p"], campaign=cid) == 1.0
    states = {labels["state"]: v for labels, v in got["adfunnel_budget_state"]
              if labels["campaign"] == cid}
    assert sum(states.values()) == 1
    assert by_label(got["adfunnel_daily_budget_micros"], campaign=cid) == 100_000_000
    # billed today, as the budget service was fed it: the one impression's 500
    assert by_label(got["adfunnel_daily_spend_micros"], campaign=cid) == 500
    # the impression: 500,000 CPM micros / 1,000
    assert got["adfunnel_billed_micros_total"][0][1] - before == 500


def test_metrics_need_a_key(client: TestClient) -> None:
    assert client.get("/metrics", headers={"Authorization": ""}).status_code == 401


def test_the_prometheus_config_scrapes_with_a_bearer_credentials_file() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    serve = jobs["adfunnel-serve"]
    assert serve["metrics_path"] == "/metrics"
    assert serve["authorization"]["type"] == "Bearer"
    assert serve["authorization"]["credentials_file"].startswith("/")
    assert all(job["static_configs"][0]["targets"] for job in jobs.values())


def dashboard_metrics() -> set[str]:
    """Every adfunnel_* name the dashboard's panels query."""
    board = json.loads(DASHBOARD.read_text())
    assert board["panels"] and board["title"] and board["uid"]
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert exprs
    return {m for e in exprs for m in re.findall(r"\badfunnel_[a-z0-9_]+", e)}


@pytest.mark.e2e
def test_every_metric_the_dashboard_queries_is_exported(tmp_path: Path) -> None:
    queried = dashboard_metrics()
    assert set(DESIGN) <= queried
    db = f"sqlite:///{tmp_path / 'metrics.sqlite3'}"
    with ServerProcess(db, extra_env={"ADFUNNEL_ADMIN_KEY": ADMIN_KEY},
                       timeout_s=120.0) as server, \
            httpx.Client(base_url=server.url, headers=ADMIN_HEADERS) as http:
        make_campaign(http)  # type: ignore[arg-type]
        r = http.post("/v1/ads:select", json=ad_request(deadline_ms=5_000))
        assert r.status_code == 200
        assert http.get(f"/i?t={r.json()['ads'][0]['token']}").status_code == 204
        text = http.get("/metrics").text
    exported = families(text)
    assert queried <= exported, sorted(queried - exported)
    assert set(DESIGN) <= set(samples(text))  # the design's own series carry samples


def test_no_per_campaign_series_when_the_top_is_zero() -> None:
    """``metrics_top_campaigns=0``: the budget service's state is not read at all."""
    from adfunnel.budget.metrics import CAMPAIGNS
    from adfunnel.clock import ManualClock
    from adfunnel.runtime.app import build_app, build_runtime
    from adfunnel.settings import load_settings
    from tests.serving.conftest import START

    CAMPAIGNS.follow(None)
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY, metrics_top_campaigns=0)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
            make_campaign(client)
            got = samples(client.get("/metrics").text)
        assert "adfunnel_pacing_p" not in got and "adfunnel_decisions_total" in got
    finally:
        rt.close()
