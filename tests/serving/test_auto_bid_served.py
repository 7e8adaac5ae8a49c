"""Issue #27 end to end in the embedded runtime: an automatic max_clicks campaign made
through the API gets its λ from the in-process budget service, and the bid it is
served with (in the served log, and the price its token carries) follows ⌊v ÷ λ⌋."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from adfunnel.budget.multipliers import START_LAMBDA
from adfunnel.clock import ManualClock
from adfunnel.events.compactor import compact
from adfunnel.learn.query import query
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY
from tests.serving.conftest import START
from tests.serving.helpers import ad_request, make_campaign

VALUE = 2_000_000  # the click's value v: its bid cap, micros


@pytest.mark.slow
def test_an_automatic_campaign_is_served_at_its_value_over_lambda(tmp_path: Path) -> None:
    """A new automatic campaign starts at λ = START_LAMBDA; winning nothing, λ falls
    each control step; the served bid is ⌊v ÷ λ⌋ with the λ logged beside it, and the
    price is at most that bid. Red when the decider bids v (``_auto_bids`` returning
    ``bid``) or when the embedded gate answers no λ (``bid_multiplier`` of
    InProcessBudget returning 1.0)."""
    directory = tmp_path / "served"
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             budget="service", admin_key=ADMIN_KEY,
                             served_log_dir=str(directory))
    clock = ManualClock(START)
    rt = build_runtime(settings, clock, seed=1)
    with TestClient(build_app(rt), headers=ADMIN_HEADERS) as client:
        made = make_campaign(client, objective="clicks", bid_type="CPC", bid_micros=None,
                             bid_strategy="max_clicks", bid_cap_micros=VALUE)
        cid = made["campaign"]["id"]
        assert made["campaign"]["bid_micros"] == VALUE  # v, the ceiling of any bid
        clock.advance(1)  # a report: the service's directive reaches the gate
        assert rt.gate.bid_multiplier(cid) == START_LAMBDA
        for _ in range(6):  # control steps without a win: λ falls (then a report)
            clock.advance(10)
        clock.advance(1)
        lam = rt.gate.bid_multiplier(cid)
        assert 1.0 < lam < START_LAMBDA
        r = client.post("/v1/ads:select", json=ad_request(request_id="r1"))
        assert r.status_code == 200, r.text
    compact(directory, START + timedelta(hours=2))
    rows = query(directory, "select winners[1].campaign_id, winners[1].bid_micros, "
                            "winners[1].price_micros, winners[1].bid_multiplier from served")
    assert rows == [(cid, math.floor(VALUE / lam), rows[0][2], lam)]
    assert rows[0][2] <= VALUE / lam
    rt.close()
