"""Every report names the server's currency (issue #26): the setting ``currency`` (ISO
4217, default USD, checked at start-up) in the campaign report, the rollup reports (JSON
and CSV) and the placement report."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from adfunnel.clock import ManualClock
from adfunnel.runtime.asgi import build_app
from adfunnel.runtime.embedded import build_runtime
from adfunnel.settings import SettingsError, load_settings
from tests.api_keys import ADMIN_HEADERS, ADMIN_KEY


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = load_settings(database_url="sqlite://", clock="manual", token_secret="k" * 32,
                             admin_key=ADMIN_KEY, currency="JPY", budget="local")
    rt = build_runtime(settings, ManualClock(datetime(2026, 7, 15, 9, tzinfo=UTC)), seed=1)
    try:
        with TestClient(build_app(rt), headers=ADMIN_HEADERS) as c:
            yield c
    finally:
        rt.close()


def test_every_report_names_the_configured_currency(client: TestClient) -> None:
    """Mutation that turns it red: any report leaving ``currency`` at its default (the
    campaign report without ``out.currency = currency``, a rollup router not given it)."""
    adv = client.post("/v1/advertisers", json={"name": "a"}).json()
    cid = client.post("/v1/campaigns", json={
        "advertiser_id": adv["id"], "name": "c", "objective": "impressions",
        "bid_type": "CPM", "bid_micros": 2_000_000, "daily_budget_micros": 10**8,
        "time_zone": "UTC", "flight_start": "2026-07-01"}).json()["id"]
    client.post("/v1/placements", json={"id": "feed", "name": "Feed"})
    for path in (f"/v1/campaigns/{cid}/report", f"/v1/campaigns/{cid}/report/rollups",
                 f"/v1/advertisers/{adv['id']}/report/rollups", "/v1/placements/feed/report",
                 "/v1/placements/feed/report/rollups"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.json()["currency"] == "JPY", path
    csv = client.get(f"/v1/campaigns/{cid}/report/rollups", headers={"Accept": "text/csv"})
    assert "currency" in csv.text.splitlines()[0].split(",")


@pytest.mark.parametrize("bad", ["usd", "EURO", "", "U5D", "UDS", "ZZZ"])
def test_a_currency_that_is_no_iso_code_stops_the_start(bad: str) -> None:
    """Mutation that turns it red: the setting without its pattern; for three capitals
    that name no currency (``UDS``, a typo of USD: the server started and no exchange
    request, whose ``cur`` lacks it, got a bid), ``_iso_currency`` removed."""
    with pytest.raises(SettingsError) as exc:
        load_settings(currency=bad)
    assert any(p.startswith("currency:") for p in exc.value.problems)
