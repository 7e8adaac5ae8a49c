"""The budget service over HTTP: uvicorn on a free port, one report round trip."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime

import pytest

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.http import HttpReportTransport, create_app
from adfunnel.budget.protocol import BilledUpdate
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock
from tests.http_server import free_port, serving
from tests.internal_token import INTERNAL_TOKEN

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)


def test_report_round_trip_over_http() -> None:
    clock = ManualClock(NOW)
    svc = BudgetService(clock, warmup_s=0.0)
    camp = Campaign(7, 1, "c", Objective.CLICKS, BidType.CPM, 2_000_000, 100_000_000, "UTC",
                    date(2026, 1, 1))
    svc.upsert_campaign(camp)
    with serving(create_app(svc, token=INTERNAL_TOKEN), lifespan="on") as base:
        transport = HttpReportTransport([base], token=INTERNAL_TOKEN, timeout_s=2.0)
        client = BudgetClient("s1", clock, transport)
        assert client.admit(camp, NOW, 2000) == "no_slice"  # unknown before the first reply
        client.report()
        assert transport.failures == 0
        # a new instance grants nothing before it has read the day's billed spend
        assert client.admit(camp, NOW, 2000) == "no_slice"
        transport.send_billed(0, [BilledUpdate(7, "2026-10-20", 0, NOW.timestamp() - 3600)])
        client.report()  # names the service's epoch: synced
        # metered until a control step has measured the spend rate; a slice was granted
        assert client.state(7, NOW.date()).value == "metered"
        assert client.admit(camp, NOW, 2000) is None
        from adfunnel.budget.gate import Served

        client.record_served(Served(7, NOW.date(), "i1", 2000, NOW.timestamp() + 60, 2000))
        client.report()
        assert svc.campaign_day(7, NOW.date()).served_total == 2000
        transport.send_billed(0, [BilledUpdate(7, "2026-10-20", 1500, NOW.timestamp() + 1)])
        assert svc.campaign_day(7, NOW.date()).billed == 1500
        transport.close()


def test_an_outage_of_the_service_is_logged_once_and_its_end_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """An ad server said nothing while its budget service was down (its campaigns fail
    closed): one warning when a shard stops answering, none while it stays down, one
    when it answers again; the internal token never in them."""
    clock = ManualClock(NOW)
    app = create_app(BudgetService(clock, warmup_s=0.0), token=INTERNAL_TOKEN)
    port = free_port()
    transport = HttpReportTransport([f"http://127.0.0.1:{port}"], token=INTERNAL_TOKEN,
                                    timeout_s=2.0)
    client = BudgetClient("s1", clock, transport)
    caplog.set_level(logging.WARNING, logger="adfunnel.budget.http")
    with serving(app, port=port, lifespan="on"):
        client.report()
    assert caplog.records == []
    client.report()
    client.report()
    down = [r.getMessage() for r in caplog.records]
    assert len(down) == 1 and "shard 0 does not answer" in down[0], down
    with serving(app, port=port, lifespan="on"):
        client.report()
        client.report()
    again = [r.getMessage() for r in caplog.records[1:]]
    assert len(again) == 1 and "shard 0 answers again" in again[0], again
    assert INTERNAL_TOKEN not in caplog.text
    transport.close()
