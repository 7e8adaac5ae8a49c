"""End to end: start the real server, replay the whole real iPinYou trace, check the report."""

from __future__ import annotations

import pytest

from adfunnel.sim.replay import load_rows, run_replay

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    rows = load_rows()
    return run_replay(rows, workdir=tmp_path_factory.mktemp("replay"))


def test_every_row_is_one_request(report: dict) -> None:
    assert report["requests"] == 12_526
    assert report["errors"] == {}
    assert 0 < report["filled_slots"] <= report["requests"]
    assert report["latency_ms"]["p50"] > 0


def _one_charge(c: dict) -> int:
    return c["bid_micros"] // 1000 if c["bid_type"] == "CPM" else c["bid_micros"]


def test_budgets_bind_and_overspend_stays_within_the_margin(report: dict) -> None:
    # the ledger bills at most the budget by construction; what the budget gate decides
    # is how much was charged beyond it (absorbed): within 1 % or one charge
    limited = 0
    for c in report["campaigns"]:
        assert c["billed_micros"] == sum(d["billed_micros"] for d in c["days"])
        for day in c["days"]:
            margin = max(day["budget_micros"] // 100, _one_charge(c))
            assert day["absorbed_overspend_micros"] <= margin, (c["name"], day)
        limited += c["budget_limited_days"] > 0
    assert limited >= 2  # the plan makes some campaigns budget-limited…
    assert limited < len(report["campaigns"])  # …and not all


def test_duplicates_billed_once_and_forgeries_refused(report: dict) -> None:
    fired, ledger = report["fired"], report["ledger"]
    assert fired["duplicates"] > 0 and fired["forged"] > 0
    assert ledger["duplicates_rejected"] == fired["duplicates"]
    assert ledger["invalid_tokens"] == fired["forged"] == fired["forged_refused"]
    impressions = sum(c["impressions"] for c in report["campaigns"])
    clicks = sum(c["clicks"] for c in report["campaigns"])
    assert impressions == fired["impressions"]
    assert ledger["rows"] == impressions + clicks
    assert fired["bad_redirects"] == 0
