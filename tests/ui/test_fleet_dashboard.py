"""Real processes: an ad server of a fleet (``ADFUNNEL_BUDGET_SERVICE_URL``) and its
``adfunnel budget-service`` on PostgreSQL. The ad server's dashboard shows the budget
service's state and target curve, read over HTTP, as the embedded one does."""

from __future__ import annotations

import json
import re
import secrets
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from adfunnel.sim.server_proc import ManagedProcess, ServerProcess, free_port
from adfunnel.ui.session import COOKIE
from tests.internal_token import INTERNAL_TOKEN

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

BUDGET = 50_000_000


def _chart(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="pacing-data">(.*?)</script>',
                      page, re.S)
    assert found, "no chart data on the page"
    return json.loads(found.group(1))


def test_a_fleet_servers_dashboard_reads_the_budget_service(pg_schema_url: str,
                                                            tmp_path) -> None:
    from adfunnel.campaigns.migrate import upgrade
    from adfunnel.db import make_engine

    engine = make_engine(pg_schema_url)
    upgrade(engine)
    engine.dispose()
    port = free_port()
    env = {"ADFUNNEL_BUDGET_SERVICE_URL": f"http://127.0.0.1:{port}",
           "ADFUNNEL_TOKEN_SECRET": secrets.token_hex(32),
           "ADFUNNEL_INTERNAL_TOKEN": INTERNAL_TOKEN}
    server = ServerProcess(pg_schema_url, clock="system", extra_env=env,
                           log_path=tmp_path / "ads.log")
    service = None
    api = httpx.Client(base_url=server.url, timeout=10, headers=server.headers)
    ui = httpx.Client(base_url=server.url, timeout=10)
    try:
        today = datetime.now(UTC).date()
        adv = api.post("/v1/advertisers", json={"name": "a"}).json()
        camp = api.post("/v1/campaigns", json={
            "advertiser_id": adv["id"], "name": "fleet", "objective": "clicks",
            "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": BUDGET,
            "time_zone": "UTC", "flight_start": (today - timedelta(days=1)).isoformat()}
                        ).json()
        service = ManagedProcess(["budget-service", "--database-url", pg_schema_url],
                                 log_path=tmp_path / "budget.log", port=port,
                                 extra_env={"ADFUNNEL_INTERNAL_TOKEN": INTERNAL_TOKEN})
        login = ui.post("/ui/login", data={"api_key": server.admin_key})
        assert login.status_code == 303
        ui.cookies.set(COOKIE, login.cookies[COOKIE], path="/ui")
        deadline = time.monotonic() + 30
        while True:  # the service reads the campaign from the change log, then answers
            page = ui.get(f"/ui/campaigns/{camp['id']}")
            assert page.status_code == 200
            chart = _chart(page.text)
            if chart["target_micros"][0] is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert chart["target_micros"][-1] == pytest.approx(BUDGET)
        assert any(p is not None for p in chart["p"])
    finally:
        api.close()
        ui.close()
        server.stop()
        if service is not None:
            service.stop()
