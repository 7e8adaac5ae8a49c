"""An OpenRTB decision reaches the served log with its supply chain, and its winner
with the bid we sent as its price and the auction type."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.events.compactor import compact
from adfunnel.learn.query import query
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS
from tests.openrtb.conftest import START, banner_campaign, banner_request
from tests.serving.helpers import ad_request

SCHAIN = {"complete": 1, "ver": "1.0",
          "nodes": [{"asi": "exchange.test", "sid": "pub-9", "hp": 1, "rid": "r-1"}]}


@pytest.mark.slow
def test_the_supply_chain_is_kept_in_the_served_log(tmp_path: Path) -> None:
    """Breaks if the chain is not handed to the served log (tried: ``supply_chain`` not
    passed by the endpoint to ``DecisionRunner.run``: the column is null)."""
    directory = tmp_path / "served"
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(directory),
                             derive_client_facts=False)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        banner_campaign(client)
        r = client.post("/openrtb2/bid", json=banner_request(source={"schain": SCHAIN}))
        assert r.status_code == 200, r.text
    compact(directory, START + timedelta(hours=2))
    [(request_id, chain, winners)] = query(
        directory, "select request_id, supply_chain, len(winners) from served")
    assert (request_id, winners) == ("ortb-req-1", 1)
    assert json.loads(chain) == SCHAIN


@pytest.mark.slow
def test_the_served_log_prices_an_openrtb_winner_at_its_bid(tmp_path: Path) -> None:
    """A CPM bid of 2.50 against a 0.50 floor: the internal auction's price is the floor,
    the bid sent is 2.50. Breaks if the served log keeps the internal price (tried:
    ``build_record`` reading ``p.win.price_micros`` only: 500,000), or loses the
    auction type (tried: ``openrtb_at`` not set by ``reprice``: null), or marks a
    select winner as an OpenRTB bid (tried: ``openrtb_at`` written for every winner)."""
    directory = tmp_path / "served"
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="local", served_log_dir=str(directory),
                             derive_client_facts=False)
    rt = build_runtime(settings, ManualClock(START), seed=1)
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        banner_campaign(client, bid_micros=2_500_000)
        r = client.post("/openrtb2/bid", json=banner_request(at=1))
        assert r.status_code == 200, r.text
        r = client.post("/v1/ads:select", json=ad_request(
            request_id="sel", placement={"id": "feed", "reserve_cpm_micros": 500_000}))
        assert r.status_code == 200, r.text
    compact(directory, START + timedelta(hours=2))
    rows = query(directory, "select request_id, w.price_micros, w.bid_micros, "
                            "w.charge_micros, w.openrtb_at from "
                            "(select request_id, unnest(winners) as w from served) "
                            "order by request_id")
    assert rows == [("ortb-req-1", 2_500_000, 2_500_000, 2_500, 1),
                    ("sel", 500_000, 2_500_000, 500, None)]
