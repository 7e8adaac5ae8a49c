"""An OpenRTB decision reaches the served log with its supply chain."""

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
