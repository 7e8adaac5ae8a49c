"""The advertiser API's bid strategies (#27): ``bid_strategy`` with its cap or target,
the derived ``bid_micros`` (the value of one action and the ceiling of any bid), every
broken rule named at once (422), and ``bid_strategy_since`` moving when the terms change
so the budget service restarts λ."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from adfunnel.api.campaigns import make_advertiser_router
from adfunnel.api.errors import install_error_handlers
from adfunnel.auth import ApiKeys, MemoryKeyStore, install_auth
from adfunnel.billing.ledger import MemoryLedger
from adfunnel.campaigns.model import BidStrategy
from adfunnel.campaigns.sql_store import SqlCampaignStore
from adfunnel.clock import FixedClock, ManualClock
from adfunnel.settings.model import DEFAULT_MAX_BID_MICROS
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.campaigns.conftest import NOW

CPC: dict[str, Any] = {
    "name": "Clicks", "objective": "clicks", "bid_type": "CPC",
    "daily_budget_micros": 50_000_000, "time_zone": "UTC", "flight_start": "2026-11-01"}
CPA: dict[str, Any] = {**CPC, "name": "Sales", "objective": "conversions", "bid_type": "CPA"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def api(store: SqlCampaignStore, clock: ManualClock) -> Iterator[TestClient]:
    app = FastAPI()
    install_error_handlers(app)
    install_auth(app, ApiKeys(MemoryKeyStore(), FixedClock(NOW), ADMIN_KEY))
    app.include_router(make_advertiser_router(store, MemoryLedger(), clock, None))
    with TestClient(app, headers=ADMIN_HEADERS) as c:
        yield c


@pytest.fixture
def adv(api: TestClient) -> int:
    return int(api.post("/v1/advertisers", json={"name": "Acme"}).json()["id"])


def create(api: TestClient, adv: int, body: dict[str, Any], **over: Any) -> Any:
    return api.post("/v1/campaigns", json={"advertiser_id": adv, **body, **over})


def problems(r: Any) -> dict[str, str]:
    assert r.status_code == 422, r.text
    return {f["field"]: f["problem"] for f in r.json()["fields"]}


def test_max_clicks_derives_its_ceiling_from_the_daily_budget(
        api: TestClient, adv: int, store: SqlCampaignStore) -> None:
    """1 % of a daily budget of 50.00 is 0.50 per click; read back by GET and the store.
    Red when the ceiling is the whole budget (``PERIOD_BUDGET_ACTIONS`` = 1)."""
    r = create(api, adv, CPC, bid_strategy="max_clicks")
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["bid_strategy"], made["bid_micros"], made["bid_cap_micros"],
            made["target_cpa_micros"]) == ("max_clicks", 500_000, None, None)
    assert made["bid_strategy_since"] is not None
    assert api.get(f"/v1/campaigns/{made['id']}").json() == made
    kept = store.get_campaign(made["id"])
    assert (kept.bid_strategy, kept.bid_micros) == (BidStrategy.MAX_CLICKS, 500_000)
    assert kept.bid_strategy_since == NOW


def test_flight_budget_cap_and_target_set_the_bid(api: TestClient, adv: int) -> None:
    """A flight budget is the period's budget; a cap or a target is the bid itself.
    Red when the derivation reads the daily budget with budget_period flight."""
    flight = create(api, adv, CPC, bid_strategy="max_clicks", budget_period="flight",
                    flight_end="2026-11-30", flight_budget_micros=900_000_000,
                    daily_budget_micros=None).json()
    assert flight["bid_micros"] == 9_000_000
    capped = create(api, adv, CPA, bid_strategy="max_conversions", bid_cap_micros=7_000_000)
    assert capped.json()["bid_micros"] == 7_000_000, capped.text
    cpa = create(api, adv, CPA, bid_strategy="target_cpa", target_cpa_micros=20_000_000)
    assert (cpa.json()["bid_micros"], cpa.json()["target_cpa_micros"]) == (
        20_000_000, 20_000_000)


def test_every_broken_strategy_rule_is_named_at_once(api: TestClient, adv: int) -> None:
    """target_cpa without its target, on a CPC campaign, with a cap and a bid: four
    fields in one 422. Red when the target_cpa_micros rule is dropped."""
    got = problems(create(api, adv, CPC, bid_strategy="target_cpa", bid_micros=1_000,
                          bid_cap_micros=5))
    assert {"target_cpa_micros", "bid_type", "bid_cap_micros", "bid_micros"} <= got.keys()
    assert "derived" in got["bid_micros"]
    assert "target_cpa" in got["target_cpa_micros"]
    assert problems(create(api, adv, CPC))["bid_micros"] == (
        "is required with bid_strategy manual")
    assert set(problems(create(api, adv, CPC, bid_micros=1, target_cpa_micros=5))) == {
        "target_cpa_micros"}
    tiny = problems(create(api, adv, CPC, bid_strategy="max_clicks", daily_budget_micros=99))
    assert set(tiny) == {"daily_budget_micros"}


def test_an_automatic_strategy_optimises_the_stated_objective(
        api: TestClient, adv: int) -> None:
    """max_clicks states clicks, max_conversions and target_cpa conversions; a manual
    bid takes any objective. Red when the objective rule is dropped."""
    got = problems(create(api, adv, CPC, objective="impressions", bid_strategy="max_clicks"))
    assert set(got) == {"objective"} and "clicks" in got["objective"]
    got = problems(create(api, adv, CPA, objective="clicks", bid_strategy="max_conversions"))
    assert set(got) == {"objective"} and "conversions" in got["objective"]
    assert create(api, adv, CPC, bid_strategy="max_clicks").status_code == 201
    r = create(api, adv, CPA, bid_strategy="target_cpa", target_cpa_micros=9_000_000)
    assert r.status_code == 201, r.text
    manual = create(api, adv, CPC, objective="impressions", bid_micros=500_000)
    assert manual.status_code == 201, manual.text
    url = f"/v1/campaigns/{manual.json()['id']}"
    assert set(problems(api.patch(url, json={"bid_strategy": "max_clicks"}))) == {"objective"}
    r = api.patch(url, json={"bid_strategy": "max_clicks", "objective": "clicks"})
    assert r.status_code == 200, r.text


def test_a_direct_line_bids_manually(api: TestClient, adv: int) -> None:
    """Red when strategy_problems lets a sponsorship bid automatically."""
    got = problems(create(api, adv, {
        **CPC, "bid_type": "CPM", "objective": "impressions", "priority": "sponsorship",
        "goal": {"metric": "share", "share": 0.5}, "flight_end": "2026-11-03"},
        bid_strategy="max_clicks"))
    assert "bid_strategy" in got


def test_patches_recompute_the_bid_and_restart_lambda(
        api: TestClient, adv: int, clock: ManualClock) -> None:
    """A budget change moves the derived bid but not ``bid_strategy_since``; a strategy
    switch moves it, drops the old cap and derives again. Red when bidding_terms stamps
    only on create (or does not recompute on a budget PATCH)."""
    made = create(api, adv, CPA, bid_strategy="max_conversions",
                  bid_cap_micros=3_000_000).json()
    since = made["bid_strategy_since"]
    url = f"/v1/campaigns/{made['id']}"
    clock.advance(3600)
    r = api.patch(url, json={"bid_cap_micros": None})
    assert r.status_code == 200, r.text
    assert (r.json()["bid_micros"], r.json()["bid_cap_micros"]) == (500_000, None)
    assert r.json()["bid_strategy_since"] != since
    since = r.json()["bid_strategy_since"]
    clock.advance(3600)
    r = api.put(f"{url}/budget", json={"daily_budget_micros": 80_000_000})
    assert (r.json()["bid_micros"], r.json()["bid_strategy_since"]) == (800_000, since)
    assert "bid_micros" in problems(api.patch(url, json={"bid_micros": 1}))
    clock.advance(3600)
    r = api.patch(url, json={"bid_strategy": "target_cpa", "target_cpa_micros": 12_000_000})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["bid_strategy"], out["bid_micros"], out["target_cpa_micros"]) == (
        "target_cpa", 12_000_000, 12_000_000)
    assert out["bid_strategy_since"] > since
    missing = problems(api.patch(url, json={"bid_strategy": "max_clicks"}))
    assert "bid_type" in missing  # max_clicks bills per click
    r = api.patch(url, json={"bid_strategy": "manual"})  # keeps the last bid; drops the target
    assert (r.json()["bid_strategy"], r.json()["bid_micros"], r.json()["target_cpa_micros"]
            ) == ("manual", 12_000_000, None)


def test_the_readmes_example_runs(api: TestClient, adv: int) -> None:
    """README §"Bid strategies and auction types": its create is answered with the cap as
    the bid, its PATCH with the three fields it names. Red when the 422 leaves out
    ``bid_type`` or ``objective`` (the strategy's bid type or objective rule dropped)."""
    import json
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("### Bid strategies and auction types"):
                   text.index("**Auction types.**")]
    bodies = [json.loads(m) for m in re.findall(r"-d '(\{.*?\})'", section, re.S)]
    assert len(bodies) == 2
    r = create(api, adv, {k: v for k, v in bodies[0].items() if k != "advertiser_id"})
    assert r.status_code == 201, r.text
    assert (r.json()["bid_micros"], r.json()["bid_cap_micros"]) == (800_000, 800_000)
    got = problems(api.patch(f"/v1/campaigns/{r.json()['id']}", json=bodies[1]))
    assert list(got) == ["bid_type", "objective", "target_cpa_micros"]


def test_a_derived_bid_above_the_servers_limit_names_its_source(
        api: TestClient, adv: int) -> None:
    """A ceiling of 1 % of a huge budget above ``max_bid_micros`` asks for a cap; a cap or
    target above it is named itself, never the derived ``bid_micros``. Red when the API
    reports the derived ``bid_micros``."""
    huge = problems(create(api, adv, CPC, bid_strategy="max_clicks",
                           daily_budget_micros=DEFAULT_MAX_BID_MICROS * 1_000))
    assert list(huge) == ["bid_cap_micros"] and "max_bid_micros" in huge["bid_cap_micros"]
    high = problems(create(api, adv, CPA, bid_strategy="target_cpa",
                           target_cpa_micros=DEFAULT_MAX_BID_MICROS + 1))
    assert list(high) == ["target_cpa_micros"]
    capped = create(api, adv, CPC, bid_strategy="max_clicks", bid_cap_micros=1_000_000,
                    daily_budget_micros=DEFAULT_MAX_BID_MICROS * 1_000)
    assert capped.status_code == 201, capped.text
