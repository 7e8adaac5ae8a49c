"""Issue input, with real processes: four ad servers already serving with
``ADFUNNEL_BUDGET_SERVICE_URL`` set, today's ledger 90 % billed, then
``adfunnel budget-service`` starts. It must not grant from a billed total of 0: the
overspend absorbed by the ledger stays within one charge."""

from __future__ import annotations

import secrets
import threading
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from adfunnel.billing.model import EventType, LedgerEvent
from adfunnel.billing.sql_ledger import SqlLedger
from adfunnel.campaigns.migrate import upgrade
from adfunnel.db import make_engine
from adfunnel.sim.invalid import PERSON_UA
from adfunnel.sim.server_proc import ManagedProcess, ServerProcess, free_port
from tests.api_keys import ADMIN_HEADERS
from tests.internal_token import INTERNAL_TOKEN

CHARGE = 2_000  # a 2.00 CPM price per impression
BUDGET = 100_000
REQUEST = {
    "user": {"key": "u", "attributes": {"geo.country": "US"}},
    "placement": {"id": "feed", "reserve_cpm_micros": 2_000_000},
    "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
}


def _fire(url: str, stop: threading.Event, served: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=5, headers={"user-agent": PERSON_UA}) as http:
        while not stop.is_set():
            r = http.post("/v1/ads:select", json=REQUEST)
            if r.status_code == 200:
                for ad in r.json()["ads"]:
                    http.get(ad["impression_url"])
                    served.append(1)
            time.sleep(0.01)


@pytest.mark.e2e
@pytest.mark.postgres
def test_budget_service_started_late_absorbs_at_most_one_charge(pg_schema_url: str,
                                                                tmp_path) -> None:
    engine = make_engine(pg_schema_url)
    upgrade(engine)
    ledger = SqlLedger(engine)
    service_port = free_port()
    env = {"ADFUNNEL_BUDGET_SERVICE_URL": f"http://127.0.0.1:{service_port}",
           "ADFUNNEL_TOKEN_SECRET": secrets.token_hex(32),
           "ADFUNNEL_INTERNAL_TOKEN": INTERNAL_TOKEN}
    servers = [ServerProcess(pg_schema_url, clock="system", extra_env=env,
                             log_path=tmp_path / f"ads{i}.log") for i in range(4)]
    service = None
    stop = threading.Event()
    served: list[int] = []
    try:
        http = httpx.Client(base_url=servers[0].url, timeout=10, headers=ADMIN_HEADERS)
        today = datetime.now(UTC).date()
        adv = http.post("/v1/advertisers", json={"name": "a"}).json()
        camp = http.post("/v1/campaigns", json={
            "advertiser_id": adv["id"], "name": "nine tenths spent", "objective": "impressions",
            "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": BUDGET,
            "time_zone": "UTC", "flight_start": (today - timedelta(days=1)).isoformat(),
            "pacing_mode": "accelerated"}).json()
        ad = http.post(f"/v1/campaigns/{camp['id']}/ads", json={
            "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
            "width": 300, "height": 250}).json()
        now = datetime.now(UTC)
        for i in range(45):  # 90,000 µ billed today, of serves whose window has closed
            ledger.record(LedgerEvent(f"prior-{i}", EventType.IMPRESSION, camp["id"], ad["id"],
                                      "feed", "CPM", CHARGE, now, today,
                                      served_at=now - timedelta(hours=1, seconds=1)), BUDGET)
        threads = [threading.Thread(target=_fire, args=(s.url, stop, served), daemon=True)
                   for s in servers]
        for t in threads:
            t.start()
        time.sleep(2.0)  # the servers run without a service: nothing may serve
        assert served == []
        service = ManagedProcess(["budget-service", "--database-url", pg_schema_url],
                                 log_path=tmp_path / "budget.log", port=service_port,
                                 extra_env={"ADFUNNEL_INTERNAL_TOKEN": INTERNAL_TOKEN})
        time.sleep(8.0)  # warm-up, then slices from what remains
        stop.set()
        for t in threads:
            t.join(timeout=10)
        (totals,) = ledger.day_totals(camp["id"], today, today)
        assert totals.absorbed_micros <= CHARGE
        assert totals.billed_micros <= BUDGET
        # the remaining 10 % was delivered once the service knew the ledger
        assert totals.billed_micros >= BUDGET - 2 * CHARGE, totals
        assert len(served) == (totals.billed_micros + totals.absorbed_micros - 90_000) // CHARGE
    finally:
        stop.set()
        for s in servers:
            s.stop()
        if service is not None:
            service.stop()
        engine.dispose()
