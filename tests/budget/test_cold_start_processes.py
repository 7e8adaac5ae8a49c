"""Issue input, with real processes: four ad servers already serving with
``ADFUNNEL_BUDGET_SERVICE_URL`` set, today's ledger 90 % billed, then
``adfunnel budget-service`` starts. It must not grant from a billed total of 0: the
overspend absorbed by the ledger stays within one charge."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
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

#: seconds a process may take to start (four servers start at once on a shared machine)
START_S = 180.0
CHARGE = 2_000  # a 2.00 CPM price per impression
BUDGET = 100_000
REQUEST = {
    "user": {"key": "u", "attributes": {"geo.country": "US"}},
    "placement": {"id": "feed", "reserve_cpm_micros": 2_000_000},
    "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}],
}


class _Traffic:
    """What the firing threads observed: ad requests answered, impressions served, and
    the number of requests answered when the last impression was served."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answered = 0
        self.served = 0
        self.answered_at_last_serve = 0

    def note(self, ads: int) -> None:
        with self.lock:
            self.answered += 1
            if ads:
                self.served += ads
                self.answered_at_last_serve = self.answered

    def quiet_for(self) -> int:
        """Requests answered since the last serve."""
        with self.lock:
            return self.answered - self.answered_at_last_serve


def _fire(url: str, stop: threading.Event, traffic: _Traffic) -> None:
    with httpx.Client(base_url=url, timeout=5, headers={"user-agent": PERSON_UA}) as http:
        while not stop.is_set():
            r = http.post("/v1/ads:select", json=REQUEST)
            ads = r.json()["ads"] if r.status_code == 200 else []
            for ad in ads:
                http.get(ad["impression_url"])
            traffic.note(len(ads))
            time.sleep(0.01)  # pacing the load, not synchronisation


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


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
                             log_path=tmp_path / f"ads{i}.log", timeout_s=START_S)
               for i in range(4)]
    service = None
    stop = threading.Event()
    traffic = _Traffic()
    http = httpx.Client(base_url=servers[0].url, timeout=10, headers=ADMIN_HEADERS)
    try:
        today = datetime.now(UTC).date()
        adv = http.post("/v1/advertisers", json={"name": "a"}).json()
        camp = http.post("/v1/campaigns", json={
            "advertiser_id": adv["id"], "name": "nine tenths spent", "objective": "impressions",
            "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": BUDGET,
            "time_zone": "UTC", "flight_start": (today - timedelta(days=1)).isoformat(),
            "pacing_mode": "accelerated",
            "billable_event": "rendered"}).json()  # fires /i as the billed impression
        ad = http.post(f"/v1/campaigns/{camp['id']}/ads", json={
            "landing_url": "https://x.test/", "creative_ref": "c", "format": "banner",
            "width": 300, "height": 250}).json()
        now = datetime.now(UTC)
        for i in range(45):  # 90,000 µ billed today, of serves whose window has closed
            ledger.record(LedgerEvent(f"prior-{i}", EventType.IMPRESSION, camp["id"], ad["id"],
                                      "feed", "CPM", CHARGE, now, today,
                                      served_at=now - timedelta(hours=1, seconds=1)), BUDGET)
        threads = [threading.Thread(target=_fire, args=(s.url, stop, traffic), daemon=True)
                   for s in servers]
        for t in threads:
            t.start()
        # the servers run without a service: 200 requests answered, nothing served
        _wait(lambda: traffic.answered >= 200, 60, "200 answers without a service")
        assert traffic.served == 0
        service = ManagedProcess(["budget-service", "--database-url", pg_schema_url],
                                 log_path=tmp_path / "budget.log", port=service_port,
                                 timeout_s=START_S,
                                 extra_env={"ADFUNNEL_INTERNAL_TOKEN": INTERNAL_TOKEN})

        def billed() -> int:
            (day,) = ledger.day_totals(camp["id"], today, today)
            return day.billed_micros

        # warm-up, then slices from what remains: the remaining 10 % is delivered once
        # the service knows the ledger, then 400 answers in a row serve nothing more
        _wait(lambda: billed() >= BUDGET - 2 * CHARGE, 120, "the last 10 % to be billed")
        _wait(lambda: traffic.quiet_for() >= 400, 120, "the serves to stop")
        stop.set()
        for t in threads:
            t.join(timeout=10)
        (totals,) = ledger.day_totals(camp["id"], today, today)
        # the ledger caps billing at the budget: what it absorbed beyond is the overspend
        assert totals.absorbed_micros <= CHARGE
        assert traffic.served == (totals.billed_micros + totals.absorbed_micros
                                  - 90_000) // CHARGE
        # each server said that the service did not answer, and then that it did (a
        # loaded machine's report may time out later: each outage is said once, each
        # end once); the service logged its start line; no log holds the internal token
        for i in range(4):
            text = (tmp_path / f"ads{i}.log").read_text()
            down = text.count("shard 0 does not answer")
            up = text.count("shard 0 answers again")
            assert down >= 1 and up >= 1 and down - up in (0, 1), text[-2000:]
            assert text.index("shard 0 does not answer") < text.index("shard 0 answers again")
            assert "HTTP Request: POST" not in text  # httpx's line per report, quieted
            assert INTERNAL_TOKEN not in text
        budget_log = (tmp_path / "budget.log").read_text()
        assert budget_log.count(" budget-service listening on http://") == 1, budget_log
        assert INTERNAL_TOKEN not in budget_log
    finally:
        stop.set()
        http.close()
        for s in servers:
            s.stop()
        if service is not None:
            service.stop()
        engine.dispose()
