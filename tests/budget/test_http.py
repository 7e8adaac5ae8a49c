"""The budget service over HTTP: uvicorn on a free port, one report round trip."""

from __future__ import annotations

from datetime import UTC, date, datetime

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.http import HttpReportTransport, create_app
from adfunnel.budget.protocol import BilledUpdate
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock
from tests.http_server import serving
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
