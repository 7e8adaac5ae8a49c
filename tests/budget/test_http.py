"""The budget service over HTTP: uvicorn on a free port, one report round trip."""

from __future__ import annotations

import socket
import threading
import time
from datetime import UTC, date, datetime

import httpx
import uvicorn

from adfunnel.budget.client import BudgetClient
from adfunnel.budget.http import HttpReportTransport, create_app
from adfunnel.budget.protocol import BilledUpdate
from adfunnel.budget.service import BudgetService
from adfunnel.campaigns.model import BidType, Campaign, Objective
from adfunnel.clock import ManualClock

NOW = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_report_round_trip_over_http() -> None:
    clock = ManualClock(NOW)
    svc = BudgetService(clock, warmup_s=0.0)
    camp = Campaign(7, 1, "c", Objective.CLICKS, BidType.CPM, 2_000_000, 100_000_000, "UTC",
                    date(2026, 1, 1))
    svc.upsert_campaign(camp)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(svc), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(base + "/healthz").json()["ok"]:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        transport = HttpReportTransport([base], timeout_s=2.0)
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
    finally:
        server.should_exit = True
        th.join(timeout=5)
