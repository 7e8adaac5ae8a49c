"""Goals and flight budgets end to end: a real ``adfunnel serve`` process on PostgreSQL,
on a manual clock, driven over HTTP (issue #25).

A guaranteed line (an impression goal over a one-day flight) and a flight-budget
auction campaign (accelerated: it presses on its limit within hours) are created
through the API; a day of requests is sent with the clock moved every 10 minutes, and
every served ad's impression beacon fired. Read straight from the ledger table
afterwards: the guaranteed line never billed above its goal's cost nor more than its
goal's impressions, the flight campaign never above its flight budget, and both
billed something (the limits were reached for, not idle).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text

from adfunnel.sim.server_proc import ManagedProcess
from tests.api_keys import ADMIN_HEADERS

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

#: ``adfunnel serve`` start-up limit, seconds (a 2-core machine shared with other runs).
START_S = 120.0
BROWSER = {"user-agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 "
                         "Firefox/128.0"}
DAY = datetime(2026, 11, 2, tzinfo=UTC)
AUDIENCE = "e2e-flight"
GOAL = 40  # impressions
RATE_CPM = 5_000_000  # the guaranteed line's contract rate, micros per 1000
FLIGHT_BUDGET = 400_000  # micros
STEP_S = 600  # the clock moves every 10 minutes
PER_STEP = 4  # requests per step: 576 in the day, many times what either limit buys


@pytest.fixture
def serve(pg_url: str, pg_admin: Engine, tmp_path: Any) -> Iterator[tuple[str, Engine]]:
    """``adfunnel serve --clock manual`` on a fresh PostgreSQL schema, and an engine on it."""
    schema = f"t_{uuid.uuid4().hex[:20]}"
    with pg_admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in pg_url else "?"
    db_url = f"{pg_url}{sep}options={quote(f'-csearch_path={schema}')}"
    engine = create_engine(db_url, pool_size=1)
    # every beacon comes from 127.0.0.1: tier-2 rates would reverse them
    env = {"ADFUNNEL_IVT_TIER2": "false", "ADFUNNEL_SEED": "5"}
    try:
        with ManagedProcess(["serve", "--database-url", db_url, "--clock", "manual"],
                            health_path="/readyz", extra_env=env, timeout_s=START_S,
                            log_path=tmp_path / "serve.log") as proc:
            yield proc.url, engine
    finally:
        engine.dispose()
        with pg_admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


def _set_clock(c: httpx.Client, at: datetime) -> None:
    r = c.put("/v1/admin/clock", json={"now": at.isoformat()})
    assert r.status_code == 200, r.text


def _line(c: httpx.Client, name: str, bid: int, **fields: Any) -> int:
    adv = c.post("/v1/advertisers", json={"name": name})
    assert adv.status_code == 201, adv.text
    r = c.post("/v1/campaigns", json={
        "advertiser_id": adv.json()["id"], "name": name, "objective": "impressions",
        "bid_type": "CPM", "bid_micros": bid, "time_zone": "UTC",
        "flight_start": DAY.date().isoformat(), "flight_end": DAY.date().isoformat(),
        "billable_event": "rendered", "targeting": {"attr": "audiences", "in": [AUDIENCE]},
        **fields})
    assert r.status_code == 201, r.text
    cid = int(r.json()["id"])
    ad = c.post(f"/v1/campaigns/{cid}/ads", json={
        "landing_url": f"https://{name}.example/", "creative_ref": f"{name}.png",
        "format": "banner", "width": 300, "height": 250})
    assert ad.status_code == 201, ad.text
    return cid


def _ledger(engine: Engine, campaign_id: int) -> tuple[int, int, int]:
    """(impressions billed, billed micros, absorbed micros) of ``campaign_id``."""
    with engine.connect() as conn:
        row = conn.execute(text(
            "SELECT count(*) FILTER (WHERE event_type = 'impression' AND billed_micros > 0),"
            " coalesce(sum(billed_micros), 0), coalesce(sum(absorbed_micros), 0)"
            " FROM ledger WHERE campaign_id = :c"), {"c": campaign_id}).one()
    return int(row[0]), int(row[1]), int(row[2])


def test_goal_and_flight_budget_never_billed_above(serve: tuple[str, Engine]) -> None:
    url, engine = serve
    with httpx.Client(base_url=url, timeout=30.0, headers=ADMIN_HEADERS) as c:
        _set_clock(c, DAY - timedelta(minutes=5))
        guaranteed = _line(c, "guaranteed", RATE_CPM, priority="guaranteed",
                           goal={"metric": "impressions", "total": GOAL})
        flight = _line(c, "flight", 10_000_000, budget_period="flight",
                       flight_budget_micros=FLIGHT_BUDGET, pacing_mode="accelerated")
        # a runner-up of the auction, so the flight campaign pays a second price
        _line(c, "runner-up", 9_000_000, daily_budget_micros=10_000_000_000)
        beacons = httpx.Client(base_url=url, timeout=30.0, headers=BROWSER)
        served: dict[int, int] = {}
        for step in range(86_400 // STEP_S):
            _set_clock(c, DAY + timedelta(seconds=step * STEP_S))
            for k in range(PER_STEP):
                r = c.post("/v1/ads:select", json={
                    "user": {"key": f"u{step}-{k}", "attributes": {"audiences": [AUDIENCE]}},
                    "placement": {"id": "feed"},
                    "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250}]})
                assert r.status_code in (200, 204), r.text
                if r.status_code == 204:
                    continue
                for ad in r.json()["ads"]:
                    served[ad["campaign_id"]] = served.get(ad["campaign_id"], 0) + 1
                    assert beacons.get(ad["impression_url"]).status_code in (200, 204)
        beacons.close()
        _set_clock(c, DAY + timedelta(days=1, hours=1))
        assert c.post("/v1/admin/events:settle").status_code == 200
    g_imps, g_billed, g_absorbed = _ledger(engine, guaranteed)
    f_imps, f_billed, f_absorbed = _ledger(engine, flight)
    facts = (f"guaranteed: served {served.get(guaranteed)}, billed {g_imps} imps "
             f"{g_billed} µ, absorbed {g_absorbed}; flight: served {served.get(flight)}, "
             f"billed {f_imps} imps {f_billed} µ, absorbed {f_absorbed}")
    assert g_billed <= GOAL * RATE_CPM // 1000, facts
    assert g_imps <= GOAL, facts
    assert f_billed <= FLIGHT_BUDGET, facts
    assert g_billed > 0 and f_billed > FLIGHT_BUDGET // 2, facts
